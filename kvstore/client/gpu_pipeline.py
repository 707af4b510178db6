"""Overlaps a batch's GPU staging copies with its network transfers.

Values in GPU memory move through host staging: device-to-host before a put sends them, host-to-device
once a get has read and verified them. Done whole, copies and network take turns. Cut into chunks of
about `chunk_bytes` of GPU values, chunk k+1 is copied while chunk k is on the wire (put), and chunk k is
copied while chunk k+1 is read (get), on one helper thread (the copies release the interpreter lock).
A put's chunks are separate master requests (each names its values' checksums, known only once their
bytes are in host memory), so chunks are large enough to amortise them; a batch within one chunk moves
whole, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from kvstore.client.gpu_buffers import GpuMemory, GpuStaged

T = TypeVar("T")


class StagingPipeline:
    def __init__(self, gpu: GpuMemory, chunk_bytes: int) -> None:
        self.gpu = gpu
        self.chunk_bytes = chunk_bytes
        self._helper: ThreadPoolExecutor | None = None  # started on the first batch worth cutting

    def chunks(self, values: Sequence[Any]) -> list[tuple[int, int]]:
        """Index ranges holding about chunk_bytes of GPU values each; one range when not worth cutting."""
        if not self._staging_gpu():
            return [(0, len(values))]
        total = sum(v.size for v in values if isinstance(v, GpuStaged))
        if not total or self.chunk_bytes <= 0 or total <= self.chunk_bytes:
            return [(0, len(values))]
        out: list[tuple[int, int]] = []
        start = held = 0
        for i, value in enumerate(values):
            held += value.size if isinstance(value, GpuStaged) else 0
            if held >= self.chunk_bytes:
                out.append((start, i + 1))
                start, held = i + 1, 0
        if start < len(values):
            out.append((start, len(values)))
        return out

    def put(self, values: Sequence[Any], send: Callable[[int, int], list[T]]) -> list[T]:
        """send(start, end) for each chunk, once its GPU values are in their host blocks."""
        spans = self.chunks(values)
        self._download(values[slice(*spans[0])])
        out: list[T] = []
        for k, (start, end) in enumerate(spans):
            following = None
            if k + 1 < len(spans):
                following = self._background(self._download, values[slice(*spans[k + 1])])
            try:
                out += send(start, end)
            finally:
                if following is not None:  # its host blocks are released only once the copy is over
                    following.result()
        return out

    def get(self, values: Sequence[Any], read: Callable[[int, int], list[int]]) -> list[int]:
        """read(start, end) per chunk (bytes read per value, or a negative code); each chunk's GPU values
        get their verified bytes while the next chunk is read. All copies are over when it returns."""
        spans = self.chunks(values)
        out: list[int] = []
        uploads: list[Future[None]] = []
        try:
            for start, end in spans:
                results = read(start, end)
                out += results
                chunk = values[start:end]
                if len(spans) == 1:
                    self._upload(chunk, results)
                else:
                    uploads.append(self._background(self._upload, chunk, results))
        finally:
            for upload in uploads:
                upload.exception()  # wait for all before the host blocks can be released
        for upload in uploads:
            upload.result()
        return out

    def close(self) -> None:
        if self._helper is not None:
            self._helper.shutdown(wait=True)
            self._helper = None

    # -- moves ------------------------------------------------------------------------------------------
    def _staging_gpu(self) -> bool:
        """Whether GPU values can be in a batch at all: their staging exists once one was seen, so a
        host-only client skips every per-value check here."""
        return self.gpu.staging.allocated

    def _download(self, values: Sequence[Any]) -> None:
        if not self._staging_gpu():
            return
        gpu = [v for v in values if isinstance(v, GpuStaged)]
        if gpu:
            self.gpu.download(gpu)

    def _upload(self, values: Sequence[Any], results: Sequence[int]) -> None:
        if not self._staging_gpu():
            return
        gpu = [(v, r) for v, r in zip(values, results, strict=True) if isinstance(v, GpuStaged) and r > 0]
        if gpu:
            self.gpu.upload([v for v, _ in gpu], [r for _, r in gpu])

    def _background(self, fn: Callable[..., None], *args: Any) -> Future[None]:
        if self._helper is None:
            self._helper = ThreadPoolExecutor(1, thread_name_prefix="kvstore-gpu-staging")
        return self._helper.submit(fn, *args)
