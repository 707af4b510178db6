"""High availability with a real etcd (Debian's etcd-server; .ci/run installs it): two candidate
masters, memory nodes and clients that follow the leader etcd names. A standby leads when the leader
dies or cannot renew its lease; no acknowledged object is lost, no two masters ever serve at once."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import pytest

from kvstore import Store
from kvstore.cluster.master_client import MasterClient
from kvstore.errors import KVStoreError
from kvstore.procs import kvstore_process
from tests.conftest import freeze
from tests.integration.conftest import Namespace
from tests.integration.kvstore.conftest import wait_for_mounts

TTL = 2  # the leader's lease (seconds)
HA = ["--leader-ttl", str(TTL), "--heartbeat-interval", "0.3", "--client-ttl", "5"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A one-member etcd on free loopback ports: its client address and process."""
    with etcd_server(tmp_path, "127.0.0.1") as running:
        yield running


@contextmanager
def etcd_server(tmp_path: Path, host: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A one-member etcd on free ports of `host`: its client address and process."""
    binary = shutil.which("etcd")
    if binary is None:
        pytest.skip("etcd is not installed (Debian's etcd-server; .ci/run installs it)")
    client, peer = _free_port(), _free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--name=t",
            f"--data-dir={tmp_path / 'etcd'}",
            f"--listen-client-urls=http://{host}:{client}",
            f"--advertise-client-urls=http://{host}:{client}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=t=http://127.0.0.1:{peer}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"{host}:{client}"
    try:
        from kvstore.rpc import etcd as etcd_keys

        deadline = time.monotonic() + 20
        while True:
            try:
                etcd_keys.connect(address, 1.0).get("/ready")
                break
            except Exception:
                assert time.monotonic() < deadline, "etcd did not start"
                time.sleep(0.1)
        yield address, proc
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()


def serving(address: str) -> bool:
    """The master at `address` accepts a connection and answers Hello (a standby does not listen)."""
    client = MasterClient(address, timeout=0.5, busy_poll_us=0)
    try:
        client.hello()
        return True
    except KVStoreError:
        return False
    finally:
        client.close()


class LeaderWatch:
    """Samples which masters serve, every 20 ms, until stopped: the most that ever served at once."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses, self.most, self._stop = addresses, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.most = max(self.most, sum(serving(a) for a in self.addresses))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.most


@contextmanager
def ha_cluster(
    etcd_address: str, cluster: str, nodes: int = 2
) -> Iterator[list[tuple[subprocess.Popen[str], str]]]:
    """Two candidate masters and `nodes` memory nodes of `cluster`; yields the masters (process, address)."""
    with ExitStack() as stack:
        masters = []
        for _ in range(2):
            proc, ready = stack.enter_context(
                kvstore_process(["master", "--port", "0", "--etcd", etcd_address, "--cluster", cluster, *HA])
            )
            masters.append((proc, ready.split()[0]))
        node = ["node", "--etcd", etcd_address, "--cluster", cluster, "--segment-size", "32MiB"]
        for _ in range(nodes):
            stack.enter_context(kvstore_process(node))
        yield masters


def leader_of(masters: list[tuple[subprocess.Popen[str], str]]) -> tuple[subprocess.Popen[str], str]:
    deadline = time.monotonic() + 10
    while True:
        up = [m for m in masters if serving(m[1])]
        if len(up) == 1:
            return up[0]
        assert time.monotonic() < deadline, f"{len(up)} masters serve"
        time.sleep(0.05)


def value_of(i: int) -> bytes:
    return np.random.default_rng(i).integers(0, 256, 4096 + (i % 7) * 1024, dtype=np.uint8).tobytes()


def test_a_standby_leads_when_the_leader_is_killed_and_no_acknowledged_object_is_lost(
    etcd: tuple[str, subprocess.Popen[bytes]],
) -> None:
    """SIGKILL the leader under a mixed put/get load: the standby leads and the first call succeeds
    within 5 s; every object acknowledged before the kill reads back with the right bytes; no read during
    the failover returns other bytes."""
    address, _ = etcd
    with ha_cluster(address, "kill") as masters:
        watch = LeaderWatch([a for _, a in masters])
        leader, _ = leader_of(masters)
        with Store.connect(etcd=address, cluster="kill", rpc_timeout=3.0) as store:
            acked: list[int] = []
            wrong: list[str] = []
            stop = threading.Event()
            first_after_kill: list[float] = []
            killed_at: list[float] = []

            def load() -> None:
                i = 0
                while not stop.is_set():
                    keys = [f"obj/{j}" for j in range(i, i + 8)]
                    started = time.monotonic()
                    try:
                        if store.batch_put_from(keys, [value_of(j) for j in range(i, i + 8)]) == [0] * 8:
                            acked.extend(range(i, i + 8))
                            # the first put begun after the kill (one in flight may have been answered
                            # by the old leader just before it died)
                            if killed_at and started > killed_at[0] and not first_after_kill:
                                first_after_kill.append(time.monotonic() - killed_at[0])
                        sample = acked[-20:]
                        for j, got in zip(sample, store.batch_get([f"obj/{j}" for j in sample]), strict=True):
                            if got is not None and got != value_of(j):
                                wrong.append(f"obj/{j}")
                    except KVStoreError:
                        pass  # a call in flight during the failover fails: the next one goes on
                    i += 8

            loader = threading.Thread(target=load)
            loader.start()
            time.sleep(1.5)
            before = len(acked)
            leader.send_signal(signal.SIGKILL)
            killed_at.append(time.monotonic())
            leader.wait()
            deadline = time.monotonic() + 15
            while not first_after_kill and time.monotonic() < deadline:
                time.sleep(0.05)
            stop.set()
            loader.join()
            assert before > 0 and first_after_kill, "no put succeeded after the kill"
            assert first_after_kill[0] < 5.0, first_after_kill
            keys = [f"obj/{j}" for j in acked]
            wait_for_mounts(store, 2, deadline + 5 - time.monotonic())  # within a heartbeat or so
            got = []
            for at in range(0, len(keys), 64):
                got += store.batch_get(keys[at : at + 64])
            lost = [k for k, g, j in zip(keys, got, acked, strict=True) if g != value_of(j)]
        print(f"failover: first put {first_after_kill[0]:.2f} s after the kill; {len(keys)} acknowledged")
        assert wrong == [] and lost == [], (len(lost), len(keys), lost[:5])
        assert watch.stop() == 1


def test_etcd_stopped_the_leader_steps_down_and_the_cluster_resumes(
    etcd: tuple[str, subprocess.Popen[bytes]],
) -> None:
    """Stop etcd (SIGSTOP) for 30 s: the leader serves while its lease holds, stops serving when it
    cannot renew it (no master serves meanwhile), and once etcd is back a leader serves again with every
    object; never two at once."""
    address, proc = etcd
    with ha_cluster(address, "pause", nodes=1) as masters:
        watch = LeaderWatch([a for _, a in masters])
        _, leading = leader_of(masters)
        keys = [f"p/{i}" for i in range(64)]
        with Store.connect(etcd=address, cluster="pause", rpc_timeout=3.0) as store:
            assert store.batch_put_from(keys, [value_of(i) for i in range(64)]) == [0] * 64
            freeze(proc.pid)
            stopped = time.monotonic()
            assert serving(leading)  # its lease still holds
            while serving(leading):
                assert time.monotonic() - stopped < TTL + 1, "the leader served past its lease"
                time.sleep(0.05)
            assert not any(serving(a) for _, a in masters)
            time.sleep(max(0.0, 30 - (time.monotonic() - stopped)))
            assert not any(serving(a) for _, a in masters)
            proc.send_signal(signal.SIGCONT)
            leader_of(masters)
            deadline = time.monotonic() + 20
            got: list[bytes | None] = []
            while time.monotonic() < deadline:
                try:
                    got = store.batch_get(keys)
                    if all(g is not None for g in got):
                        break
                except KVStoreError:
                    pass
                time.sleep(0.2)
            assert got == [value_of(i) for i in range(64)]
        assert watch.stop() == 1


def test_a_list_of_master_addresses_follows_the_leader(etcd: tuple[str, subprocess.Popen[bytes]]) -> None:
    """Clients given the masters' addresses (no etcd) reach the leader: standbys refuse at once."""
    address, _ = etcd
    with ha_cluster(address, "list", nodes=1) as masters:
        leader, _ = leader_of(masters)
        listed = ",".join(a for _, a in masters)
        with Store.connect(listed, rpc_timeout=3.0) as store:
            assert store.put("x", b"y" * 5000) is None
            leader.send_signal(signal.SIGKILL)
            leader.wait()
            deadline = time.monotonic() + 10
            while True:
                try:
                    if store.get("x") == b"y" * 5000:
                        break
                except KVStoreError:
                    pass
                assert time.monotonic() < deadline
                time.sleep(0.1)


class Lines:
    """Reads a process's stdout on a thread: each line with the time it came."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[tuple[float, str]] = []
        assert proc.stdout is not None
        stream = proc.stdout
        threading.Thread(
            target=lambda: [self.lines.append((time.monotonic(), x)) for x in stream], daemon=True
        ).start()

    def when(self, text: str, after: float = 0.0) -> float | None:
        return next((t for t, line in self.lines if text in line and t >= after), None)


@pytest.mark.root
def test_a_leader_cut_off_from_everyone_steps_down_before_a_standby_leads(
    tmp_path: Path, netns: Namespace
) -> None:
    """The leader runs on its own host (a network namespace) and loses its link: it cannot renew its lease,
    stops serving before the lease can end, and only then does the standby lead; the first call after the
    cut succeeds within 5 s and every acknowledged object reads back with the right bytes."""
    here, there = netns.local_addr, netns.peer_addr
    with etcd_server(tmp_path, here) as (address, _), ExitStack() as stack:
        cluster = ["--etcd", address, "--cluster", "cut", *HA]
        far, _ = stack.enter_context(
            kvstore_process(
                ["master", "--host", there, "--port", "0", *cluster], ["ip", "netns", "exec", netns.name]
            )
        )
        far_lines = Lines(far)
        deadline = time.monotonic() + 10
        while far_lines.when("leading cluster") is None:
            assert time.monotonic() < deadline, "the master on the other host did not lead"
            time.sleep(0.05)
        near, _ = stack.enter_context(kvstore_process(["master", "--host", here, "--port", "0", *cluster]))
        near_lines = Lines(near)
        node = ["node", "--etcd", address, "--cluster", "cut", "--host", here, "--segment-size", "32MiB"]
        for _ in range(2):
            stack.enter_context(kvstore_process(node))
        with Store.connect(etcd=address, cluster="cut", host=here, rpc_timeout=3.0) as store:
            keys = [f"cut/{i}" for i in range(200)]
            assert store.batch_put_from(keys, [value_of(i) for i in range(200)]) == [0] * 200
            assert store.session.master.address.startswith(there)
            subprocess.run(["ip", "link", "set", netns.link, "down"], check=True)
            cut = time.monotonic()
            first = None
            while time.monotonic() - cut < 15:
                try:
                    if store.put(f"after/{time.monotonic()}", b"x" * 4096) is None:
                        first = time.monotonic() - cut
                        break
                except KVStoreError:
                    time.sleep(0.05)
            assert first is not None and first < 5.0, first
            wait_for_mounts(store, 2, cut + 20 - time.monotonic())
            got = store.batch_get(keys)
            stepped_down = far_lines.when("stepped down")
            leading = near_lines.when("leading cluster")
            since = {"stepped down": stepped_down, "standby led": leading}
            print(
                f"partition: first put {first:.2f} s after the cut;",
                {k: v and v - cut for k, v in since.items()},
            )
        assert got == [value_of(i) for i in range(200)]
        assert stepped_down is not None and leading is not None and stepped_down < leading


def test_a_node_started_between_two_leaders_waits_for_the_next(
    etcd: tuple[str, subprocess.Popen[bytes]],
) -> None:
    """Kill the leader and start a node at once, while etcd still names the dead leader (its lease holds):
    the node waits for the standby to lead, then joins. Was: it exited with "cannot reach the leader"."""
    address, _ = etcd
    with ha_cluster(address, "between", nodes=0) as masters:
        leader, _ = leader_of(masters)
        leader.send_signal(signal.SIGKILL)
        leader.wait()
        node = ["node", "--etcd", address, "--cluster", "between", "--segment-size", "16MiB"]
        with kvstore_process(node), Store.connect(etcd=address, cluster="between", rpc_timeout=5.0) as store:
            assert store.put("joined", b"j" * 4096) is None
            assert store.get("joined") == b"j" * 4096
