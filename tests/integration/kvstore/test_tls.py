"""TLS for the master RPC (issue 22, section 1): a master with a certificate serves TLS and a client that
trusts its CA speaks it (the cluster secret is still proved inside); a client that does not trust it, or
speaks plain TCP, gets a clear error; with a CA the master also requires client certificates (mTLS).
Certificates are made here with the openssl command."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvstore import Store
from kvstore.cluster.master_client import MasterClient
from kvstore.config.security import SecurityConfig
from kvstore.errors import KVStoreError, MasterUnavailableError, PermissionDeniedError
from kvstore.master.wire.server import EmbeddedMaster, Master
from kvstore.rpc import messages as m
from kvstore.rpc import tls

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="the openssl command is not installed"
)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _issue(folder: Path, name: str, ca: str, ip: str = "") -> tuple[str, str]:
    key, csr, cert = (str(folder / f"{name}.{ext}") for ext in ("key", "csr", "pem"))
    _openssl(
        "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", f"/CN={name}"
    )
    extra = folder / f"{name}.ext"
    extra.write_text(f"subjectAltName=IP:{ip}\n" if ip else "extendedKeyUsage=clientAuth\n")
    _openssl(
        "x509", "-req", "-in", csr, "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
        "-out", cert, "-days", "2", "-extfile", str(extra),
    )  # fmt: skip
    return cert, key


def _ca(folder: Path, name: str) -> str:
    base = str(folder / name)
    _openssl(
        "req", "-x509", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{base}.key",
        "-out", f"{base}.pem", "-days", "2", "-subj", f"/CN={name}",
    )  # fmt: skip
    return base


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("pki")
    ca, other = _ca(folder, "cluster-ca"), _ca(folder, "other-ca")
    server_cert, server_key = _issue(folder, "master", ca, ip="127.0.0.1")
    client_cert, client_key = _issue(folder, "client", ca)
    return {
        "ca": f"{ca}.pem",
        "other_ca": f"{other}.pem",
        "server_cert": server_cert,
        "server_key": server_key,
        "client_cert": client_cert,
        "client_key": client_key,
    }


def _master(pki: dict[str, str], mutual: bool) -> EmbeddedMaster:
    security = SecurityConfig.load(
        tls_cert=pki["server_cert"], tls_key=pki["server_key"], tls_ca=pki["ca"] if mutual else ""
    )
    return Master.start_in_thread(security=security)


@pytest.fixture
def tls_master(pki: dict[str, str]) -> Iterator[EmbeddedMaster]:
    master = _master(pki, mutual=False)
    yield master
    master.close()


def _client(address: str, **security: str) -> MasterClient:
    return MasterClient(address, timeout=5, tls_context=tls.client_context(SecurityConfig.load(**security)))


def test_a_client_that_trusts_the_masters_ca_speaks_tls(
    tls_master: EmbeddedMaster, pki: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = _client(tls_master.address, tls_ca=pki["ca"])
    try:
        assert isinstance(client.call(m.Stats()), dict)
        sock = client._local.sock
        assert isinstance(sock, ssl.SSLSocket) and sock.version() in ("TLSv1.2", "TLSv1.3")
    finally:
        client.close()
    monkeypatch.setenv("KVSTORE_TLS_CA", pki["ca"])  # a store and `kvstore status` read it from there
    with Store.connect(tls_master.address, segment_size=4 << 20) as store:
        store.put("over-tls", b"x" * 1000)
        assert store.get("over-tls") == b"x" * 1000
        assert "TLS on" in store.master.call(m.ClusterStatus())["master"]["authentication"]


def test_requests_out_together_over_tls_are_answered_in_any_order(
    tls_master: EmbeddedMaster, pki: dict[str, str]
) -> None:
    """With requests out, a send reads the replies that come meanwhile (through TLS's own buffering)."""
    client = _client(tls_master.address, tls_ca=pki["ca"])
    try:
        sent = [client.send(m.Exists(keys=[f"k{i}" for i in range(n)])) for n in (1, 4096, 4096, 2)]
        assert [len(client.receive(s)) for s in reversed(sent)] == [2, 4096, 4096, 1]
    finally:
        client.close()


def test_a_client_that_does_not_trust_it_or_speaks_plain_tcp_is_refused(
    tls_master: EmbeddedMaster, pki: dict[str, str]
) -> None:
    untrusting = _client(tls_master.address, tls_ca=pki["other_ca"])
    with pytest.raises(PermissionDeniedError, match=r"TLS: .*certificate verify failed"):
        untrusting.call(m.Stats())
    untrusting.close()
    plain = MasterClient(tls_master.address, timeout=5, tls_context=None)
    with pytest.raises(KVStoreError):  # (the master reads its handshake as a broken TLS record)
        plain.call(m.Stats())
    plain.close()


def test_with_a_ca_the_master_requires_client_certificates(pki: dict[str, str]) -> None:
    master = _master(pki, mutual=True)
    try:
        anonymous = _client(master.address, tls_ca=pki["ca"])
        with pytest.raises((PermissionDeniedError, MasterUnavailableError)):
            anonymous.call(m.Stats())
        anonymous.close()
        known = _client(
            master.address, tls_ca=pki["ca"], tls_cert=pki["client_cert"], tls_key=pki["client_key"]
        )
        assert isinstance(known.call(m.Stats()), dict)
        known.close()
    finally:
        master.close()


def test_tls_settings_are_checked(pki: dict[str, str]) -> None:
    from kvstore.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="go together"):
        SecurityConfig.load(tls_cert=pki["server_cert"]).validate()
    with pytest.raises(InvalidArgumentError, match="names no file"):
        SecurityConfig.load(tls_ca="/nonexistent/ca.pem").validate()
