"""A relay on the path between a client and the master, as an attacker who can write into a TCP stream
would run it: it passes each connection's bytes both ways, and once the client's side of the
authentication has gone by (`--after` bytes: the hello and the proof) it writes a frame of its own into
the client's stream, ahead of the client's first request.

    python tests/helpers/rpc_relay.py MASTER_ADDRESS --inject HEX [--after 72]

Prints `READY 127.0.0.1:PORT` once listening, then `INJECTED` for each connection it wrote into, and
`MASTER CLOSED` when the master ends a connection. Exits when stdin closes.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
import threading


def _pipe(src: socket.socket, dst: socket.socket, on_eof: str = "") -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    if on_eof:
        print(on_eof, flush=True)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def _client_to_master(client: socket.socket, master: socket.socket, after: int, frame: bytes) -> None:
    passed = b""
    try:
        while len(passed) < after:
            data = client.recv(after - len(passed))
            if not data:
                return
            passed += data
            master.sendall(data)
        master.sendall(frame)
        print("INJECTED", flush=True)
    except OSError:
        return
    _pipe(client, master)


def _serve(listener: socket.socket, master_address: tuple[str, int], after: int, frame: bytes) -> None:
    while True:
        client, _ = listener.accept()
        master = socket.create_connection(master_address, timeout=10)
        master.settimeout(None)
        threading.Thread(target=_pipe, args=(master, client, "MASTER CLOSED"), daemon=True).start()
        threading.Thread(target=_client_to_master, args=(client, master, after, frame), daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("master")
    parser.add_argument("--inject", required=True, help="the frame to write, in hex")
    parser.add_argument("--after", type=int, default=72, help="client bytes passed on before it")
    args = parser.parse_args()
    host, _, port = args.master.rpartition(":")
    listener = socket.create_server(("127.0.0.1", 0))
    print(f"READY 127.0.0.1:{listener.getsockname()[1]}", flush=True)
    target = (host.strip("[]"), int(port))
    threading.Thread(
        target=_serve, args=(listener, target, args.after, bytes.fromhex(args.inject)), daemon=True
    ).start()
    sys.stdin.read()  # (the test's lifeline)


if __name__ == "__main__":
    main()
