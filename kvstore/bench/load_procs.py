"""Bench load processes (`kvstore bench ... --mode client`) and how their parent reads them: the child
prints READY, then one JSON object per op as it finishes, then {"done": true}."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from typing import Any, TypeVar

from kvstore.procs import READY_PREFIX, kvstore_process

Row = TypeVar("Row")


def report(rows: Iterable[Any]) -> int:
    """The child's side: READY, each row (a dataclass) as it comes, then done."""
    print(f"{READY_PREFIX}client", flush=True)
    for row in rows:
        print(json.dumps(asdict(row)), flush=True)
    print(json.dumps({"done": True}), flush=True)
    return 0


def gather(
    args: Sequence[str], count: int, row: Callable[..., Row], progress: Callable[[str], None] | None = None
) -> list[list[Row]]:
    """Starts `count` processes of `kvstore ARGS` at once and returns each one's rows (`row(**fields)`)."""
    per_process: list[list[Row]] = []
    with contextlib.ExitStack() as stack:
        procs = [stack.enter_context(kvstore_process(args)) for _ in range(count)]
        for proc, _ in procs:
            assert proc.stdout is not None
            rows = []
            for line in proc.stdout:
                data = json.loads(line)
                if "done" in data:
                    break
                rows.append(row(**data))
                if progress:
                    progress(data["op"])
            per_process.append(rows)
    return per_process
