"""A peer engine in its own process, for integration tests.

Prints one line `READY <segment> <memfd-region-id> <numpy-region-id> <gpu-region-id>` once serving; the
regions hold pattern(i) = (i * 7 + 3) % 251 (the GPU one is device memory, 0 without a GPU). Exits when
stdin closes.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from transfer_engine import TransferEngine, cuda


def pattern(n: int, seed: int = 0) -> np.ndarray:
    return ((np.arange(n, dtype=np.uint64) * 7 + 3 + seed) % 251).astype(np.uint8)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=8 << 20)
    parser.add_argument("--transport", default="auto")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    with TransferEngine(
        host=args.host, port=args.port, transport=args.transport, tcp_io_timeout=2.0
    ) as engine:
        shared = engine.allocate(args.size)
        shared.array[:] = pattern(args.size)
        plain = np.empty(args.size, dtype=np.uint8)  # not memfd-backed: shm reaches it by CMA
        plain[:] = pattern(args.size)
        numpy_region = engine.register(plain, export=True)
        device = cuda.DeviceMemory(args.size) if cuda.available() else None
        gpu_region = 0
        if device is not None:
            cuda.copy_to_device(0, [device.ptr], [plain.ctypes.data], [args.size])
            gpu_region = engine.register_ptr(device.ptr, args.size, kind="gpu:0", export=True).id
        print(f"READY {engine.name} {shared.id} {numpy_region.id} {gpu_region}", flush=True)
        for line in sys.stdin:
            # "CHECK <region> <offset> <length> <seed>": verify a written range, answer OK/BAD.
            _, which, offset, length, seed = line.split()
            if which == "gpu" and device is not None:
                got = np.empty(args.size, np.uint8)
                cuda.copy_to_host(0, [device.ptr], [got.ctypes.data], [args.size])
            else:
                region = shared if which == "shared" else numpy_region
                assert region.array is not None
                got = region.array
            good = np.array_equal(
                got[int(offset) : int(offset) + int(length)], pattern(int(length), int(seed))
            )
            print("OK" if good else "BAD", flush=True)


if __name__ == "__main__":
    main()
