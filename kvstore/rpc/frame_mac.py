"""The MAC every master RPC frame carries after the handshake, when the cluster has a secret and the
connection is not TLS (TLS protects its records already):

    frame = length (4 bytes, little-endian), body, tag (TAG_SIZE bytes)
    tag   = keyed BLAKE2b(length + body; key of the direction, salt = the direction's frame count)

Each direction has its own key, derived from the cluster secret and both nonces of the connection's
handshake (auth), and its own count from 0, which neither side sends: a frame written into the stream by
someone without the secret, a frame replayed (here or on another connection), dropped or reordered does
not verify, and the connection is cut. The length is outside the body but inside the tag, so a frame over
the bound is refused before it is read, and a length changed on the way fails the tag. Keyed BLAKE2b: a
MAC in one call, ~0.7 µs for a small frame in CPython (HMAC-SHA256 takes ~3)."""

from __future__ import annotations

import hashlib
import hmac

from kvstore.rpc.framing import FrameError

TAG_SIZE = 16
_SALT = 16  # bytes of BLAKE2b's salt: the frame's count, little-endian


class FrameMacError(FrameError):
    """A frame whose tag does not verify: written by someone else, replayed, reordered or damaged."""


class FrameMac:
    """Both directions of one connection: seal() what this side sends, verify() what it receives, each
    in the order of the stream (one thread or one event loop per connection)."""

    __slots__ = ("_receive_key", "_received", "_send_key", "_sent")

    def __init__(self, send_key: bytes, receive_key: bytes) -> None:
        self._send_key, self._receive_key = send_key, receive_key
        self._sent = self._received = 0

    def seal(self, frame: bytes) -> bytes:
        """`frame` (length and body, as framing.pack makes it) with its tag appended."""
        salt = self._sent.to_bytes(_SALT, "little")
        self._sent += 1
        return frame + hashlib.blake2b(frame, digest_size=TAG_SIZE, key=self._send_key, salt=salt).digest()

    def verify(
        self, header: bytes | bytearray | memoryview, body: bytes | memoryview, tag: bytes | memoryview
    ) -> None:
        """Checks the next received frame's tag; FrameMacError if it does not verify (nothing of the frame
        may then be used, nor anything after it on the connection)."""
        salt = self._received.to_bytes(_SALT, "little")
        h = hashlib.blake2b(header, digest_size=TAG_SIZE, key=self._receive_key, salt=salt)
        h.update(body)
        if not hmac.compare_digest(h.digest(), tag):
            raise FrameMacError(
                "a frame's MAC does not verify (written into the connection by someone without the cluster "
                "secret, replayed, reordered or damaged): the connection is cut"
            )
        self._received += 1

    def open(self, header: bytes | bytearray, rest: bytes | bytearray) -> memoryview:
        """The body of a received frame: `rest` is what followed its length (body and tag)."""
        view = memoryview(rest)
        self.verify(header, view[:-TAG_SIZE], view[-TAG_SIZE:])
        return view[:-TAG_SIZE]
