"""A segment's mount is checked against the engine it names before anything is placed on it (issue 22:
a client that mounted a made-up region of a real node made other clients' gets miss): through the
engine's own authenticated handshake, its descriptor must name the mounting client as its owner (the
client id its session registered; kvstore.cluster.session sets it) and export the region with at least
the size mounted. The same handshake is the master's own probe of a node clients report unreachable
(kvstore.master.service.suspicion). The handshake runs on a thread of this checker, never on the master's
loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable

CHECK_THREADS = 4  # mounts checked at once (each a handshake: a round trip, at most its timeout)


class MountCheck:
    def __init__(self, loop: asyncio.AbstractEventLoop, secret: bytes, timeout: float) -> None:
        self._loop = loop
        self._secret = secret
        self._pool = concurrent.futures.ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="mount-check")
        self.timeout = timeout

    def check(
        self, client_id: str, engine: str, region_id: int, size: int, done: Callable[[str | None], None]
    ) -> None:
        """Runs `done(None)` on the loop if the mount holds, else `done(why not)`."""

        def run() -> None:
            why = self._refusal(client_id, engine, region_id, size)
            self._loop.call_soon_threadsafe(done, why)

        self._pool.submit(run)

    def probe(self, engine: str, owner: str, done: Callable[[str | None], None]) -> None:
        """Runs `done(None)` on the loop if `engine` answers as `owner`'s, else `done(why not)`."""

        def run() -> None:
            why, _ = self._owned(owner, engine)
            self._loop.call_soon_threadsafe(done, why)

        self._pool.submit(run)

    def _owned(self, client_id: str, engine: str) -> tuple[str | None, dict[int, int]]:
        """(None, the engine's region lengths) when it answers as `client_id`'s, else (why not, {})."""
        from transfer_engine.engine import peer_owned_regions  # (the data plane loads at a mount's check)

        try:
            owner, lengths = peer_owned_regions(engine, self.timeout, self._secret)
        except Exception as exc:  # any failure to reach it is a refusal, said as such
            return f"the master could not reach engine {engine} to check the segment: {exc}", {}
        if owner != client_id:
            return f"engine {engine} is not this client's (its owner is {owner or 'not set'})", {}
        return None, lengths

    def _refusal(self, client_id: str, engine: str, region_id: int, size: int) -> str | None:
        why, lengths = self._owned(client_id, engine)
        if why is not None:
            return why
        length = lengths.get(region_id)
        if length is None:
            return f"engine {engine} exports no region {region_id}"
        if length < size:
            return f"region {region_id} of engine {engine} holds {length} bytes, not the {size} mounted"
        return None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
