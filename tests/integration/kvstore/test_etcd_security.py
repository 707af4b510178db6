"""etcd as an attacker with write access to it sees it (issue 39, item 14), with a real etcd and real
masters: the leader record is signed with the cluster secret, so a rewritten one sends no client anywhere;
a leader whose key is overwritten or deleted while its lease lives takes it back and keeps serving; a
standby leads past a forged key once no leader can hold it. And etcd itself behind TLS, client
certificates and a user and password (`KVSTORE_ETCD_*`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from kvstore import Store
from kvstore.errors import KVStoreError
from kvstore.rpc import etcd as etcd_keys
from tests.integration.kvstore.test_ha import LeaderWatch, etcd, ha_cluster, leader_of, serving

__all__ = ["etcd"]  # the fixture, imported

TTL = 2  # test_ha's masters' leader_ttl


class Relay:
    """A TCP relay on 127.0.0.1 to `target`, as an attacker who rewrites the leader's address runs one;
    counts the connections it is given."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(self.target)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.server.close()


def _puts_for(store: Store, seconds: float) -> tuple[int, int]:
    """(puts acknowledged, puts failed) of a steady put load for `seconds`."""
    done = failed = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            store.put(f"load/{time.monotonic_ns()}", b"l" * 4096)
            done += 1
        except KVStoreError:
            failed += 1
        time.sleep(0.05)
    return done, failed


def _leader_value(tamper: Any, cluster: str, masters: list[str], timeout: float = 5.0) -> dict[str, Any]:
    """The leader key's record once it names one of `masters` again."""
    deadline = time.monotonic() + timeout
    while True:
        value, _ = tamper.get(etcd_keys.leader_key(cluster))
        try:
            record = json.loads(value) if value else {}
        except ValueError:
            record = {}
        if record.get("address") in masters:
            return dict(record)
        assert time.monotonic() < deadline, f"the leader key holds {value!r}"
        time.sleep(0.05)


@pytest.mark.parametrize("secret", [True, False], ids=["secret", "no-secret"])
def test_an_overwritten_leader_key_is_taken_back_and_the_cluster_keeps_serving(
    etcd: tuple[str, subprocess.Popen[bytes]], secret: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone who may write etcd overwrites the leader key with a record of their own (no lease: it
    never expires). Was: the leader stepped down, no standby could create the key, every put failed from
    then on (54 of 58 in 3 s). Now the leader, its lease alive, takes its key back and keeps serving: puts
    go on, and a client started after the overwrite finds the real leader. The same without a secret (the
    leader knows its own record byte for byte)."""
    if not secret:
        monkeypatch.delenv("KVSTORE_CLUSTER_SECRET")
    address, _ = etcd
    tamper = etcd_keys.connect(address)
    key = etcd_keys.leader_key("overwrite")
    with ha_cluster(address, "overwrite") as masters:
        watch = LeaderWatch([a for _, a in masters])
        _, leading = leader_of(masters)
        with Store.connect(etcd=address, cluster="overwrite", rpc_timeout=3.0) as store:
            store.put("before", b"b" * 4096)
            for forged in (b"garbage", json.dumps({"address": "127.0.0.1:9", "id": "x"}).encode()):
                tamper.put(key, forged)
                done, failed = _puts_for(store, 3.0)
                assert done > 0 and failed <= 2, (forged, done, failed)
                assert _leader_value(tamper, "overwrite", [leading])["address"] == leading
            with Store.connect(etcd=address, cluster="overwrite", rpc_timeout=5.0) as fresh:
                assert fresh.get("before") == b"b" * 4096
        assert watch.stop() == 1


def test_a_rewritten_leader_address_sends_no_client_through_a_relay(
    etcd: tuple[str, subprocess.Popen[bytes]],
) -> None:
    """The leader key rewritten with only its address changed (the leader's id and lease kept) to a relay
    in front of the leader. Was: the leader kept serving as if nothing happened and every new client went
    through the relay. Now the record does not verify (it is signed with the cluster secret): no client
    follows it, and the leader writes its own record back."""
    address, _ = etcd
    tamper = etcd_keys.connect(address)
    key = etcd_keys.leader_key("relay")
    with ha_cluster(address, "relay", nodes=1) as masters:
        _, leading = leader_of(masters)
        value, meta = tamper.get(key)
        record = json.loads(value)
        relay = Relay(leading)
        try:
            record["address"] = relay.address
            tamper.put(key, json.dumps(record).encode(), lease=meta.lease_id)
            with Store.connect(etcd=address, cluster="relay", rpc_timeout=5.0) as store:
                store.put("through", b"t" * 4096)
                assert store.get("through") == b"t" * 4096
                assert store.session.master.address == leading
            assert relay.connections == 0
            assert _leader_value(tamper, "relay", [leading])["address"] == leading
        finally:
            relay.close()


def test_a_deleted_leader_key_is_taken_back_by_the_leader_not_won_by_a_standby(
    etcd: tuple[str, subprocess.Popen[bytes]],
) -> None:
    """The leader key deleted while the leader's lease lives. Was: a standby created it at once and led
    (the old leader served on until its next look). Now the standby, which saw the leader's lease alive,
    waits, and the leader takes its key back: the same master leads, never two at once."""
    address, _ = etcd
    tamper = etcd_keys.connect(address)
    with ha_cluster(address, "deleted", nodes=1) as masters:
        watch = LeaderWatch([a for _, a in masters])
        _, leading = leader_of(masters)
        for _ in range(3):
            tamper.delete(etcd_keys.leader_key("deleted"))
            time.sleep(TTL)
            assert _leader_value(tamper, "deleted", [a for _, a in masters])["address"] == leading
            assert serving(leading)
        assert watch.stop() == 1


def test_a_standby_leads_past_a_forged_key_once_the_dead_leaders_lease_ended(
    etcd: tuple[str, subprocess.Popen[bytes]],
) -> None:
    """The leader is killed and its key overwritten with a record under no lease (it would never end).
    Was: no standby could create the key, so none ever led. Now a standby takes the key over once the
    forged record stayed unchanged longer than a leader could hold it and the dead leader's lease ended."""
    address, _ = etcd
    tamper = etcd_keys.connect(address)
    with ha_cluster(address, "orphan", nodes=1) as masters:
        leader, leading = leader_of(masters)
        with Store.connect(etcd=address, cluster="orphan", rpc_timeout=3.0) as store:
            store.put("kept", b"k" * 4096)
            leader.send_signal(signal.SIGKILL)
            leader.wait()
            tamper.put(etcd_keys.leader_key("orphan"), b'{"address": "127.0.0.1:9", "id": "forged"}')
            killed = time.monotonic()
            while True:
                try:
                    store.put(f"after/{time.monotonic_ns()}", b"a" * 4096)
                    break
                except KVStoreError:
                    assert time.monotonic() - killed < 4 * TTL + 10, "no standby ever led"
                    time.sleep(0.1)
            standby = next(a for _, a in masters if a != leading)
            assert _leader_value(tamper, "orphan", [standby])


def test_a_client_follows_only_a_leader_record_that_verifies(
    etcd: tuple[str, subprocess.Popen[bytes]],
) -> None:
    """A master leads (an in-process candidacy: nothing takes the key back here), then its key is
    rewritten in every way someone without the secret can: its address changed, a record signed with
    another secret, a candidate's record, the leader's own record moved off its lease. A client that
    trusted the leader keeps it; a new client follows none of them."""
    from kvstore.cluster.leader import EtcdLeader
    from kvstore.errors import MasterUnavailableError
    from kvstore.master.wire.election import Election
    from kvstore.rpc.etcd_records import LEADER, MasterRecord, Records

    address, _ = etcd
    election = Election(address, "verify", "127.0.0.1:4000", TTL)
    tamper = etcd_keys.connect(address)
    key = etcd_keys.leader_key("verify")
    trusting = EtcdLeader(address, "verify", 1.0)
    try:
        assert election.campaign(threading.Event()) is not None
        assert trusting.candidates() == ["127.0.0.1:4000"]
        value, meta = tamper.get(key)
        lease = meta.lease_id
        candidate, _ = tamper.get(etcd_keys.candidates_prefix("verify") + "127.0.0.1:4000")
        moved = dict(json.loads(value), address="127.0.0.1:9")
        other = Records(b"another-secret-" * 3, "verify")
        forgeries = {
            "address rewritten": (json.dumps(moved).encode(), lease),
            "another secret": (other.encode(LEADER, MasterRecord("127.0.0.1:9", "x", lease, TTL)), lease),
            "a candidate's record": (candidate, lease),
            "off its lease": (value, None),
        }
        for what, (forged, under) in forgeries.items():
            tamper.put(key, forged, lease=under)
            assert trusting.candidates() == ["127.0.0.1:4000"], what
            fresh = EtcdLeader(address, "verify", 1.0)
            with pytest.raises(MasterUnavailableError, match="does not verify"):
                fresh.candidates()
            fresh.close()
    finally:
        trusting.close()
        election.close()


# -- etcd behind TLS, client certificates and a user and password ----------------------------------------


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _pki(folder: Path) -> dict[str, str]:
    """A CA, etcd's server certificate for 127.0.0.1 and a client certificate (EC keys: quick)."""
    paths = {f"{n}.{e}": str(folder / f"{n}.{e}") for n in ("ca", "server", "client") for e in ("pem", "key")}
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca = ["-keyout", paths["ca.key"], "-out", paths["ca.pem"], "-days", "2", "-subj", "/CN=etcd-ca"]
    _openssl("req", "-x509", "-new", *ec, *ca)
    for name, ext in (
        ("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ):
        csr, extfile = str(folder / f"{name}.csr"), folder / f"{name}.ext"
        extfile.write_text(ext)
        _openssl("req", "-new", *ec, "-keyout", paths[f"{name}.key"], "-out", csr, "-subj", f"/CN={name}")
        signer = ["-CA", paths["ca.pem"], "-CAkey", paths["ca.key"], "-CAcreateserial", "-days", "2"]
        _openssl("x509", "-req", "-in", csr, *signer, "-out", paths[f"{name}.pem"], "-extfile", str(extfile))
    for name in ("ca.key", "server.key", "client.key"):
        os.chmod(paths[name], 0o600)
    return paths


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TlsEtcd:
    """A one-member etcd serving its clients TLS only and asking for their certificates (made here)."""

    def __init__(self, folder: Path) -> None:
        binary = shutil.which("etcd")
        if binary is None or shutil.which("openssl") is None:
            pytest.skip("etcd or the openssl command is not installed")
        self.pki = _pki(folder)
        client, peer = _free_port(), _free_port()
        self.address = f"127.0.0.1:{client}"
        urls = {
            "listen-client-urls": f"https://{self.address}",
            "advertise-client-urls": f"https://{self.address}",
            "listen-peer-urls": f"http://127.0.0.1:{peer}",
            "initial-advertise-peer-urls": f"http://127.0.0.1:{peer}",
            "initial-cluster": f"t=http://127.0.0.1:{peer}",
            "cert-file": self.pki["server.pem"],
            "key-file": self.pki["server.key"],
            "trusted-ca-file": self.pki["ca.pem"],
        }
        self.command = [binary, "--name=t", f"--data-dir={folder / 'etcd'}", "--client-cert-auth"]
        self.command += [f"--{k}={v}" for k, v in urls.items()]
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def restart(self) -> None:
        """Killed and started again on its data: every login token it gave is gone."""
        self.stop()
        self.proc = self._start()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _enable_auth(client: Any, password: str) -> None:
    """etcd's auth on (etcdctl is not installed: its gRPC API): root, and user `kv` that may read and write
    /kvstore/ only."""
    from etcd3 import etcdrpc
    from etcd3.etcdrpc import auth_pb2

    auth, t = client.authstub, client.timeout
    auth.UserAdd(etcdrpc.AuthUserAddRequest(name="root", password=password), t)
    auth.UserGrantRole(etcdrpc.AuthUserGrantRoleRequest(user="root", role="root"), t)
    auth.RoleAdd(etcdrpc.AuthRoleAddRequest(name="kvstore"), t)
    permission = auth_pb2.Permission(
        permType=auth_pb2.Permission.READWRITE, key=b"/kvstore/", range_end=b"/kvstore0"
    )
    auth.RoleGrantPermission(etcdrpc.AuthRoleGrantPermissionRequest(name="kvstore", perm=permission), t)
    auth.UserAdd(etcdrpc.AuthUserAddRequest(name="kv", password=password), t)
    auth.UserGrantRole(etcdrpc.AuthUserGrantRoleRequest(user="kv", role="kvstore"), t)
    auth.AuthEnable(etcdrpc.AuthEnableRequest(), t)


def _until_stored(store: Store, key: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            store.put(key, b"s" * 4096)
            return
        except KVStoreError:
            assert time.monotonic() < deadline, f"no put of {key} succeeded in {seconds} s"
            time.sleep(0.1)


def test_a_cluster_reaches_etcd_over_tls_with_a_certificate_and_a_login(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """etcd serves TLS only, asks for client certificates, and has auth on (user kv may write /kvstore/
    only). Masters, nodes and clients given KVSTORE_ETCD_CA/CERT/KEY/USER/PASSWORD_FILE elect a leader
    and store through it; the leader takes its key back under auth too; after etcd restarts (every login
    token gone) they log in again: the leader serves on, and the standby leads when it is killed. A
    client with no login, a wrong password, no certificate or plaintext is refused, saying so."""
    from kvstore.cluster.leader import EtcdLeader
    from kvstore.config.etcd import EtcdConfig
    from kvstore.errors import MasterUnavailableError, PermissionDeniedError

    server = TlsEtcd(tmp_path)
    try:
        address, pki = server.address, server.pki
        password = "pw-" + os.urandom(8).hex()
        password_file = tmp_path / "etcd.pw"
        password_file.write_text(password + "\n")
        password_file.chmod(0o600)
        tls = {"ca": pki["ca.pem"], "cert": pki["client.pem"], "key": pki["client.key"]}
        deadline = time.monotonic() + 20
        while True:
            try:
                admin = etcd_keys.connect(address, 1.0, EtcdConfig.load({}, **tls))
                admin.get("/ready")
                break
            except Exception:
                assert time.monotonic() < deadline, "etcd did not start"
                time.sleep(0.1)
        _enable_auth(admin, password)
        root = etcd_keys.connect(address, 1.0, EtcdConfig.load({}, **tls, user="root", password=password))
        for name, value in {**tls, "user": "kv", "password_file": str(password_file)}.items():
            monkeypatch.setenv(f"KVSTORE_ETCD_{name.upper()}", value)
        monkeypatch.setenv("KVSTORE_RPC_TIMEOUT", "30")  # nodes wait that long for the first leader
        with ha_cluster(address, "tls", nodes=1) as masters:
            _, leading = leader_of(masters)
            with Store.connect(etcd=address, cluster="tls", rpc_timeout=5.0) as store:
                store.put("over-tls", b"t" * 4096)
                assert store.get("over-tls") == b"t" * 4096
                assert store.session.master.address == leading
                root.delete(etcd_keys.leader_key("tls"))
                time.sleep(TTL)
                assert _leader_value(root, "tls", [leading])["address"] == leading
                server.restart()
                time.sleep(3 * TTL)  # longer than a leader that could not log in again would serve
                _until_stored(store, "after-restart", 30.0)
                leader, _ = leader_of(masters)
                leader.send_signal(signal.SIGKILL)  # the standby, logged in again too, leads
                leader.wait()
                _until_stored(store, "after-failover", 30.0)
            # the command line's --etcd-* options stand for the variables
            flags = [f"--etcd-{name}={path}" for name, path in tls.items()]
            flags += ["--etcd-user=kv", f"--etcd-password-file={password_file}"]
            status = ["status", "--etcd", address, "--cluster", "tls", "--json"]
            env = {k: v for k, v in os.environ.items() if not k.startswith("KVSTORE_ETCD_")}
            for given, code in ((flags, 0), (flags[:3], 1)):
                done = subprocess.run(
                    [sys.executable, "-m", "kvstore.cli", *status, *given],
                    env=env,
                    cwd=tmp_path,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert done.returncode == code, done.stderr
            assert "permission denied" in done.stderr
            refused = {
                "no login": EtcdConfig.load({}, **tls),
                "wrong password": EtcdConfig.load({}, **tls, user="kv", password="wrong"),
                "no certificate": EtcdConfig.load({}, ca=tls["ca"], user="kv", password=password),
                "plaintext": EtcdConfig.load({}, user="kv", password=password),
            }
            for what, settings in refused.items():
                with pytest.raises((PermissionDeniedError, MasterUnavailableError)) as caught:
                    EtcdLeader(address, "tls", 5.0, settings).candidates()
                print(f"{what}: {caught.value}")
                if what == "wrong password":
                    assert caught.type is PermissionDeniedError and "refused user 'kv'" in str(caught.value)
    finally:
        server.stop()
