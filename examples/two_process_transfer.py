"""Two processes moving bytes with the transfer engine.

Terminal 1:  python examples/two_process_transfer.py serve
Terminal 2:  python examples/two_process_transfer.py fetch 127.0.0.1:PORT   (the address serve printed)

Run with no argument to do both here (a child process plays the server).
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np

from transfer_engine import Op, RequestState, TransferEngine

SIZE = 64 << 20


def serve() -> None:
    with TransferEngine(host="127.0.0.1") as engine:
        region = engine.allocate(SIZE)  # pre-faulted, shareable with same-host peers
        assert region.array is not None
        region.array[:] = np.arange(SIZE, dtype=np.uint64).astype(np.uint8)
        print(engine.name, flush=True)
        sys.stdin.read()  # serve until stdin closes (Ctrl-D in a terminal)


def fetch(address: str, transport: str = "auto") -> None:
    with TransferEngine(transport=transport) as engine:
        local = engine.allocate(SIZE)
        peer = engine.open_peer(address)  # handshake: learns the peer's regions and transports
        remote = peer.regions[0]
        start = time.perf_counter()
        engine.read(local.addr, peer, remote.id, 0, SIZE)  # one call, sliced over several paths
        seconds = time.perf_counter() - start
        assert local.array is not None
        ok = np.array_equal(local.array, np.arange(SIZE, dtype=np.uint64).astype(np.uint8))
        print(f"read {SIZE >> 20} MiB over {peer.transport} in {seconds * 1e3:.1f} ms, verified={ok}")

        # Write back the first MiB, batched: four 256 KiB requests submitted at once.
        offsets = np.arange(4, dtype=np.uint64) * (256 << 10)
        handle = engine.submit(Op.WRITE, local.addr + offsets, peer, remote.id, offsets, 256 << 10)
        handle.wait()
        handle.raise_for_status()
        print("batch write:", [RequestState(s).name for s in handle.states()])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve()
    elif len(sys.argv) > 2 and sys.argv[1] == "fetch":
        fetch(sys.argv[2], *(sys.argv[3:4]))
    else:
        child = subprocess.Popen(
            [sys.executable, __file__, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None and child.stdin is not None
        peer = child.stdout.readline().strip()
        try:
            fetch(peer, "tcp")
            fetch(peer, "auto")
        finally:
            child.stdin.close()
            child.wait()


if __name__ == "__main__":
    main()
