"""Tells systemd that a server started from a `Type=notify` unit serves (deploy/systemd/): sd_notify(3)'s
protocol, one datagram of `KEY=value` lines sent to the socket that NOTIFY_SOCKET names: an AF_UNIX path,
`@name` for the abstract namespace, or `vsock:CID:PORT` (a VM telling its host, systemd 253 on; also
`vsock-dgram:`, `vsock-seqpacket:`, `vsock-stream:`). Outside systemd (no NOTIFY_SOCKET) nothing is sent.
A notification that cannot be sent (a form this Python cannot speak, a socket gone) is a warning, never an
error: systemd then times the start out itself, and the server serves on. A few lines with a socket rather
than a dependency (python-systemd needs libsystemd's headers to build)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from kvstore.errors import InvalidArgumentError

log = logging.getLogger("kvstore.sd_notify")

ENV = "NOTIFY_SOCKET"

# vsock prefixes -> the socket types tried, in order ("vsock:": datagrams, else sequenced packets where
# the hypervisor's transport has no datagrams, as systemd does).
_VSOCK_KINDS = {
    "vsock": ("SOCK_DGRAM", "SOCK_SEQPACKET"),
    "vsock-dgram": ("SOCK_DGRAM",),
    "vsock-seqpacket": ("SOCK_SEQPACKET",),
    "vsock-stream": ("SOCK_STREAM",),
}
_warned: set[str] = set()  # the NOTIFY_SOCKET values already warned about (one warning each)


@dataclass(frozen=True)
class NotifyAddress:
    """Where NOTIFY_SOCKET points: the socket family, the types to try in order, and the address."""

    family: int
    kinds: tuple[int, ...]
    address: str | bytes | tuple[int, int]


def notify_address(value: str) -> NotifyAddress:
    """The socket NOTIFY_SOCKET names; InvalidArgumentError for a form it is not, or one this Python's
    socket module cannot open (AF_VSOCK is Linux's)."""
    if value.startswith("/"):
        return NotifyAddress(socket.AF_UNIX, (socket.SOCK_DGRAM,), value)
    if value.startswith("@") and len(value) > 1:
        return NotifyAddress(socket.AF_UNIX, (socket.SOCK_DGRAM,), b"\0" + value[1:].encode())
    prefix, _, place = value.partition(":")
    if prefix in _VSOCK_KINDS:
        return _vsock_address(value, prefix, place)
    raise InvalidArgumentError(
        f"{ENV}={value!r} is none of an absolute socket path, '@name' (an abstract socket) or "
        "'vsock:CID:PORT': a Type=notify unit sets it; unset it to run outside systemd"
    )


def _vsock_address(value: str, prefix: str, place: str) -> NotifyAddress:
    cid, _, port = place.partition(":")
    if not (cid.isdecimal() and port.isdecimal() and int(cid) < 2**32 and int(port) < 2**32):
        raise InvalidArgumentError(f"{ENV}={value!r}: a vsock address is {prefix}:CID:PORT (decimal)")
    if not hasattr(socket, "AF_VSOCK"):
        raise InvalidArgumentError(f"{ENV}={value!r}: this Python's socket module has no AF_VSOCK")
    kinds = tuple(getattr(socket, name) for name in _VSOCK_KINDS[prefix])
    return NotifyAddress(socket.AF_VSOCK, kinds, (int(cid), int(port)))


def notify(*fields: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Sends `fields` (`KEY=value`, e.g. "READY=1") to systemd; True when sent, False when there is no
    NOTIFY_SOCKET or it could not be sent (a warning, once for each NOTIFY_SOCKET value)."""
    for field in fields:
        if "=" not in field or "\n" in field:
            raise InvalidArgumentError(f"a notification field is one KEY=value line, not {field!r}")
    value = environ.get(ENV, "")
    if not value:
        return False
    try:
        _send(notify_address(value), "\n".join(fields).encode())
    except (InvalidArgumentError, OSError) as exc:
        if value not in _warned:
            _warned.add(value)
            log.warning("could not tell systemd %s through %s=%s: %s", ",".join(fields), ENV, value, exc)
        return False
    return True


def _send(where: NotifyAddress, message: bytes) -> None:
    """One message to `where`, through the first of its socket types the kernel takes."""
    for i, kind in enumerate(where.kinds):
        try:
            with socket.socket(where.family, kind | socket.SOCK_CLOEXEC) as sock:
                sock.settimeout(5)  # (a stream or packet peer that does not accept must not hang a server)
                if where.family == socket.AF_UNIX:
                    sock.sendto(message, where.address)
                else:
                    sock.connect(where.address)
                    sock.sendall(message)
                return
        except OSError:
            if i == len(where.kinds) - 1:
                raise


def ready(status: str, environ: Mapping[str, str] = os.environ) -> bool:
    """The server serves (the unit counts as started) and what it says in `systemctl status`."""
    return notify("READY=1", f"STATUS={' '.join(status.split())}", environ=environ)
