"""The cluster's security settings are kvstore's (kvstore.config.security.SecurityConfig) over what the
engine reads itself (transfer_engine.security.EngineSecurity): `kvstore config`'s "security" section keeps
every setting, variable, default, doc line and error message it had when the engine held them all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvstore.config import COMPONENTS, known_variables
from kvstore.config.report import effective
from kvstore.config.security import SecurityConfig
from kvstore.errors import InvalidArgumentError
from transfer_engine import EngineSecurity, TransferEngine

STRONG = "0123456789abcdef0123456789abcdef0123"
WEAK = "abc"
# (name, kind, default, doc) of each setting, in order, as transfer_engine.security declared them
SECTION = [
    (
        "cluster_secret",
        "secret",
        "",
        "The cluster secret (prefer cluster_secret_file: the environment leaks).",
    ),
    ("cluster_secret_file", "str", "", "A file holding the cluster secret, readable by its owner only."),
    (
        "insecure",
        "bool",
        False,
        "Listen beyond loopback with no cluster secret: anyone who reaches a port may use it.",
    ),
    (
        "tls_cert",
        "str",
        "",
        "PEM certificate (chain): a master serves its RPC over TLS with it; a client presents it (mTLS).",
    ),
    ("tls_key", "str", "", "PEM private key of tls_cert (readable by its owner only)."),
    (
        "tls_ca",
        "str",
        "",
        "PEM CA bundle: a client speaks TLS to the master and verifies it against this; a master with a "
        "certificate also requires clients to present one it signed (mTLS).",
    ),
]
BOTH_NAMED = "KVSTORE_CLUSTER_SECRET and KVSTORE_CLUSTER_SECRET_FILE are both set: name the secret once"
CERT_ALONE = "KVSTORE_TLS_CERT and KVSTORE_TLS_KEY go together: both or neither"
TOO_SHORT = "KVSTORE_CLUSTER_SECRET: a cluster secret needs at least 128 random bits"


def test_the_security_section_keeps_every_setting_variable_default_and_doc() -> None:
    assert COMPONENTS["security"] is SecurityConfig
    got = [(s.name, s.kind, s.default, s.doc) for s in SecurityConfig.settings()]
    assert got == SECTION
    assert [s.variable for s in SecurityConfig.settings()] == [f"KVSTORE_{n.upper()}" for n, *_ in SECTION]
    known = known_variables()
    assert {f"KVSTORE_{n.upper()}": known[f"KVSTORE_{n.upper()}"] for n, *_ in SECTION} == {
        f"KVSTORE_{n.upper()}": f"security.{n}" for n, *_ in SECTION
    }


def test_kvstore_config_shows_the_section_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVSTORE_CLUSTER_SECRET", STRONG)
    monkeypatch.setenv("KVSTORE_INSECURE", "1")
    rows = [(r["setting"], r["value"], r["source"], r["variable"]) for r in effective("security")]
    assert rows == [
        ("cluster_secret", "(set)", "environment KVSTORE_CLUSTER_SECRET", "KVSTORE_CLUSTER_SECRET"),
        ("cluster_secret_file", "", "default", "KVSTORE_CLUSTER_SECRET_FILE"),
        ("insecure", True, "environment KVSTORE_INSECURE", "KVSTORE_INSECURE"),
        ("tls_cert", "", "default", "KVSTORE_TLS_CERT"),
        ("tls_key", "", "default", "KVSTORE_TLS_KEY"),
        ("tls_ca", "", "default", "KVSTORE_TLS_CA"),
    ]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"cluster_secret": WEAK}, TOO_SHORT),
        ({"tls_cert": "/nonexistent/cert.pem"}, CERT_ALONE),
        ({"tls_ca": "/nonexistent/ca.pem"}, "KVSTORE_TLS_CA names no file: /nonexistent/ca.pem"),
        # several faults: the one named first is the one the single class named first
        ({"cluster_secret": WEAK, "tls_cert": "/nonexistent/cert.pem"}, CERT_ALONE),
        ({"cluster_secret": WEAK, "tls_ca": "/nonexistent/ca.pem"}, "KVSTORE_TLS_CA names no file"),
        ({"cluster_secret": STRONG, "cluster_secret_file": "/etc/hostname", "tls_cert": "/x"}, BOTH_NAMED),
    ],
)
def test_each_fault_is_named_as_before(settings: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        SecurityConfig.load({}, **settings)
    environment = {f"KVSTORE_{name.upper()}": value for name, value in settings.items()}
    with pytest.raises(InvalidArgumentError, match=message):
        SecurityConfig.load(environment)


def test_tls_files_that_exist_pass_and_the_secret_reads_as_the_engines(tmp_path: Path) -> None:
    for name in ("cert.pem", "key.pem", "ca.pem"):
        (tmp_path / name).write_text("-----BEGIN-----\n")
    config = SecurityConfig.load(
        {},
        cluster_secret=STRONG,
        tls_cert=str(tmp_path / "cert.pem"),
        tls_key=str(tmp_path / "key.pem"),
        tls_ca=str(tmp_path / "ca.pem"),
    )
    assert config.secret() == STRONG.encode() == EngineSecurity.load({}, cluster_secret=STRONG).secret()


def test_a_kvstore_process_hands_its_security_to_its_engine() -> None:
    shared = os.urandom(32).hex()
    with (
        TransferEngine(host="127.0.0.1", security=SecurityConfig.load({}, cluster_secret=shared)) as target,
        TransferEngine(host="127.0.0.1", security=EngineSecurity.load({}, cluster_secret=shared)) as engine,
    ):
        region = target.allocate(4096)
        assert region.array is not None
        region.array[:] = 7
        local = engine.allocate(4096)
        assert local.array is not None
        engine.read(local.addr, engine.open_peer(target.name, "tcp"), region.id, 0, 4096)
        assert (local.array == 7).all()
