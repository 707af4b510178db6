"""`kvstore node`: a storage process that contributes one segment to the pool and serves transfers."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

from kvstore.client.store import Store

READY_PREFIX = "READY "


def run_node(master: str, segment_size: int, host: str = "127.0.0.1", protocol: str = "auto") -> None:
    """Serves until SIGTERM/SIGINT, or until stdin closes when it is a pipe (a parent's lifeline)."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with Store.connect(
        master, segment_size=segment_size, buffer_size="4MiB", host=host, protocol=protocol
    ) as store:
        print(f"{READY_PREFIX}{store.engine.name} client={store.client_id}", flush=True)
        if not sys.stdin.isatty():

            def watch_stdin() -> None:
                with contextlib.suppress(OSError, ValueError):
                    sys.stdin.read()
                stop.set()

            threading.Thread(target=watch_stdin, daemon=True).start()
        stop.wait()
