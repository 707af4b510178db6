"""The masters' records in etcd are signed with the cluster secret and bound to their lease
(kvstore.rpc.etcd_records), and etcd's TLS and login settings are checked (kvstore.config.etcd): issue 39,
item 14. With a real etcd: tests/integration/kvstore/test_etcd_security.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kvstore.cli import build_parser
from kvstore.config.etcd import EtcdConfig
from kvstore.errors import InvalidArgumentError, PermissionDeniedError
from kvstore.rpc import etcd
from kvstore.rpc.etcd_records import CANDIDATE, LEADER, MAX_RECORD_BYTES, MasterRecord, Records

SECRET = b"s" * 32
RECORD = MasterRecord("127.0.0.1:50051", "a" * 32, lease=7587, ttl=3)


def test_a_signed_record_verifies_only_as_written() -> None:
    records = Records(SECRET, "c1")
    value = records.encode(LEADER, RECORD)
    assert records.decode(LEADER, value, RECORD.lease) == RECORD
    assert records.decode(LEADER, value, RECORD.lease + 1) is None  # moved to another lease (or none)
    assert records.decode(LEADER, value, 0) is None
    assert records.decode(CANDIDATE, value, RECORD.lease) is None  # a leader's record as a candidate's
    assert records.decode(LEADER, records.encode(CANDIDATE, RECORD), RECORD.lease) is None
    assert Records(SECRET, "c2").decode(LEADER, value, RECORD.lease) is None  # another cluster's
    assert Records(b"t" * 32, "c1").decode(LEADER, value, RECORD.lease) is None  # another secret
    for field, forged in (("address", "127.0.0.1:9"), ("id", "b" * 32), ("lease", 1), ("ttl", 60)):
        body = json.loads(value)
        body[field] = forged
        lease = forged if field == "lease" else RECORD.lease
        assert records.decode(LEADER, json.dumps(body).encode(), int(lease)) is None, field
    body = json.loads(value)
    del body["mac"]
    assert records.decode(LEADER, json.dumps(body).encode(), RECORD.lease) is None  # unsigned


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"",
        b"garbage",
        b"[1, 2]",
        b'{"address": "127.0.0.1:1"}',
        b'{"address": "nope", "id": "x", "lease": 5, "ttl": 3}',
        b'{"address": "127.0.0.1:1", "id": "x", "lease": true, "ttl": 3}',
        b'{"address": "127.0.0.1:1", "id": "x", "lease": 5, "ttl": 3.0}',
        b'{"address": "127.0.0.1:1", "id": "", "lease": 5, "ttl": 3}',
        b'{"address": "127.0.0.1:1", "id": "x", "lease": 5, "ttl": 0}',
        b'{"address": "127.0.0.1:1", "id": "x", "lease": 5, "ttl": 3, "mac": "zz"}',
        b'{"address": "127.0.0.1:1", "id": "x", "lease": 5, "ttl": 3, "mac": 5}',
        b" " * (MAX_RECORD_BYTES + 1),
    ],
)
def test_what_is_not_a_record_is_none(value: bytes | None) -> None:
    assert Records(SECRET, "c").decode(LEADER, value, 5) is None


def test_without_a_secret_a_record_is_taken_only_under_its_own_lease() -> None:
    """Nothing to sign with: a well-formed record is taken where its key lives under the lease it names
    (a record put under no lease, which would never expire, is not)."""
    records = Records(b"", "c")
    value = records.encode(LEADER, RECORD)
    assert b"mac" not in value and not records.signed
    assert records.decode(LEADER, value, RECORD.lease) == RECORD
    assert records.decode(LEADER, value, 0) is None


# -- etcd's TLS and login -----------------------------------------------------------------------------


def _file(tmp_path: Path, name: str, text: str = "x", mode: int = 0o600) -> str:
    path = tmp_path / name
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def test_etcd_settings_are_checked(tmp_path: Path) -> None:
    ca, cert, key = (_file(tmp_path, n) for n in ("ca.pem", "cert.pem", "key.pem"))
    pw = _file(tmp_path, "pw", "hunter2-but-longer\n")
    assert EtcdConfig.load({}, ca=ca, cert=cert, key=key, user="kv", password_file=pw).credentials() == (
        "kv",
        "hunter2-but-longer",
    )
    assert EtcdConfig.load({"KVSTORE_ETCD_USER": "kv", "KVSTORE_ETCD_PASSWORD": "p"}).credentials() == (
        "kv",
        "p",
    )
    assert EtcdConfig.load({}).credentials() is None and not EtcdConfig.load({}).secure()
    bad = [
        {"cert": cert, "ca": ca},  # no key
        {"cert": cert, "key": key},  # a client certificate without TLS
        {"user": "kv"},  # no password
        {"password": "p"},  # no user
        {"user": "kv", "password": "p", "password_file": pw},
        {"ca": str(tmp_path / "missing.pem")},
    ]
    for overrides in bad:
        with pytest.raises(InvalidArgumentError):
            EtcdConfig.load({}, **overrides)
    open_key = _file(tmp_path, "open.key", mode=0o644)
    open_pw = _file(tmp_path, "open.pw", mode=0o640)
    with pytest.raises(PermissionDeniedError, match="chmod 600"):
        EtcdConfig.load({}, ca=ca, cert=cert, key=open_key)
    with pytest.raises(PermissionDeniedError, match="chmod 600"):
        EtcdConfig.load({}, user="kv", password_file=open_pw)
    empty = _file(tmp_path, "empty.pw", "\n")
    with pytest.raises(InvalidArgumentError, match="empty"):
        EtcdConfig.load({}, user="kv", password_file=empty).credentials()


def test_a_password_never_crosses_the_network_in_plaintext() -> None:
    login = EtcdConfig.load({}, user="kv", password="p")
    with pytest.raises(PermissionDeniedError, match="KVSTORE_ETCD_CA"):
        etcd.connect("127.0.0.1:2379,10.1.2.3:2379", 0.5, login)


def test_the_etcd_options_set_the_etcd_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where --etcd is accepted, --etcd-ca ... set KVSTORE_ETCD_* for whatever reaches etcd there."""
    from kvstore import cli

    monkeypatch.delenv("KVSTORE_ETCD_KEY", raising=False)
    parser, _ = build_parser()
    for command in ("master", "node", "status"):
        for name in ("CA", "USER"):  # (so that the test's end takes them out again)
            monkeypatch.setenv(f"KVSTORE_ETCD_{name}", "before")
        cli._apply_etcd_access(parser.parse_args([command, "--etcd-ca", "/ca.pem", "--etcd-user", "kv"]))
        assert os.environ["KVSTORE_ETCD_CA"] == "/ca.pem" and os.environ["KVSTORE_ETCD_USER"] == "kv"
        assert "KVSTORE_ETCD_KEY" not in os.environ
