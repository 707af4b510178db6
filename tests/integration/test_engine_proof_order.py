"""The engine handshake's proof order (issue 39, item 13): the engine that accepts proves the cluster
secret last. It answered a hello with its nonce and its HMAC over the peer's nonce, to anyone who
connected: an offline oracle (guesses of the secret tested at memory speed). Now a hello gets the nonce
alone, a made-up proof gets nothing more, and engines that share the secret link as before."""

from __future__ import annotations

import os
import socket
import struct

from tests.conftest import start_target, stop_target
from transfer_engine import TransferEngine

MAGIC = 0x4B565342
VERSION = 4  # (3 sent the engine's proof with its nonce)
NONCE = 32


def test_a_hello_gets_the_nonce_alone_and_a_made_up_proof_nothing() -> None:
    target = start_target()
    try:
        host, port = target.name.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(struct.pack("<IHH", MAGIC, VERSION, 0) + os.urandom(NONCE))
            challenge = b""
            while len(challenge) < 4 + NONCE:
                chunk = s.recv(4 + NONCE - len(challenge))
                assert chunk, challenge
                challenge += chunk
            assert struct.unpack("<I", challenge[:4])[0] == MAGIC
            s.settimeout(0.5)
            try:
                extra = s.recv(1)  # nothing more until this side proves itself
            except TimeoutError:
                extra = b""
            assert extra == b""
            s.settimeout(10)
            s.sendall(os.urandom(32))  # a proof made up without the secret
            received = b""
            try:
                while chunk := s.recv(4096):
                    received += chunk
            except ConnectionResetError:
                pass
            assert received == b""
        with TransferEngine() as engine:  # and engines of the cluster still link
            engine.open_peer(target.name)
    finally:
        stop_target(target)
