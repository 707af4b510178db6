"""Type stub of the bench and test tools extension (csrc/tools)."""

FRAME_HEADER_SIZE: int

def decode_frame_header(data: bytes, max_payload: int = ...) -> dict[str, int]: ...
def hmac_sha256(key: bytes, message: bytes) -> bytes: ...
def encode_frame_header(
    opcode: int,
    status: int = 0,
    request_id: int = 0,
    region_id: int = 0,
    key: int = 0,
    offset: int = 0,
    length: int = 0,
    fence_slot: int = 0,
    fence_gen: int = 0,
) -> bytes: ...
def decode_descriptor(data: bytes) -> tuple[str, int, int]: ...
def memcpy_baseline(
    block_size: int, working_set: int, duration_s: float, threads: int = 1
) -> dict[str, float]: ...
def tcp_stream_baseline(
    host: str,
    connections: int,
    block_size: int,
    working_set: int,
    duration_s: float,
    socket_buffer: int = ...,
) -> dict[str, float]: ...
def ucx_rma_baseline(
    write: bool, block_size: int, batch: int, working_set: int, duration_s: float, target: bytes = b""
) -> dict[str, float]: ...
def ucx_rma_serve(working_set: int, out_fd: int, in_fd: int) -> None: ...
