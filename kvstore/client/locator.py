"""Where a batch's keys live: from still-valid read leases (kvstore.client.lease_cache), else one master
request per MAX_KEYS keys."""

from __future__ import annotations

import time
from typing import Any

from kvstore.client.lease_cache import LeaseCache
from kvstore.cluster.session import Session
from kvstore.rpc import messages as m
from kvstore.rpc import validate as v


class Locator:
    def __init__(self, session: Session, leases: LeaseCache) -> None:
        self.session = session
        self.leases = leases

    def locate(
        self, keys: list[str], prefix: bool = False, direct: bool = True
    ) -> tuple[list[Any], list[bool]]:
        """Replica lists per key (None: absent): from still-valid leases, else one master RPC.
        With `prefix`, the master does not look up (nor lease) keys after the first absent one. With
        `direct`, disk-only objects on this host's disk tiers come back as disk locations to read here."""
        session = self.session
        host_id = session.host_id if direct and session.config.disk_direct_reads else ""
        found = self.leases.lookup(keys)
        cached = [f is not None for f in found]
        missing = [i for i, hit in enumerate(cached) if not hit and v.key_ok(keys[i])]
        for start in range(0, len(missing), v.MAX_KEYS):  # in requests the master bounds
            chunk = missing[start : start + v.MAX_KEYS]
            asked = [keys[i] for i in chunk]
            granted_at = time.monotonic()
            reply = session.master.call(m.GetReplicas(keys=asked, prefix=prefix, host_id=host_id))
            self.leases.fill(asked, reply, granted_at)
            for i, entry in zip(chunk, reply, strict=True):
                found[i] = entry
            if prefix and None in reply:
                break  # the prefix ended in this chunk: nothing after it is worth a lookup
        return found, cached
