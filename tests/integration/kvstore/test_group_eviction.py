"""Eviction under pressure with store groups (issue 40, item 4): real master and node processes, three writer
processes each putting its share of every group's members (so no group is written by one process; some
groups are left incomplete on purpose), and concurrent readers doing match_prefix, exists and get on the
member keys. No reader ever sees a group partly: matched, existing or loaded is all n members or none
(a load that got some members but not others finds the group absent afterwards: it was evicted whole
while the bytes moved, fenced off like a removal)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from kvstore import Store
from kvstore.blocks import group_keys

from .conftest import Cluster

MEMBERS, WRITERS, GROUPS = 4, 3, 360
SIZE = 256 << 10  # 4 members: 1 MiB a group, 360 MiB put into 128 MiB of segments


def is_incomplete(g: int) -> bool:
    return g % 5 == 0  # member 2 of these is never written


# The writer processes: writer w puts member i of each group where i % WRITERS == w (group order).
WRITER = """
import sys
from kvstore import Store
from kvstore.blocks import member_key
from kvstore.errors import KVStoreError
master, w, writers, members, groups, size = sys.argv[1], *map(int, sys.argv[2:])
def value(g, i):
    head = f"{g}:{i}:".encode()
    return head + bytes([(g * 31 + i) % 251]) * (size - len(head))
failed = 0
with Store.connect(master) as store:
    for g in range(groups):
        for i in range(w, members, writers):
            if g % 5 == 0 and i == 2:
                continue
            try:
                store.put(member_key(f"grp{g}", i, members), value(g, i))
            except KVStoreError:
                failed += 1
print("failed", failed)
"""


def value(g: int, i: int) -> bytes:
    head = f"{g}:{i}:".encode()
    return head + bytes([(g * 31 + i) % 251]) * (SIZE - len(head))


class Seen:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.whole_loads = 0
        self.whole_matches = 0
        self.torn_then_absent = 0
        self.errors: list[str] = []

    def fail(self, why: str) -> None:
        with self.lock:
            self.errors.append(why)


def read_groups(master: str, stop: threading.Event, seen: Seen, start: int) -> None:
    with Store.connect(master) as store:
        g = start
        while not stop.is_set():
            g = (g + 7) % GROUPS
            keys = group_keys(f"grp{g}", MEMBERS)
            exists = store.batch_exists(keys)
            matched = store.match_prefix(keys).matched
            values = store.batch_get(keys)
            if len(set(exists)) != 1:
                seen.fail(f"group {g}: exists {exists}")
            if matched not in (0, MEMBERS):
                seen.fail(f"group {g}: {matched} of {MEMBERS} matched")
            loaded = [v is not None for v in values]
            for i, v in enumerate(values):
                if v is not None and v != value(g, i):
                    seen.fail(f"group {g} member {i}: wrong bytes")
            if is_incomplete(g) and (any(loaded) or matched or any(exists)):
                seen.fail(f"incomplete group {g} seen: {exists} {matched} {loaded}")
            with seen.lock:
                seen.whole_matches += matched == MEMBERS
                seen.whole_loads += all(loaded)
            if any(loaded) and not all(loaded):
                # Evicted (or removed) while the bytes moved: then it is gone whole, never partly there.
                after = store.batch_exists(keys)
                if any(after):
                    seen.fail(f"group {g}: loaded {loaded}, then exists {after}")
                with seen.lock:
                    seen.torn_then_absent += 1


def test_no_reader_sees_a_group_partly_under_eviction_pressure(cluster: Cluster) -> None:
    stop, seen = threading.Event(), Seen()
    readers = [
        threading.Thread(target=read_groups, args=(cluster.master, stop, seen, r), daemon=True)
        for r in range(2)
    ]
    for reader in readers:
        reader.start()
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, cluster.master, *map(str, (w, WRITERS, MEMBERS, GROUPS, SIZE))],
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(WRITERS)
    ]
    try:
        outputs = [proc.communicate(timeout=240)[0] for proc in writers]
    finally:
        for proc in writers:
            proc.kill()
        time.sleep(1.0)  # (readers go on a moment over the final state)
        stop.set()
        for reader in readers:
            reader.join(timeout=60)
    assert all(proc.returncode == 0 for proc in writers), outputs
    assert not seen.errors, seen.errors[:10]
    with Store.connect(cluster.master) as store:
        stats = store.stats()["master"]
        # The pressure was real: groups were evicted, and whole groups were read back.
        assert stats["evictions"] >= MEMBERS * 50, stats["evictions"]
        assert seen.whole_loads > 0 and seen.whole_matches > 0, vars(seen)
        # What is left: every group present whole or absent whole, none of the incomplete ones visible.
        for g in range(GROUPS):
            keys = group_keys(f"grp{g}", MEMBERS)
            exists = store.batch_exists(keys)
            assert len(set(exists)) == 1 and not (is_incomplete(g) and exists[0]), (g, exists)
            if exists[0]:
                assert store.batch_get(keys) == [value(g, i) for i in range(MEMBERS)]
