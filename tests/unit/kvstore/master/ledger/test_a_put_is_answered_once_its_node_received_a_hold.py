"""A put's end is answered only once the node of its copy acknowledged a hold of it that the node was
actually sent (kvstore.master.ledger.holds): the next master rebuilds the object from what the nodes name,
so an answer before that could lose acknowledged data in a failover. Two ways it was answered early (the
review of s43): a user's count set while the put waited told its hold again under a new number and the
earlier became a gap, so the node's empty acknowledgement passed the put's mark; and a node could
acknowledge numbers past anything it was sent. Driven through the master's state as the handlers do,
the node played by taking its holds and acknowledging what it received."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.master.service.state import MasterState
from kvstore.rpc.messages import HeldReplica
from tests.unit.kvstore.master.state_helpers import Clock, MiB, make_state

NODE = "c0"


def _state() -> MasterState:
    return make_state(Clock(), [("h0", 64 * MiB)])


def _waiting_put(state: MasterState, key: str, fired: list[str], name: str = "") -> None:
    """put_start and put_end of `key`, its answer waiting on its node's holds (as handlers.put_end);
    `name` (the key by default) is appended to `fired` once it is answered."""
    state.puts.put_start(NODE, key, MiB, 7, 1, False)
    errors, marks = state.puts.commit_puts(NODE, [key])
    assert errors == [None]
    if not state.space.holds.when_held(marks, lambda: fired.append(name or key), 60):
        fired.append(name or key)


def _take(state: MasterState, limit: int = 100) -> list[HeldReplica]:
    return [HeldReplica._make(h) for h in state.space.holds.take(NODE, limit)]


def test_a_count_set_while_a_put_waits_does_not_answer_it_before_its_node_received_a_hold() -> None:
    state, fired = _state(), list[str]()
    _waiting_put(state, "k", fired)
    state.access.change_replica("k", 1)  # another user's count: the object's hold is told again
    state.space.holds.acknowledge(NODE, 0)  # the node's next poll: it received nothing yet
    assert fired == []  # (the code before: answered, the hold still to be sent)
    held = _take(state)
    assert [h.key for h in held] == ["k"]  # once: it had not been sent
    state.space.holds.acknowledge(NODE, max(h.seq for h in held))
    assert fired == ["k"]


def test_a_count_set_after_the_hold_was_sent_is_sent_after_it_and_the_put_waits_for_either() -> None:
    state, fired = _state(), list[str]()
    _waiting_put(state, "k", fired)
    first = _take(state)
    state.access.change_replica("k", 2)
    state.space.holds.acknowledge(NODE, 0)
    assert fired == []
    both = _take(state)
    assert len(both) == 2 and both[0].seq == first[0].seq < both[1].seq
    assert [(h.key, h.target) for h in both] == [("k", 2), ("k", 2)]  # read from the row when sent
    state.space.holds.acknowledge(NODE, first[0].seq)  # the earlier one received: the node holds k
    assert fired == ["k"]
    state.space.holds.acknowledge(NODE, both[-1].seq)
    assert _take(state) == []


def test_a_node_cannot_acknowledge_holds_it_was_not_sent() -> None:
    state, fired = _state(), list[str]()
    _waiting_put(state, "a", fired)
    _waiting_put(state, "b", fired)
    state.space.holds.acknowledge(NODE, 2**64 - 1)  # nothing sent yet
    assert fired == []  # (the code before: both answered)
    assert [h.key for h in _take(state, 1)] == ["a"]
    state.space.holds.acknowledge(NODE, 2**64 - 1)
    assert fired == ["a"]
    assert [h.key for h in _take(state)] == ["b"]
    state.space.holds.acknowledge(NODE, 2**64 - 1)
    assert fired == ["a", "b"]


KEYS = [f"k{i}" for i in range(4)]
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(KEYS)),
        st.tuples(st.just("count"), st.sampled_from(KEYS), st.integers(1, 3)),
        st.tuples(st.just("remove"), st.sampled_from(KEYS)),
        st.tuples(st.just("take"), st.integers(1, 4)),
        st.tuples(st.just("ack"), st.just(0)),
        st.tuples(st.just("ack_any"), st.one_of(st.integers(0, 40), st.just(2**64 - 1))),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_ops)
def test_every_answered_put_was_sent_to_its_node_and_no_hold_outlives_its_copy(ops: list[tuple]) -> None:
    """Any interleaving of puts, counts set, removals, takes of any size and acknowledgements (the node's
    own, or any number a faulty node sends): a put answered had a hold of its object sent to its node
    after it started, or its object was removed since; every hold sent names a copy its object has."""
    state = _state()
    fired: list[str] = []  # the puts answered (by name: key and number, a key may be put again)
    waiting: dict[str, str] = {}  # key -> the name of its put not answered yet
    sent_since: dict[str, bool] = {}  # by put's name: a hold of its object was sent since it started
    held_through = 0  # what the node acknowledges: the highest number of the last holds it received
    for number, op in enumerate(ops):
        kind, arg = op[0], op[1]
        if kind == "put" and state.objects.get(arg) is None:
            waiting[arg] = name = f"{arg}@{number}"
            sent_since[name] = False
            _waiting_put(state, arg, fired, name)
        elif kind == "count" and state.objects.get(arg) is not None:
            state.access.change_replica(arg, op[2])
        elif kind == "remove" and state.objects.get(arg) is not None:
            state.removal.remove(arg, force=True)
            sent_since.pop(waiting.pop(arg, ""), None)  # (removed: nothing left to lose)
        elif kind == "take":
            held = _take(state, arg)
            for h in held:
                meta = state.objects.get(h.key)
                assert meta is not None, f"hold of {h.key!r} sent after its removal"
                assert (h.slot, h.gen) in [(r.slot, r.gen) for r in meta.replicas], h
                if h.key in waiting:
                    sent_since[waiting[h.key]] = True
            held_through = max((h.seq for h in held), default=held_through)
        elif kind in ("ack", "ack_any"):
            state.space.holds.acknowledge(NODE, held_through if kind == "ack" else arg)
        for name in fired:
            if name in sent_since:
                assert sent_since.pop(name), f"put {name} answered before its node was sent a hold"
                key = name.split("@")[0]
                if waiting.get(key) == name:
                    del waiting[key]
        fired.clear()
