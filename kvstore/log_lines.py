"""How kvstore's processes (master, node, index) write their log: every line stamped with its time (ISO 8601
in UTC, to the millisecond) and level, then the process, e.g.
``2026-12-07T18:51:35.123Z WARNING kvstore node: the segment is anonymous memory ...``.

Warnings and errors go to stderr. A master's status lines (where it listens, each leadership it takes or
gives up) go to stdout as they always did, stamped alike; its readiness line (``READY ...``, which the
processes that start it read) stays as it is.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from typing import TextIO

STATUS = "kvstore.status"  # the logger of the status lines (stdout)


class StampedFormatter(logging.Formatter):
    """'<UTC time> <LEVEL> kvstore <process>: <message>'."""

    def __init__(self, process: str) -> None:
        super().__init__(f"%(asctime)s %(levelname)s kvstore {process}: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


def _handler(stream: TextIO, process: str) -> logging.Handler:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(StampedFormatter(process))
    return handler


def configure(process: str, info: Sequence[str] = ()) -> None:
    """This process logs WARNING and above (INFO and above from the `info` loggers) to stderr, and its
    status lines (status()) to stdout, each stamped; replaces any handler set before."""
    root = logging.getLogger()
    root.handlers[:] = [_handler(sys.stderr, process)]
    root.setLevel(logging.WARNING)
    for name in info:
        logging.getLogger(name).setLevel(logging.INFO)
    status_log = logging.getLogger(STATUS)
    status_log.handlers[:] = [_handler(sys.stdout, process)]
    status_log.setLevel(logging.INFO)
    status_log.propagate = False


def status(line: str) -> None:
    """A status line on stdout, stamped (configure()); printed bare where logging was not configured (a
    master started in a test's or a bench's own process)."""
    status_log = logging.getLogger(STATUS)
    if status_log.handlers:
        status_log.info(line)  # (a stream handler flushes each line)
    else:
        print(line, flush=True)
