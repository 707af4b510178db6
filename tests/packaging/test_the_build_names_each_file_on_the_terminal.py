"""`pip install .` shows the build's progress: pip hides a build backend's output unless run with -v, so
the wheel build's compiler and linker launcher (tools/build_progress.sh, set by CMakeLists.txt under
scikit-build-core) names each file on the build's controlling terminal, and nowhere when there is none.
These run the launcher as Ninja does, under a real pseudo-terminal; the last test configures the real
project with CMake (no compile) and reads the commands Ninja would run."""

from __future__ import annotations

import fcntl
import os
import re
import select
import shutil
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("KVSTORE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
LAUNCHER = ROOT / "tools" / "build_progress.sh"
# A compile as Ninja runs it: the launcher, then the compiler's command (here a shell standing in for the
# compiler: it says something on stdout and exits with a status of its own).
COMPILER = ["sh", "-c", "echo compiler-output; exit 7", "-o", "x.o", "-c"]


def _run(args: list[str], tmp: Path, terminal: bool, **env: str) -> tuple[subprocess.CompletedProcess, str]:
    """Runs the launcher in a session of its own, with a pseudo-terminal as its controlling terminal when
    `terminal`; returns the process and what reached the terminal."""
    (tmp / "build_start").write_text(str(int(time.time()) - 75))
    main, side = os.openpty()

    def take_terminal() -> None:  # (runs in the child after setsid: the pty becomes its terminal)
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        run = subprocess.run(
            ["sh", str(LAUNCHER), *args],
            stdin=side if terminal else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            start_new_session=True,
            preexec_fn=take_terminal if terminal else None,
            env={**os.environ, **env},
        )
        os.close(side)
        screen = b""
        while select.select([main], [], [], 0.2)[0]:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # (EIO: no writer is left)
                break
            if not chunk:
                break
            screen += chunk
    finally:
        os.close(main)
    return run, screen.decode()


def test_a_compile_names_its_source_on_the_terminal_and_keeps_its_output_and_status(tmp_path: Path) -> None:
    source = str(ROOT / "csrc" / "meta" / "object_table.cpp")
    run, screen = _run(["compile", str(tmp_path / "build_start"), *COMPILER, source], tmp_path, True)
    assert run.returncode == 7  # the compiler's own status
    assert run.stdout == "compiler-output\n" and run.stderr == ""  # its output unchanged, nothing added
    # elapsed since the configure (75 s before), and the source under csrc/
    assert re.fullmatch(r"\r\[kvstore-llm build 1:1[5-9]\] compiling meta/object_table\.cpp\r?\n", screen)


def test_a_link_names_its_output(tmp_path: Path) -> None:
    link = ["sh", "-c", "exit 0", "-shared", "-o", "_core.cpython-311-x86_64-linux-gnu.so", "a.o", "b.o"]
    run, screen = _run(["link", str(tmp_path / "build_start"), *link], tmp_path, True)
    assert run.returncode == 0
    assert "] linking _core.cpython-311-x86_64-linux-gnu.so" in screen


def test_without_a_terminal_nothing_is_printed_anywhere(tmp_path: Path) -> None:
    """CI, a container without -t, a daemon: the build's output is the compiler's alone."""
    run, screen = _run(
        ["compile", str(tmp_path / "build_start"), *COMPILER, "/x/csrc/a.cpp"], tmp_path, False
    )
    assert run.returncode == 7
    assert run.stdout == "compiler-output\n" and run.stderr == "" and screen == ""


def test_it_can_be_turned_off(tmp_path: Path) -> None:
    start = str(tmp_path / "build_start")
    run, screen = _run(
        ["compile", start, *COMPILER, "/x/csrc/a.cpp"], tmp_path, True, KVSTORE_BUILD_PROGRESS="0"
    )
    assert run.returncode == 7 and run.stdout == "compiler-output\n" and screen == ""
    note, screen = _run(["note", start, "hello"], tmp_path, True, KVSTORE_BUILD_PROGRESS="0")
    assert note.returncode == 0 and screen == ""


def test_a_note_and_a_wrong_mode(tmp_path: Path) -> None:
    start = str(tmp_path / "build_start")
    note, screen = _run(["note", start, "compiling", "the C++"], tmp_path, True)
    assert note.returncode == 0 and screen.endswith("] compiling the C++\r\n")
    wrong, _ = _run(["assemble", start, "true"], tmp_path, True)
    assert wrong.returncode == 2 and "unknown mode 'assemble'" in wrong.stderr


_BUILD_VARIABLES = ("CMAKE_CXX_COMPILER_LAUNCHER", "KVSTORE_BUILD_JOBS")


def _configure(build: Path, **env: str) -> tuple[str, str]:
    """Configures the project as scikit-build-core does (SKBUILD on, Ninja) without compiling; returns the
    build's edges and its rules (build.ninja, CMakeFiles/rules.ninja)."""
    pybind11 = subprocess.run(
        [sys.executable, "-c", "import pybind11; print(pybind11.get_cmake_dir())"],
        capture_output=True,
        text=True,
    )
    cmake, ninja = shutil.which("cmake"), shutil.which("ninja")
    if pybind11.returncode != 0 or cmake is None or ninja is None:
        pytest.skip("needs cmake, ninja and pybind11 (the build's own tools) to configure the project")
    run = subprocess.run(
        [cmake, "-S", str(ROOT), "-B", str(build), "-G", "Ninja", "-DSKBUILD=ON",
         f"-Dpybind11_DIR={pybind11.stdout.strip()}", f"-DPython_EXECUTABLE={sys.executable}"],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        env={**{k: v for k, v in os.environ.items() if k not in _BUILD_VARIABLES}, **env},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return (build / "build.ninja").read_text(), (build / "CMakeFiles" / "rules.ninja").read_text()


def test_the_wheel_build_runs_every_compile_and_link_through_it_and_configures_the_same_twice(
    tmp_path: Path,
) -> None:
    """Under scikit-build-core the launcher is in every compile and link command; its start time is read from
    a file, so a second configure (scikit-build-core configures on every build) leaves the commands as they
    were and Ninja recompiles nothing for it."""
    edges, rules = _configure(tmp_path / "build")
    objects = re.findall(r"^build \S+\.o: CXX_COMPILER", edges, re.MULTILINE)
    launchers = re.findall(r"^  LAUNCHER = (.*)$", edges, re.MULTILINE)
    compile_rules = [line for line in rules.splitlines() if "command =" in line and "-c $in" in line]
    expected = f"sh {LAUNCHER} compile {tmp_path / 'build' / 'build_start'} "
    assert len(objects) >= 3 and compile_rules
    per_edge = {line.strip() for line in launchers}
    for rule in compile_rules:  # (CMake 4 names the launcher per edge, CMake 3.25 in the rule)
        if "${LAUNCHER}" in rule:
            assert len(launchers) == len(objects) and per_edge == {expected.strip()}
        else:
            assert expected in rule, rule
    links = [line for line in rules.splitlines() if "-o $TARGET_FILE" in line]
    assert len(links) == 3 and all(f"sh {LAUNCHER} link " in line for line in links)  # _core, _tools, _meta
    time.sleep(1.1)  # (a start time written into the commands would differ now)
    edges_again, rules_again = _configure(tmp_path / "build")
    assert re.findall(r"^  LAUNCHER = (.*)$", edges_again, re.MULTILINE) == launchers
    assert rules_again == rules


def test_build_jobs_caps_the_compiles_and_links_at_once(tmp_path: Path) -> None:
    """KVSTORE_BUILD_JOBS=N puts every compile and link in a Ninja pool of depth N; a value that is not a
    number of jobs stops the configure saying so."""
    edges, rules = _configure(tmp_path / "capped", KVSTORE_BUILD_JOBS="1")
    assert re.search(r"^pool kvstore_jobs\n  depth = 1$", rules + edges, re.MULTILINE)
    objects = re.findall(r"^build \S+\.o: CXX_COMPILER", edges, re.MULTILINE)
    pooled = re.findall(r"^  pool = kvstore_jobs$", edges, re.MULTILINE)
    assert objects and len(pooled) == len(objects) + 3  # every compile and the three links
    free, _ = _configure(tmp_path / "free")
    assert "kvstore_jobs" not in free
    with pytest.raises(AssertionError, match="KVSTORE_BUILD_JOBS must be a number of jobs"):
        _configure(tmp_path / "wrong", KVSTORE_BUILD_JOBS="two")
