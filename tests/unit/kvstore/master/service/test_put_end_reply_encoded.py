"""put_end's reply is encoded in C++ (kvstore._meta.encode_put_reply of the per-key errors) byte for byte as
msgpack-python packed the ItemResults the handler built before: [0, "", nil] for a put ended, [code,
message, nil] for a key with no put of this client in progress."""

from __future__ import annotations

import msgpack

from kvstore.errors import NotFoundError
from kvstore.master.service.handlers import Handlers
from kvstore.rpc import messages as m
from kvstore.rpc.framing import Packed
from tests.unit.kvstore.master.state_helpers import Clock, MiB, make_state


def test_put_end_s_reply_is_packed_as_msgpack_packs_the_item_results() -> None:
    state = make_state(Clock(), [("h0", 64 * MiB)], durable_wait=0)
    state.members.register_client("other", "h9")
    handlers = Handlers(state)
    handlers.put_start(m.PutStart("c0", [m.PutItem(f"k{i}", 4096, i) for i in range(300)], 1, False, 0))
    handlers.put_start(m.PutStart("other", [m.PutItem("theirs", 4096, 1)], 1, False, 0))
    keys = [f"k{i}" for i in range(300)] + ["k7", "theirs", "never-put", "é" * 40]
    reply = handlers.put_end(m.PutEnd("c0", keys))
    assert isinstance(reply, Packed)
    expected = [m.ItemResult(0, "", None)] * 300
    for key in keys[300:]:
        error = NotFoundError(f"no put of {key!r} in progress by this client")
        expected.append(m.ItemResult(error.code, str(error), None))
    assert bytes(reply) == msgpack.packb(expected, use_bin_type=True)
    assert state.objects["k299"].complete and not state.objects["theirs"].complete
