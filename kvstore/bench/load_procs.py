"""Bench load processes (`kvstore bench ... --mode client`) and how their parent reads them: the child
prints READY, then, each time its parent writes "go" (to every child once all reported the last op: they
run each op together), one JSON object for its next op, and {"done": true} after the last."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from typing import Any, TypeVar

from kvstore.procs import READY_PREFIX, kvstore_process

Row = TypeVar("Row")


def report(rows: Iterable[Any]) -> int:
    """The child's side: READY, then a row (a dataclass) per "go" on stdin, then done."""
    print(f"{READY_PREFIX}client", flush=True)
    ops = iter(rows)
    while sys.stdin.readline():  # (EOF: the parent went away)
        row = next(ops, None)
        if row is None:
            break
        print(json.dumps(asdict(row)), flush=True)
    print(json.dumps({"done": True}), flush=True)
    return 0


def gather(
    args: Sequence[str], count: int, row: Callable[..., Row], progress: Callable[[str], None] | None = None
) -> list[list[Row]]:
    """Starts `count` processes of `kvstore ARGS` and returns each one's rows (`row(**fields)`); each op
    starts in all of them at once (they start one after another: without it the first ones would run
    theirs alone while the last ones still start)."""
    per_process: list[list[Row]] = [[] for _ in range(count)]
    with contextlib.ExitStack() as stack:
        procs = [stack.enter_context(kvstore_process(args)) for _ in range(count)]
        running = list(range(count))
        while running:
            for i in running:
                stdin = procs[i][0].stdin
                assert stdin is not None
                stdin.write("go\n")
                stdin.flush()
            op = None
            for i in list(running):
                stdout = procs[i][0].stdout
                assert stdout is not None
                data = json.loads(stdout.readline() or '{"done": true}')
                if "done" in data:
                    running.remove(i)
                    continue
                per_process[i].append(row(**data))
                op = data["op"]
            if progress and op is not None:
                progress(op)
    return per_process
