"""A put_end naming a client that never wrote is answered "no put in progress" for every key and leaves
nothing behind: the table numbers writers for good, so numbering every stranger would let a peer grow the
master's memory without bound (the review of 2410359)."""

from kvstore.master.service.handlers import Handlers
from kvstore.rpc import messages as m
from kvstore.rpc.framing import unpack
from tests.unit.kvstore.master.state_helpers import Clock, MiB, make_state


def test_put_ends_of_strangers_number_no_writer() -> None:
    state = make_state(Clock(), [("h0", 64 * MiB)])
    handlers = Handlers(state, epoch=1)
    writers = len(state.objects._writer_names)
    for i in range(1000):
        reply = handlers.put_end(m.PutEnd(client_id=f"stranger-{i}", keys=["x", "y"]))
        codes = [item[0] for item in unpack(reply)]
        assert all(code != 0 for code in codes) and len(codes) == 2
    assert len(state.objects._writer_names) == writers
