"""The cluster secret's strength rule (issue 39, item 13): any 16 characters passed, and a chosen
password such as `Summer2025!kvstore` fell to an offline guesser in 2,066 guesses. A secret must now be
what a generator writes, with at least 128 bits: hex of 32 digits or more, base64 of 22 characters or
more, and not a few characters repeated."""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path

import pytest

from kvstore.config.security import SecurityConfig
from kvstore.errors import InvalidArgumentError
from kvstore.master.wire.server import Master
from transfer_engine.security import read_secret_file

WEAK = [
    "Summer2025!kvstore",  # the issue's: a chosen password
    "correct horse battery staple",  # words and spaces
    "0123456789abcdef",  # 16 hex digits: 64 bits
    "Zm9vYmFyYmF6cXV4cXV1",  # 20 base64 characters: 120 bits
    "a" * 64,
    "0123" * 10,  # 4 distinct characters
    "-" * 30,
]
STRONG = [
    secrets.token_hex(16),
    secrets.token_hex(32),  # what `kvstore secret new` writes
    secrets.token_urlsafe(16),  # 22 characters
    base64.b64encode(os.urandom(16)).decode(),  # 24, '=' padded
    base64.b64encode(os.urandom(32)).decode(),  # `openssl rand -base64 32`
    os.environ["KVSTORE_CLUSTER_SECRET"],  # the suite's (tests/conftest.py)
]


@pytest.mark.parametrize("secret", WEAK)
def test_a_weak_secret_is_refused_with_how_to_make_one(secret: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="kvstore secret new"):
        SecurityConfig(cluster_secret=secret).secret()
    path = tmp_path / "secret"
    path.write_text(secret + "\n")
    path.chmod(0o600)
    with pytest.raises(InvalidArgumentError, match="KVSTORE_CLUSTER_SECRET_FILE"):
        read_secret_file(path)


@pytest.mark.parametrize("secret", STRONG)
def test_a_generated_secret_is_taken(secret: str) -> None:
    assert SecurityConfig(cluster_secret=secret).secret() == secret.encode()


def test_a_master_does_not_start_with_a_weak_secret() -> None:
    with pytest.raises(InvalidArgumentError, match="at least 128 random bits"):
        Master(security=SecurityConfig(cluster_secret="0123456789abcdef0123456789abcd"))
