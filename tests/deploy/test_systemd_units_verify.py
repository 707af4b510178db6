"""deploy/systemd's units pass `systemd-analyze verify` without a warning (run on instances of the
templates whose ExecStart names this environment's kvstore: verify refuses a command it cannot find), wait
for kvstore's READY=1 (Type=notify, from the main process), and their example settings name only
variables kvstore reads (its servers refuse any other KVSTORE_* variable); systemd-sysusers makes the
user they run as from kvstore.sysusers (in a scratch root)."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvstore.config.environment import known_variables
from tests.deploy.conftest import require_tool
from tests.deploy.deploy_files import DEPLOY

SYSTEMD = DEPLOY / "systemd"
TEMPLATES = sorted(SYSTEMD.glob("*@.service"))
INSTALLED_AT = "/opt/kvstore/bin/kvstore"  # where the units say pip put the command


def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # (keys keep their case)
    parser.read_string(path.read_text())
    return parser


def test_there_are_master_and_node_units() -> None:
    assert [p.name for p in TEMPLATES] == ["kvstore-master@.service", "kvstore-node@.service"]


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_systemd_analyze_verifies_the_unit(template: Path, tmp_path: Path) -> None:
    analyze = require_tool("systemd-analyze", "Debian's systemd")
    kvstore = shutil.which("kvstore") or str(Path(sys.executable).parent / "kvstore")
    assert Path(kvstore).is_file(), "the kvstore command of this environment"
    text = template.read_text()
    assert INSTALLED_AT in text
    instance = tmp_path / template.name.replace("@.", "@test.")
    instance.write_text(text.replace(INSTALLED_AT, kvstore))
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(instance)], capture_output=True, text=True, timeout=60
    )
    # (unknown keys and bad values are warnings with exit status 0: any output fails the check)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_units_wait_for_kvstore_to_say_it_is_ready(template: Path) -> None:
    service = _unit(template)["Service"]
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"
    role = template.name.removeprefix("kvstore-").split("@")[0]
    assert service["ExecStart"] == f"{INSTALLED_AT} {role}"
    assert service["EnvironmentFile"] == f"/etc/kvstore/{role}-%i.env"
    assert (SYSTEMD / f"{role}.env.example").is_file()
    assert service["User"] == "kvstore" and service["Group"] == "kvstore"


def test_sysusers_makes_the_user_the_units_run_as(tmp_path: Path) -> None:
    sysusers = require_tool("systemd-sysusers", "Debian's systemd")
    (tmp_path / "etc").mkdir()
    done = subprocess.run(
        [sysusers, f"--root={tmp_path}", str(SYSTEMD / "kvstore.sysusers")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    passwd = [line.split(":") for line in (tmp_path / "etc/passwd").read_text().splitlines()]
    users = {fields[0]: fields for fields in passwd}
    groups = {line.split(":")[0] for line in (tmp_path / "etc/group").read_text().splitlines()}
    assert users["kvstore"][5] == "/var/lib/kvstore" and "kvstore" in groups


@pytest.mark.parametrize("example", sorted(SYSTEMD.glob("*.env.example")), ids=lambda p: p.name)
def test_example_settings_name_only_variables_kvstore_reads(example: Path) -> None:
    named = re.findall(r"^#?(KVSTORE_\w+)=", example.read_text(), re.M)
    assert named, example.name
    assert set(named) - set(known_variables()) == set()
