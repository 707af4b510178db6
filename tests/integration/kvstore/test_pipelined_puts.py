"""A batch put of many keys runs in chunks the master answers while the client writes their neighbours:
each key's outcome is still its own, and the client's connection stays in step."""

from __future__ import annotations

import numpy as np
import pytest

from kvstore import ObjectBusyError, ObjectExistsError, Store
from kvstore.client.put_chunk import PutChunk
from kvstore.client.store import PIPELINE_CHUNKS, PIPELINED_CHUNK
from kvstore.errors import InvalidArgumentError, MasterUnavailableError
from kvstore.rpc import messages as m
from tests.integration.kvstore.conftest import Cluster


def value(i: int, n: int = 512) -> bytes:
    return np.random.default_rng(i).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_each_key_of_a_pipelined_batch_put_has_its_own_outcome(cluster: Cluster) -> None:
    n = PIPELINED_CHUNK * PIPELINE_CHUNKS + 77  # several chunks
    keys = [f"p{i}" for i in range(n)]
    values = [value(i) for i in range(n)]
    with Store.connect(cluster.master) as store:
        # in different chunks: a key stored already with these bytes, one with other bytes, bad keys
        same, other = 5, n - 3
        assert store.batch_put_from([keys[same], keys[other]], [values[same], b"other bytes"]) == [0, 0]
        bad = [PIPELINED_CHUNK + 1, 2 * PIPELINED_CHUNK + 9]
        for i in bad:
            keys[i] = ""
        results = store.batch_put_detailed(keys, [[x] for x in values])
        for i, r in enumerate(results):
            if i in bad:
                assert r.code == -InvalidArgumentError.code, i
            elif i == other:
                assert r.code == -ObjectExistsError.code and r.replicas == 0
            elif i == same:
                assert r.code == 0 and r.replicas == 0  # the same bytes were there already
            else:
                assert r == (0, 1, 1, ""), (i, r)
        good = [i for i in range(n) if i not in bad and i != other]
        assert store.batch_get([keys[i] for i in good]) == [values[i] for i in good]
        assert store.get(keys[other]) == b"other bytes"
        # the connection is in step after it: a call gets its own reply
        assert store.batch_exists([keys[0], "absent"]) == [True, False]


def test_keys_of_chunks_a_master_forgot_fail_alone_and_the_client_joins_again(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The master forgets the client (here: it closes it, as it would one judged dead) while chunk 2 is
    written: chunks 0-1 were committed, the puts of chunks 2-3 went with the client. Each key says so (no
    exception hiding which were stored), and the next put registers the client again."""
    n = PIPELINED_CHUNK * PIPELINE_CHUNKS
    keys = [f"f{i}" for i in range(n)]
    values = [value(i, 64) for i in range(n)]
    with Store.connect(cluster.master) as store:
        write, chunks = PutChunk.write, []

        def forgotten_during_the_third(self: PutChunk, *args: object) -> set[str]:
            chunks.append(self)
            if len(chunks) == 3:
                store.master.call(m.CloseClient(client_id=store.client_id))
            return write(self, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(PutChunk, "write", forgotten_during_the_third)
        results = store.batch_put_detailed(keys, [[x] for x in values])
        monkeypatch.undo()
        assert len(chunks) == PIPELINE_CHUNKS
        stored = 2 * PIPELINED_CHUNK
        assert [r.code for r in results[:stored]] == [0] * stored
        assert all(r.code < 0 and r.replicas == 0 for r in results[stored:])
        assert store.batch_exists(keys) == [True] * stored + [False] * (n - stored)
        assert store.batch_get(keys[:stored]) == values[:stored]
        assert store.batch_put_from(keys[stored:], values[stored:]) == [0] * (n - stored)
        assert store.batch_get(keys) == values


def test_a_batch_that_names_a_key_twice_is_one_request_as_before(cluster: Cluster) -> None:
    """Not pipelined: in one request, a key's second put finds its first in progress (as it did before
    batches were cut into chunks); across chunks it could find it committed, or not, by timing."""
    n = PIPELINED_CHUNK * PIPELINE_CHUNKS
    keys = [f"d{i}" for i in range(n)] + ["d0"]
    values = [value(i) for i in range(n)] + [value(0)]
    with Store.connect(cluster.master) as store:
        results = store.batch_put_detailed(keys, [[x] for x in values])
        assert [r.code for r in results[:n]] == [0] * n
        assert results[n].code == -ObjectBusyError.code and "in progress" in results[n].message
        assert store.get("d0") == value(0)


def test_replies_are_received_in_any_order_and_an_abandoned_request_costs_its_connection(
    cluster: Cluster,
) -> None:
    with Store.connect(cluster.master) as store:
        store.put("here", b"x")
        master = store.master
        first = master.send(m.Exists(keys=["here"]))
        second = master.send(m.Exists(keys=["absent"]))
        assert master.receive(second) == [False]  # the first one's reply, read on the way, is kept
        assert master.receive(first) == [True]
        with pytest.raises(MasterUnavailableError, match="lost"):
            master.receive(first)  # received already
        left = master.send(m.Exists(keys=["here"]))
        master.abandon([left])  # its reply is never read: the next call takes a fresh connection
        with pytest.raises(MasterUnavailableError, match="lost"):
            master.receive(left)
        assert master.call(m.Exists(keys=["absent", "here"])) == [False, True]
