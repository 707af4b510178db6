"""The opt-in `mooncake.store` alias: an engine's built-in Mooncake integration imports kvstore's layer."""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

PTH = "kvstore-mooncake-alias.pth"
PROBE = (
    "from mooncake.store import MooncakeDistributedStore, ReplicateConfig\n"
    "from mooncake.engine import TransferEngine\n"
    "print(MooncakeDistributedStore.__module__, TransferEngine.__module__)"
)


def _installed_pth() -> bool:
    return any((Path(p) / PTH).exists() for p in [*site.getsitepackages(), site.getusersitepackages()])


@pytest.mark.skipif(
    not _installed_pth(), reason=f"{PTH} ships in the wheel only (this is an editable install)"
)
def test_alias_is_opt_in() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KVSTORE_MOONCAKE_ALIAS"}
    on = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**env, "KVSTORE_MOONCAKE_ALIAS": "1"},
        capture_output=True,
        text=True,
    )
    assert on.returncode == 0, on.stderr
    assert on.stdout.split() == ["kvstore.integrations.mooncake"] * 2
    off = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True)
    assert off.returncode != 0 and "No module named 'mooncake'" in off.stderr  # nothing changes unless asked
    quiet = subprocess.run(
        [sys.executable, "-c", "import sys; print('kvstore' in sys.modules)"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert quiet.stdout.strip() == "False"  # start-up imports nothing of kvstore
