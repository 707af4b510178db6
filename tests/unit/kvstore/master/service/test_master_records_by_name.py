"""The master builds the records it sends by field name: a put's Placement of each replica, and the place
(tier, host, engine, region) of each memory segment that the C++ table starts a reader's Location with."""

from __future__ import annotations

from kvstore import rpc
from kvstore.config import MasterConfig
from kvstore.master.ledger.locations import SegmentPlace
from kvstore.master.ledger.model import Replica
from kvstore.master.planners.placement import placement_of
from kvstore.master.service import reads
from kvstore.master.service.handlers import Handlers
from kvstore.master.service.state import MasterState
from kvstore.rpc import messages as m
from kvstore.rpc.messages import MountSegment
from tests.unit.kvstore.master.state_helpers import started_items

MiB = 1 << 20


def two_segment_state() -> MasterState:
    """Two nodes on two hosts whose engines, regions and sizes all differ, so no field equals another."""
    state = MasterState(MasterConfig.load())
    for i, host in enumerate(["h0", "h1"]):
        state.members.register_client(f"c{i}", host)
        state.members.mount_segment(
            MountSegment(f"c{i}", f"127.0.0.1:{7100 + i}", 11 + i, (64 + 8 * i) * MiB, host, 1 << 20)
        )
    return state


def same_place(placement: m.Placement, replica: Replica) -> bool:
    seg = replica.segment
    return (
        placement.engine == seg.engine
        and placement.region_id == seg.region_id
        and placement.offset == replica.offset
        and placement.slot == replica.slot
        and placement.gen == replica.gen
    )


def test_a_put_start_reply_names_each_replica_field_by_field() -> None:
    state = two_segment_state()
    handlers = Handlers(state)
    state.puts.put_start("c0", "first", 3 * MiB, 1, 1, False)  # (so the next replicas' offsets are not 0)
    items = [m.PutItem(f"k{i}", (i + 1) * 4096, i) for i in range(6)]
    reply = started_items(handlers.put_start(m.PutStart("c0", items, 2, False, 0)))
    assert isinstance(reply, list) and len(reply) == len(items)
    for item, result in zip(items, reply, strict=True):
        assert result.code == 0
        replicas = state.objects[item.key].replicas
        assert len(result.value) == len(replicas) == 2
        for placement, replica in zip(result.value, replicas, strict=True):
            assert type(placement) is m.Placement
            assert same_place(placement, replica), (placement, replica)
            assert placement == placement_of(replica)


def test_each_memory_segment_has_its_place_by_name_and_readers_get_it() -> None:
    state = two_segment_state()
    for seg in state.space.segments.values():
        place = state.ledger.objects.places[seg.id]
        assert type(place) is SegmentPlace
        assert place == SegmentPlace(
            tier=seg.tier, host_id=seg.host_id, engine=seg.engine, region_id=seg.region_id
        )
    assert SegmentPlace._fields == m.Location._fields[: len(SegmentPlace._fields)]
    state.puts.put_start("c0", "k", 4096, 7, 2, False)
    state.puts.put_end("c0", "k")
    found = reads.locations(
        state.access, reads.look_up(state.access, state.disk, ["k"], "h0", False)
    )  # encoded in the C++ table
    (hit,) = m.GetReplicas.decode_reply(rpc.unpack(rpc.pack(found)[rpc.HEADER_SIZE :]))
    by_engine = {loc.engine: loc for loc in hit.locations}
    for replica in state.objects["k"].replicas:
        seg, loc = replica.segment, by_engine[replica.segment.engine]
        assert (loc.tier, loc.host_id, loc.region_id) == (seg.tier, seg.host_id, seg.region_id)
        assert (loc.offset, loc.slot, loc.gen) == (replica.offset, replica.slot, replica.gen)
