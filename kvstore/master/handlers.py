"""RPC methods of the master: validate parameters, call the state, shape per-item results.

Batch methods answer per item ([code, message, payload]) so one bad key never hides the others.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from kvstore.errors import KVStoreError
from kvstore.master import validate as v
from kvstore.master.state import MasterState

U64 = 2**64 - 1


def _per_item(fn: Callable[[], Any]) -> list[Any]:
    try:
        return [0, "", fn()]
    except KVStoreError as exc:
        return [exc.code, str(exc), None]


class Handlers:
    def __init__(self, state: MasterState) -> None:
        self.state = state
        self.methods: dict[str, Callable[[dict[str, Any]], Any]] = {
            name: getattr(self, name)
            for name in (
                "register_client",
                "heartbeat",
                "close_client",
                "mount_segment",
                "unmount_segment",
                "put_start",
                "put_end",
                "put_revoke",
                "get_replicas",
                "exists",
                "remove",
                "remove_all",
                "stats",
                "ping",
                "match_prefix",
                "replica_done",
                "change_replica",
            )
        }

    def ping(self, params: dict[str, Any]) -> str:
        return "pong"

    def register_client(self, params: dict[str, Any]) -> dict[str, float]:
        self.state.register_client(v.text(params, "client_id"), v.text(params, "host_id"))
        c = self.state.config
        return {
            "heartbeat_interval": c.heartbeat_interval,
            "client_ttl": c.client_ttl,
            "lease_ttl": c.lease_ttl,
        }

    def heartbeat(self, params: dict[str, Any]) -> dict[str, Any]:
        """Keeps the client alive; hands it the replica copies its segments should make."""
        client = v.text(params, "client_id")
        known = self.state.heartbeat(client)
        if "touched" in params:  # reads the client served from leased locations
            self.state.touch(v.keys(params, "touched"))
        return {"known": known, "tasks": self.state.replicator.tasks_for(client) if known else []}

    def replica_done(self, params: dict[str, Any]) -> None:
        self.state.replicator.complete(
            v.text(params, "client_id"), v.integer(params, "task", 1, U64), v.flag(params, "ok")
        )

    def change_replica(self, params: dict[str, Any]) -> None:
        self.state.change_replica(v.key(v.field(params, "key")), v.integer(params, "replicas", 0, 64))

    def close_client(self, params: dict[str, Any]) -> None:
        self.state.drop_client(v.text(params, "client_id"))

    def mount_segment(self, params: dict[str, Any]) -> int:
        return self.state.mount_segment(
            v.text(params, "client_id"),
            v.text(params, "engine"),
            v.integer(params, "region_id", 1, U64),
            v.integer(params, "size", 1, 2**62),
            v.text(params, "host_id"),
        )

    def unmount_segment(self, params: dict[str, Any]) -> None:
        self.state.unmount_segment(v.text(params, "client_id"), v.integer(params, "segment_id", 1, U64))

    def put_start(self, params: dict[str, Any]) -> list[Any]:
        client = v.text(params, "client_id")
        items = v.put_items(params)
        replicas = v.integer(params, "replicas", 1, 64)
        pin = v.flag(params, "pin")

        def start(key: str, size: int, checksum: int) -> Any:
            placed = self.state.put_start(client, key, size, checksum, replicas, pin)
            if placed is None:
                return None  # already stored with the same bytes
            return [[r.segment.engine, r.segment.region_id, r.offset] for r in placed]

        return [_per_item(functools.partial(start, *item)) for item in items]

    def put_end(self, params: dict[str, Any]) -> list[Any]:
        client = v.text(params, "client_id")
        return [_per_item(functools.partial(self.state.put_end, client, k)) for k in v.keys(params)]

    def put_revoke(self, params: dict[str, Any]) -> list[Any]:
        client = v.text(params, "client_id")
        return [_per_item(functools.partial(self.state.put_revoke, client, k)) for k in v.keys(params)]

    def get_replicas(self, params: dict[str, Any]) -> list[Any]:
        """[size, checksum, replicas] per key, None for a miss. With `prefix`, keys after the first miss
        are not looked up (no lease, no access counted): a block is worthless without its prefix."""
        keys = v.keys(params)
        prefix = v.flag(params, "prefix")
        out: list[Any] = []
        for key in keys:
            meta = self.state.get_replicas(key)
            if meta is None:
                out.append(None)
                if prefix:
                    out.extend([None] * (len(keys) - len(out)))
                    break
                continue
            replicas = [
                [r.segment.engine, r.segment.region_id, r.offset, r.segment.host_id] for r in meta.replicas
            ]
            out.append([meta.size, meta.checksum, replicas])
        return out

    def match_prefix(self, params: dict[str, Any]) -> dict[str, Any]:
        """How many leading keys are stored, where each lives, and per node its own leading run."""
        matched = self.state.match_prefix(v.keys(params))
        where = [sorted({r.segment.engine for r in meta.replicas}) for meta in matched]
        per_node: dict[str, int] = {}
        for engine in {e for engines in where for e in engines}:
            n = 0
            while n < len(where) and engine in where[n]:
                n += 1
            per_node[engine] = n
        return {"matched": len(matched), "replicas": where, "per_node": per_node}

    def exists(self, params: dict[str, Any]) -> list[bool]:
        objects = self.state.objects
        return [(m := objects.get(k)) is not None and m.complete for k in v.keys(params)]

    def remove(self, params: dict[str, Any]) -> list[Any]:
        force = v.flag(params, "force")
        return [_per_item(functools.partial(self.state.remove, k, force)) for k in v.keys(params)]

    def remove_all(self, params: dict[str, Any]) -> int:
        return self.state.remove_all(v.flag(params, "force"))

    def stats(self, params: dict[str, Any]) -> dict[str, Any]:
        return self.state.stats()
