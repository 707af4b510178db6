"""The commands deploy/'s examples give for making the cluster secret work as written, in their order:
systemd's (master.env.example: as root, the kvstore user's directory and file) and the Dockerfile's (a
host directory bind-mounted into the image, whose user is uid 10001). Each runs here with only its paths
moved to a scratch directory and the kvstore user played by nobody/nogroup; then the service's user
reads the file with kvstore's own reader (it refuses a secret others may read, or another user's)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.deploy.deploy_files import DEPLOY
from tests.deploy.run_as import read_secret_as, require_root_and_setpriv, shared_scratch
from tests.deploy.test_systemd_units_start_kvstore_from_their_example_settings import environment_file

NOBODY = 65534  # nobody:nogroup, in place of the kvstore user and group sysusers makes


def commented_commands(path: Path) -> list[str]:
    """The shell commands a file's comments give (lines `#   command`, `\\` continuations joined)."""
    lines = [line[4:] for line in path.read_text().splitlines() if line.startswith("#   ")]
    commands: list[str] = []
    carry = ""
    for line in lines:
        if line.endswith("\\"):
            carry += line[:-1]
        else:
            commands.append(carry + line)
            carry = ""
    return commands


def kvstore_program() -> str:
    return shutil.which("kvstore") or str(Path(sys.executable).parent / "kvstore")


def run_as_root(commands: list[str], cwd: Path) -> None:
    ran = subprocess.run(
        ["bash", "-e", "-c", "\n".join(commands)], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, f"{commands}: {ran.stderr}"


def test_systemd_secret_commands_leave_a_secret_the_kvstore_user_reads() -> None:
    require_root_and_setpriv()
    example = DEPLOY / "systemd" / "master.env.example"
    secret_file = Path(environment_file(example)["KVSTORE_CLUSTER_SECRET_FILE"])
    commands = [c for c in commented_commands(example) if "/etc/kvstore" in c]
    assert any("secret new" in c for c in commands), commands
    with shared_scratch() as scratch:
        etc = scratch / "etc-kvstore"
        local = [
            c.replace("/opt/kvstore/bin/kvstore", kvstore_program())
            .replace("/etc/kvstore", str(etc))
            .replace("kvstore:kvstore", "nobody:nogroup")
            .replace("-g kvstore", "-g nogroup")
            for c in commands
        ]
        run_as_root(local, scratch)
        made = etc / secret_file.relative_to("/etc/kvstore")
        read = read_secret_as(NOBODY, NOBODY, made)  # (as the unit's User= and Group=)
        assert read.returncode == 0, read.stderr
        assert etc.stat().st_mode & 0o777 == 0o750 and etc.stat().st_uid == 0


def test_the_docker_run_example_mounts_a_secret_the_image_user_reads() -> None:
    require_root_and_setpriv()
    dockerfile = DEPLOY / "docker" / "Dockerfile"
    (uid,) = re.findall(r"^ARG KVSTORE_UID=(\d+)$", dockerfile.read_text(), re.M)
    commands = commented_commands(dockerfile)
    (making,) = [c for c in commands if "secret new" in c]
    (running,) = [c for c in commands if c.startswith("docker run") and " -v " in c]
    host, inside = re.search(r"-v \$PWD/(\S+?):(\S+?):ro", running).groups()  # type: ignore[union-attr]
    secret_file = re.search(r"KVSTORE_CLUSTER_SECRET_FILE=(\S+)", running).group(1)  # type: ignore[union-attr]
    assert secret_file.startswith(inside + "/")
    with shared_scratch() as scratch:
        run_as_root(
            [making.replace("sudo ", "").replace("kvstore secret", f"{kvstore_program()} secret")], scratch
        )
        mounted = scratch / host / secret_file.removeprefix(inside + "/")  # (what the bind mount shows)
        read = read_secret_as(int(uid), int(uid), mounted)
        assert read.returncode == 0, read.stderr
