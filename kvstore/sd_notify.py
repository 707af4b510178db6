"""Tells systemd that a server started from a `Type=notify` unit serves (deploy/systemd/): sd_notify(3)'s
protocol, one datagram of `KEY=value` lines sent to the AF_UNIX socket that NOTIFY_SOCKET names (a path,
or `@name` for the abstract namespace). Outside systemd (no NOTIFY_SOCKET) nothing is sent. A few lines
with a socket rather than a dependency (python-systemd needs libsystemd's headers to build)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

from kvstore.errors import InvalidArgumentError

log = logging.getLogger("kvstore.sd_notify")

ENV = "NOTIFY_SOCKET"


def notify_address(value: str) -> str | bytes:
    """The socket address NOTIFY_SOCKET names: an absolute path, or `@name` (abstract: a leading NUL).
    Anything else (systemd's `vsock:` form included, which this module does not speak) is refused."""
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        return b"\0" + value[1:].encode()
    raise InvalidArgumentError(
        f"{ENV}={value!r} is neither an absolute socket path nor '@name' (an abstract socket): "
        f"a Type=notify unit sets it; unset it to run outside systemd"
    )


def notify(*fields: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Sends `fields` (`KEY=value`, e.g. "READY=1") to systemd; True when sent, False when there is no
    NOTIFY_SOCKET or systemd's socket refused it (logged: systemd then times the start out itself)."""
    for field in fields:
        if "=" not in field or "\n" in field:
            raise InvalidArgumentError(f"a notification field is one KEY=value line, not {field!r}")
    value = environ.get(ENV, "")
    if not value:
        return False
    address = notify_address(value)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        try:
            sock.sendto("\n".join(fields).encode(), address)
        except OSError as exc:
            log.warning("could not tell systemd %s through %s=%s: %s", ",".join(fields), ENV, value, exc)
            return False
    return True


def ready(status: str, environ: Mapping[str, str] = os.environ) -> bool:
    """The server serves (the unit counts as started) and what it says in `systemctl status`."""
    return notify("READY=1", f"STATUS={' '.join(status.split())}", environ=environ)
