"""What a member (a process holding the cluster secret) may do to others, judged by the master's state
and its request parsing (issue 39, items 6, 7, 9): a node's identity is its key's, suspicion needs
evidence that costs something, registrations are bounded without dropping a healthy client, and the
destructive calls are an admin's."""

from __future__ import annotations

import pytest

from kvstore.config.master import MasterConfig
from kvstore.errors import PermissionDeniedError, TooManyConnectionsError
from kvstore.master.ledger.model import Segment
from kvstore.master.service.state import MasterState
from kvstore.rpc import admin, node_proof
from kvstore.rpc import messages as m
from kvstore.rpc.messages import MountSegment

MiB = 1 << 20
SECRET = b"a" * 64


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_state(clock: Clock, nodes: int, **config: object) -> MasterState:
    state = MasterState(MasterConfig.load(heartbeat_interval=1.0, **config), clock=clock)  # type: ignore[arg-type]
    for i in range(nodes):
        state.members.register_client(f"n{i}", f"h{i}")
        state.members.mount_segment(
            MountSegment(f"n{i}", f"127.0.0.1:{7000 + i}", 1, 8 * MiB, f"h{i}", 1 << 20)
        )
    return state


def segment_of(state: MasterState, client: str) -> Segment:
    return next(s for s in state.space.segments.values() if s.client_id == client)


def put(state: MasterState, key: str, writer: str = "n0") -> None:
    state.puts.put_start(writer, key, MiB, 7, 1, False)
    state.puts.put_end(writer, key)


# -- item 6: a node's identity is proved by its key ---------------------------------------------------
def _register(node_id: str, node_key: str = "", nonce: str = "0" * 64, signer: str = "") -> dict[str, object]:
    """RegisterClient's parameters for a new client; with `node_key`, signed as a node's (by `signer`'s
    key when given: a forgery) over `nonce`."""
    token = m.new_token()
    client_id = m.client_id_for(token)
    params: dict[str, object] = {"client_id": client_id, "host_id": "h9", "token": token}
    params.update({"node_id": node_id} if node_id else {})
    if node_key:
        proof = node_proof.sign(signer or node_key, node_proof.message(nonce, client_id, node_id))
        params.update(node_public=node_proof.public_of(node_key), node_nonce=nonce, node_proof=proof)
    return params


def test_a_node_identity_is_taken_only_with_a_signature_by_the_nodes_key() -> None:
    """Review item 8: the key itself crossed the wire (RegisterClient.node_key): a sniffer learned it.
    Now a registration carries the public half of the key's pair and a signature over the master's
    nonce, the client id and the identity; none of it signs another registration."""
    key, other = m.new_token(), m.new_token()
    victim = f"h0/abc/0#{m.node_key_fingerprint(key)}"
    captured = _register(victim, key)
    forged = [
        _register(victim),  # the identity alone
        _register(victim, other),  # a pair of its own: another fingerprint
        _register(victim, key, signer=other),  # the victim's public half, signed by another key
        _register("h0/abc/0", key),  # the identity as `kvstore status` shows it
        {**_register(victim, key), "node_proof": captured["node_proof"]},  # a captured proof, another id
        {**captured, "node_nonce": "1" * 64},  # a captured registration, another nonce
    ]
    for params in forged:
        with pytest.raises(PermissionDeniedError, match="not proved"):
            m.parse_request("register_client", params)
    request = m.parse_request("register_client", captured)
    assert isinstance(request, m.RegisterClient) and request.node_id == victim
    assert key not in str(captured)  # what crosses the wire


def test_a_node_nonce_is_this_masters_fresh_and_spent_once_per_identity() -> None:
    """A captured registration replayed is refused: its nonce is spent (or stale, or another master's)."""
    from kvstore.master.service.node_nonces import NONCE_SECONDS, NodeNonces

    clock = Clock()
    nonces, later_master = NodeNonces(clock), NodeNonces(clock)
    first, second = nonces.new(), nonces.new()
    nonces.spend("h0/n#fp", second)
    for replayed in (second, first):  # the same, or an older one than the identity registered with
        with pytest.raises(PermissionDeniedError, match="newer nonce"):
            nonces.spend("h0/n#fp", replayed)
    nonces.spend("h1/n#fp", first)  # another identity's registration may use it
    with pytest.raises(PermissionDeniedError, match="no nonce of this master's"):
        later_master.spend("h0/n#fp", nonces.new())
    with pytest.raises(PermissionDeniedError, match="no nonce of this master's"):
        nonces.spend("h0/n#fp", second[:-1] + ("0" if second[-1] != "0" else "1"))
    stale = nonces.new()
    clock.now += NONCE_SECONDS + 1
    with pytest.raises(PermissionDeniedError, match="stale"):
        nonces.spend("h0/n#fp", stale)
    nonces.spend("h0/n#fp", nonces.new())


def test_a_client_id_is_its_tokens() -> None:
    token = m.new_token()
    own = {"client_id": m.client_id_for(token), "host_id": "h", "token": token}
    assert m.parse_request("register_client", own).client_id == m.client_id_for(token)  # type: ignore[attr-defined]
    for forged in ({**own, "token": m.new_token()}, {**own, "client_id": "chosen"}):
        with pytest.raises(PermissionDeniedError, match="not its token's"):
            m.parse_request("register_client", forged)


def test_a_known_client_id_is_not_registered_again_with_another_token() -> None:
    clock = Clock()
    state = make_state(clock, 1)
    state.members.clients["n0"].token = m.new_token()
    with pytest.raises(PermissionDeniedError, match="registered by another process"):
        state.members.register_client("n0", "h9", token=m.new_token())
    assert state.space.segments  # its segment stays


def test_nobody_unmounts_or_closes_what_another_client_holds() -> None:
    from kvstore.errors import NotFoundError

    clock = Clock()
    state = make_state(clock, 2)
    theirs = segment_of(state, "n1")
    with pytest.raises(NotFoundError, match="has no segment"):
        state.members.unmount_segment("n0", theirs.id)
    state.members.clients["n1"].token = m.new_token()
    with pytest.raises(PermissionDeniedError, match="registered by another process"):
        state.members.check_token("n1", m.new_token())  # (what handle() asks of every request in n1's name)
    assert theirs.id in state.space.segments


# -- item 7: suspicion needs evidence that costs something --------------------------------------------
def test_made_up_clients_never_make_a_live_node_suspect() -> None:
    clock = Clock()
    state = make_state(clock, 2)
    target = segment_of(state, "n1")
    for i in range(200):  # registrations cost nothing; each reports the live node
        state.members.register_client(f"fake{i}", "h9")
        state.suspicion.report_unreachable(target.engine, f"fake{i}")
        state.suspicion.report_unreachable(target.engine, "never-registered")
    state.expire()
    assert target.usable and not state.space.any_suspect()
    assert state.puts.put_start("n1", "lands", MiB, 1, 2, False) is not None  # both nodes placed on


def test_reports_of_clients_holding_segments_only_make_the_master_probe() -> None:
    """Review item 7: a "witness" needed only some usable segment on another engine, so one process
    with two registrations and two 4 KiB regions made a live node suspect. Reports now only make the
    master look; a probe the engine answers clears the suspicion a failed one raised."""
    clock = Clock()
    state = make_state(clock, 2)
    target = segment_of(state, "n1")
    for i in range(2):  # one member: two registrations, two tiny regions on engines of its own
        state.members.register_client(f"liar{i}", "h9")
        state.members.mount_segment(MountSegment(f"liar{i}", f"127.0.0.1:{7100 + i}", 1, 4096, "h9", 1 << 20))
    for _ in range(3):
        for i in range(2):
            state.suspicion.report_unreachable(target.engine, f"liar{i}")
            state.suspicion.report_unreachable(target.engine, "n0")  # (a real node's word weighs no more)
        assert target.usable and not state.space.any_suspect()
        clock.now += 0.5
        state.members.heartbeat("n1")
        state.expire()
    assert target.usable and state.counters.suspected_segments == 0
    state.suspicion.probed(target.engine, "n1", "the master could not reach it")  # evidence: suspect
    assert not target.usable
    state.suspicion.report_unreachable(target.engine, "liar0")
    state.suspicion.probed(
        target.engine, "n1", None
    )  # the next probe found it answering as n1's: trusted again
    assert target.usable and not state.space.any_suspect()
    state.suspicion.report_unreachable(target.engine, "liar1")  # and the next pair of reports changes nothing
    state.suspicion.report_unreachable(target.engine, "liar0")
    assert target.usable


def test_the_master_probes_a_reported_engine_at_most_once_per_interval() -> None:
    clock = Clock()
    state = make_state(clock, 2)
    target = segment_of(state, "n1")
    state.members.register_client("fake", "h9")
    assert state.suspicion.report_unreachable(target.engine, "fake") == "n1"  # probe it, as n1's
    assert state.suspicion.report_unreachable(target.engine, "fake") == ""  # (one under way)
    assert state.suspicion.report_unreachable("127.0.0.1:1", "fake") == ""  # no segment there: nothing
    state.suspicion.probed(target.engine, "n1", None)  # it answered as n1's: nothing changes
    assert target.usable
    clock.now += 1.0
    state.expire()
    assert state.suspicion.report_unreachable(target.engine, "fake") == "n1"
    state.suspicion.probed(target.engine, "other", "gone")  # a probe about another owner says nothing of n1's
    assert target.usable
    state.suspicion.probed(target.engine, "n1", "the master could not reach it")
    assert not target.usable and state.counters.suspected_segments == 1


# -- item 9: registrations are bounded, a healthy client never dropped for a new one -----------------
def test_registrations_are_bounded_per_host_and_in_all() -> None:
    clock = Clock()
    state = make_state(clock, 1, max_clients=6, max_clients_per_host=3)
    for i in range(3):
        state.members.register_client(f"a{i}", "attacker")
    with pytest.raises(TooManyConnectionsError, match="3 clients of host attacker"):
        state.members.register_client("a3", "attacker")  # all three were heard from just now
    for i in range(2):
        state.members.register_client(f"b{i}", "other0")
    with pytest.raises(TooManyConnectionsError, match="6 clients"):  # (other0 would hold as many as
        state.members.register_client("c", "other0")  # the fullest host: none gives way)
    clock.now += 1.5
    for live in ("n0", "b0", "a1"):
        state.members.heartbeat(live)
    state.members.register_client("a3", "attacker")  # the longest-silent idle one of its host goes: a0
    assert "a0" not in state.members.clients and "a1" in state.members.clients
    state.members.register_client(
        "c", "elsewhere"
    )  # the longest-silent idle one of all goes: a2 (not n0, b0)
    assert "a2" not in state.members.clients and {"n0", "b0", "b1", "a1", "a3", "c"} == set(
        state.members.clients
    )
    state.members.register_client("b0", "other0")  # a known client registering again takes no new room
    clock.now += 1.5
    state.members.register_client(
        "d", "elsewhere"
    )  # silent, but holding a segment: n0 is never the one dropped
    assert "n0" in state.members.clients and state.space.segments


def test_a_client_with_puts_in_progress_is_not_dropped_for_a_new_one() -> None:
    clock = Clock()
    state = make_state(clock, 1, max_clients=2, max_clients_per_host=2)
    state.members.register_client("writer", "h1")
    state.puts.put_start("writer", "k", MiB, 7, 1, False)
    clock.now += 1.5
    with pytest.raises(TooManyConnectionsError):
        state.members.register_client("new", "h2")
    assert "writer" in state.members.clients


# -- item 9: the destructive calls are an admin's ----------------------------------------------------
def test_remove_all_needs_a_proved_admin_secret() -> None:
    clock = Clock()
    state = make_state(clock, 1)
    put(state, "k")
    with pytest.raises(PermissionDeniedError, match="remove_all needs an admin"):
        state.removal.remove_all(True, by="n0")
    with pytest.raises(PermissionDeniedError, match="remove_all needs an admin"):
        state.removal.remove_all(True, by="")  # an unregistered caller
    with pytest.raises(PermissionDeniedError, match="no admin challenge"):
        state.roles.admin_prove("n0", admin.proof(SECRET, "n0", "0" * 64), SECRET)
    nonce = state.roles.admin_challenge("n0")
    with pytest.raises(PermissionDeniedError, match="wrong admin secret"):
        state.roles.admin_prove("n0", admin.proof(b"b" * 64, "n0", nonce), SECRET)
    with pytest.raises(PermissionDeniedError, match="no admin challenge"):  # the nonce is spent
        state.roles.admin_prove("n0", admin.proof(SECRET, "n0", nonce), SECRET)
    nonce = state.roles.admin_challenge("n0")
    with pytest.raises(PermissionDeniedError, match="no admin secret"):  # a master without one
        state.roles.admin_prove("n0", admin.proof(SECRET, "n0", nonce), b"")
    state.members.register_client("other", "h1")
    nonce = state.roles.admin_challenge("n0")
    with pytest.raises(PermissionDeniedError, match="wrong admin secret"):  # bound to the client id
        state.roles.admin_prove("n0", admin.proof(SECRET, "other", nonce), SECRET)
    nonce = state.roles.admin_challenge("n0")
    state.roles.admin_prove("n0", admin.proof(SECRET, "n0", nonce), SECRET)
    assert state.removal.remove_all(True, by="n0") == ["k"]
    state.members.drop_client("n0")  # the role lasts as long as the registration
    state.members.register_client("n0", "h0")
    with pytest.raises(PermissionDeniedError):
        state.removal.remove_all(True, by="n0")


def test_forcing_the_removal_of_anothers_leased_object_needs_an_admin() -> None:
    clock = Clock()
    state = make_state(clock, 1)
    state.members.register_client("other", "h1")
    for key in ("mine", "theirs", "unleased"):
        put(state, key, writer="other" if key != "mine" else "n0")
    for key in ("mine", "theirs"):
        assert state.access.get_replicas(key) is not None  # read: leased
    with pytest.raises(PermissionDeniedError, match="another client's, leased"):
        state.removal.remove("theirs", force=True, by="n0")
    with pytest.raises(PermissionDeniedError):
        state.removal.remove("theirs", force=True, by="")
    state.removal.remove("mine", force=True, by="n0")  # its own: its writer may
    state.removal.remove("unleased", force=True, by="n0")  # not leased: force changes nothing, a member may
    nonce = state.roles.admin_challenge("n0")
    state.roles.admin_prove("n0", admin.proof(SECRET, "n0", nonce), SECRET)
    state.removal.remove("theirs", force=True, by="n0")
    assert not any(state.core.exists(k) for k in ("mine", "theirs", "unleased"))


def test_the_admin_secret_file_must_be_private_and_random(tmp_path: object) -> None:
    """The admin secret is held to the cluster secret's rule (transfer_engine.security.check_strength):
    128 random bits as hex or base64; 32 characters of anything (a chosen phrase) no longer pass."""
    from pathlib import Path

    from kvstore.errors import InvalidArgumentError

    strong = "9f" + "0123456789abcdef" * 3 + "a1b2c3d4e5f60718"
    path = Path(str(tmp_path)) / "admin"
    path.write_text(strong)
    path.chmod(0o644)
    with pytest.raises(PermissionDeniedError, match="readable by its owner only"):
        admin.load_secret("", str(path), "KVSTORE_ADMIN_SECRET")
    path.chmod(0o600)
    assert admin.load_secret("", str(path), "KVSTORE_ADMIN_SECRET") == strong.encode()
    link = Path(str(tmp_path)) / "link"
    link.symlink_to(path)
    with pytest.raises(InvalidArgumentError):
        admin.load_secret("", str(link), "KVSTORE_ADMIN_SECRET")
    with pytest.raises(InvalidArgumentError, match="at least 128 random bits"):
        admin.load_secret("0123456789abcdef", "", "KVSTORE_ADMIN_SECRET")
    for weak in ("x" * 64, "Summer2025!kvstore-admin-password"):  # 32+ characters, guessable
        with pytest.raises(InvalidArgumentError, match="admin secret"):
            admin.load_secret(weak, "", "KVSTORE_ADMIN_SECRET")
        path.write_text(weak)
        with pytest.raises(InvalidArgumentError, match="KVSTORE_ADMIN_SECRET_FILE"):
            admin.load_secret("", str(path), "KVSTORE_ADMIN_SECRET")
    with pytest.raises(InvalidArgumentError, match="both set"):
        admin.load_secret(strong, str(path), "KVSTORE_ADMIN_SECRET")
