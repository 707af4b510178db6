"""Another local user on this host, for attacks on a node's local files: code run in a forked child that
has become uid/gid 65534 (nobody). Needs root; a test skips without it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import pytest

OTHER_UID = 65534


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root, to act as a second local user (uid 65534)")


def _become_other() -> None:
    os.setgroups([])
    os.setgid(OTHER_UID)
    os.setuid(OTHER_UID)


def run_as_other(action: Callable[[], None]) -> int:
    """Runs `action` as the other user in a child process; its exit code (0: it returned, 1: it raised
    PermissionError, 2: anything else)."""
    need_root()
    pid = os.fork()
    if pid == 0:  # (the child only calls os functions, then leaves without running any cleanup)
        code = 2
        try:
            _become_other()
            action()
            code = 0
        except PermissionError:
            code = 1
        except BaseException:
            code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@contextlib.contextmanager
def held_by_other(action: Callable[[], object]) -> Iterator[None]:
    """Runs `action` as the other user in a child that then stays alive (holding what it opened, such as
    flocks) until the block ends."""
    need_root()
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.close(stop_w)
            _become_other()
            kept = action()  # noqa: F841  (what it opened stays open while the child lives)
            os.write(ready_w, b"1")
            os.read(stop_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(stop_r)
    try:
        if os.read(ready_r, 1) != b"1":
            raise AssertionError("the other user's process failed before it was ready")
        yield
    finally:
        os.close(stop_w)
        os.close(ready_r)
        os.waitpid(pid, 0)
