"""Type stub of the C++ extension (csrc/bind)."""

from typing import Any

import numpy as np
import numpy.typing as npt

FRAME_HEADER_SIZE: int

class Batch:
    @property
    def size(self) -> int: ...
    def done(self) -> bool: ...
    def states(self) -> npt.NDArray[np.int32]: ...
    def errors(self) -> npt.NDArray[np.int32]: ...

class Engine:
    def __init__(
        self,
        host: str,
        port: int,
        protocol: str,
        enable_shm: bool,
        copy_threads: int,
        copy_slice_size: int,
        tcp_connections: int,
        tcp_slice_size: int,
        max_payload: int,
        io_timeout_ms: int,
        connect_timeout_ms: int,
    ) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def id(self) -> int: ...
    def register(self, addr: int, length: int, location: str, exported: bool) -> dict[str, Any]: ...
    def allocate(
        self, length: int, location: str, exported: bool
    ) -> tuple[dict[str, Any], npt.NDArray[np.uint8]]: ...
    def unregister(self, region_id: int) -> None: ...
    def regions(self) -> list[dict[str, Any]]: ...
    def descriptor(self) -> dict[str, Any]: ...
    def open_segment(self, name: str, protocol: str = "") -> int: ...
    def refresh_segment(self, handle: int) -> None: ...
    def segment_info(self, handle: int) -> dict[str, Any]: ...
    def submit(
        self,
        ops: npt.NDArray[np.uint8],
        local_addrs: npt.NDArray[np.uint64],
        segments: npt.NDArray[np.uint32],
        region_ids: npt.NDArray[np.uint64],
        offsets: npt.NDArray[np.uint64],
        lengths: npt.NDArray[np.uint64],
        timeout_ms: int,
    ) -> Batch: ...
    def wait(self, batch: Batch, timeout_ms: int) -> bool: ...
    def transfer(
        self,
        op: int,
        local_addr: int,
        segment: int,
        region_id: int,
        offset: int,
        length: int,
        timeout_ms: int,
    ) -> tuple[int, int]: ...

def decode_frame_header(data: bytes, max_payload: int = ...) -> dict[str, int]: ...
def encode_frame_header(
    opcode: int,
    status: int = 0,
    request_id: int = 0,
    region_id: int = 0,
    key: int = 0,
    offset: int = 0,
    length: int = 0,
) -> bytes: ...
def decode_descriptor(data: bytes) -> tuple[str, int, int]: ...
def memcpy_baseline(
    block_size: int, working_set: int, duration_s: float, threads: int = 1
) -> dict[str, float]: ...
def tcp_stream_baseline(
    host: str, connections: int, block_size: int, working_set: int, duration_s: float
) -> dict[str, float]: ...
def __getattr__(name: str) -> Any: ...
