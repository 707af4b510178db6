"""A standby watches the leader key (kvstore.master.wire.election, kvstore.rpc.etcd.KeyWatch): it tries to
lead the moment etcd deletes the key, not at its next poll, and still never before the old leader's lease
has ended. Two candidacies (Election, in this process) against a real etcd; the standby's poll is set to
half a minute, so only the watch can wake it in time. Its watch, lost when etcd restarts, is made again.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kvstore.master.wire import election as election_module
from kvstore.master.wire.election import Election
from kvstore.rpc import etcd as etcd_keys
from tests.integration.kvstore.test_ha import _free_port

TTL = 2  # the leader's lease
# A standby that only polled would wait this long. (It renews its own lease as it polls: its lease is
# long enough to outlive the slow poll.)
SLOW_POLL = 30.0
STANDBY_TTL = 60


class Standby:
    """An Election campaigning on a thread: when it won (monotonic) and its epoch."""

    def __init__(self, election: Election) -> None:
        self.election, self.won_at = election, 0.0
        self.epoch: int | None = None
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.epoch = self.election.campaign(self.stop)
        self.won_at = time.monotonic()

    def led_within(self, seconds: float) -> bool:
        self._thread.join(seconds)
        return not self._thread.is_alive() and self.epoch is not None

    def close(self) -> None:
        self.stop.set()
        self.election.close()
        self._thread.join(10)


def wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


class Etcd:
    """A one-member etcd on fixed loopback ports that can be killed and started again on its data."""

    def __init__(self, data: Path) -> None:
        self.data, self.client, self.peer = data, _free_port(), _free_port()
        self.address = f"127.0.0.1:{self.client}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("etcd")
        if binary is None:
            pytest.skip("etcd is not installed (Debian's etcd-server; .ci/run installs it)")
        peer = f"http://127.0.0.1:{self.peer}"
        self.proc = subprocess.Popen(
            [
                binary,
                "--name=t",
                f"--data-dir={self.data}",
                f"--listen-client-urls=http://{self.address}",
                f"--advertise-client-urls=http://{self.address}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=t={peer}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = etcd_keys.connect(self.address, 1.0)
        try:
            assert wait_until(lambda: _answers(client), 20), "etcd did not start"
        finally:
            client.close()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None


def _answers(client: Any) -> bool:
    try:
        client.get("/ready")
        return True
    except Exception:
        return False


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    running = Etcd(tmp_path / "etcd")
    running.start()
    try:
        yield running
    finally:
        running.kill()


class Leader:
    """An Election that has won, renewing its lease on a thread (Election.hold) until `stop_renewing`."""

    def __init__(self, election: Election) -> None:
        self.election = election
        assert election.campaign(threading.Event()) is not None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=election.hold, args=(self._stop,), daemon=True)
        self._thread.start()

    def stop_renewing(self) -> None:
        """As if killed: no renewal from now on (the last one's bound stays in `_held_until`)."""
        self._stop.set()
        self._thread.join(10)

    def resign(self) -> None:
        self.stop_renewing()
        self.election.resign()


@contextmanager
def candidacies(etcd: Etcd, cluster: str) -> Iterator[tuple[Leader, Standby]]:
    """A leader (renewing its lease) and a standby campaigning, its watch made."""
    leader = Leader(Election(etcd.address, cluster, "127.0.0.1:1", TTL))
    standby = None
    try:
        standby = Standby(Election(etcd.address, cluster, "127.0.0.1:2", STANDBY_TTL))
        # (its watch is made at its first wait, once it has seen the leader)
        assert wait_until(lambda: standby.election._leader_key.watching, 10), "the standby watches nothing"
        yield leader, standby
    finally:
        leader.stop_renewing()
        if standby is not None:
            standby.close()
        leader.election.close()


def test_a_standby_leads_at_once_when_the_leader_resigns(etcd: Etcd, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(election_module, "POLL_SECONDS", SLOW_POLL)
    with candidacies(etcd, "resign") as (leader, standby):
        time.sleep(0.5)  # (the standby's wait under way is the one of SLOW_POLL)
        resigned = time.monotonic()
        leader.resign()  # (revokes the lease: etcd deletes the key)
        assert standby.led_within(5.0), "the standby did not lead within 5 s of the resignation"
        print(f"led {standby.won_at - resigned:.3f} s after the resignation")


def test_a_standby_leads_once_the_lease_ended_never_before(
    etcd: Etcd, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader stops renewing (as a killed one does): the standby leads after its lease surely ended
    (the leader's own bound: when it sent its last renewal, plus the TTL) and within etcd's expiry tick
    (0.5 s) of it, plus a margin for a loaded machine. A poll of half a minute would have missed it."""
    monkeypatch.setattr(election_module, "POLL_SECONDS", SLOW_POLL)
    with candidacies(etcd, "expiry") as (leader, standby):
        time.sleep(0.5)
        leader.stop_renewing()
        until = leader.election._held_until
        assert standby.led_within(TTL + 5.0), "the standby did not lead after the lease ended"
        print(f"led {standby.won_at - until:+.3f} s from the end of the leader's lease (TTL {TTL} s)")
        assert standby.won_at >= until, "the standby led while the old leader's lease could still live"
        assert standby.won_at - until <= 0.5 + 1.5


def test_a_watch_lost_with_etcd_is_made_again(etcd: Etcd, monkeypatch: pytest.MonkeyPatch) -> None:
    """etcd restarts: the standby's watch ends with its stream; the standby, polling meanwhile, makes
    it again, and then leads at once when the leader resigns."""
    with candidacies(etcd, "restart") as (leader, standby):
        etcd.kill()
        assert wait_until(lambda: not standby.election._leader_key.watching, 10), "the watch did not end"
        etcd.start()
        assert wait_until(lambda: standby.election._leader_key.watching, 20), "the watch was not made again"
        monkeypatch.setattr(election_module, "POLL_SECONDS", SLOW_POLL)
        time.sleep(0.5)  # (the standby's wait under way is the one of SLOW_POLL)
        assert standby.epoch is None, "the standby led while the leader renewed"
        resigned = time.monotonic()
        leader.resign()
        assert standby.led_within(5.0), "the standby did not lead at once on its new watch"
        print(f"led {standby.won_at - resigned:.3f} s after the resignation, past an etcd restart")
