"""The master's accept loop (kvstore.master.listener.Listener) alone in a process whose RLIMIT_NOFILE is
tiny, holding every connection it accepts (each is greeted with b"hi"): what the master's accept loop does
once its process is out of descriptors. Prints `READY HOST:PORT`; exits when stdin closes.

    python tests/helpers/listener_process.py NOFILE
"""

from __future__ import annotations

import asyncio
import logging
import resource
import sys

from kvstore.master.wire.listener import Listener, listening_socket


class _Hold(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(b"hi")  # type: ignore[attr-defined]


async def _main(nofile: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    listener = Listener(listening_socket("127.0.0.1", 0), _Hold, what="test listener")
    listener.start()
    print(f"READY {listener.address}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    listener.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
    asyncio.run(_main(int(sys.argv[1])))
