"""A KV-event publisher speaking what vLLM's ZmqEventPublisher speaks: a PUB socket sending (topic,
8-byte big-endian sequence number, msgpack [ts, [events], dp_rank]) and a ROUTER answering replay
requests (the starting sequence number) with every kept batch from there, then an end marker (-1). The
engines tier runs vLLM's own publisher; this one lets the integration tests choose gaps and bad batches."""

from __future__ import annotations

import socket
import threading
import time

import msgpack
import zmq


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Publisher:
    def __init__(self) -> None:
        self.context = zmq.Context()
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.replay_endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.pub = self.context.socket(zmq.PUB)
        self.pub.bind(self.endpoint)
        self.kept: list[tuple[int, bytes]] = []
        self.seq = 0
        self._lock = threading.Lock()
        self._running = True
        self._router = threading.Thread(target=self._serve_replay, daemon=True)
        self._router.start()

    def publish(self, events: list[dict], rank: int = 0, send: bool = True, raw: bytes | None = None) -> int:
        """Sends one batch (or only keeps it for replay, `send` False: a batch the subscriber missed)."""
        payload = raw if raw is not None else msgpack.packb([time.time(), events, rank])
        with self._lock:
            seq, self.seq = self.seq, self.seq + 1
            self.kept.append((seq, payload))
            if send:
                self.pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])
        return seq

    def _serve_replay(self) -> None:
        router = self.context.socket(zmq.ROUTER)
        router.bind(self.replay_endpoint)
        while self._running:
            if not router.poll(50):
                continue
            client, _, start = router.recv_multipart()
            with self._lock:
                kept = [k for k in self.kept if k[0] >= int.from_bytes(start, "big")]
            for seq, payload in kept:
                router.send_multipart([client, b"", b"", seq.to_bytes(8, "big"), payload])
            router.send_multipart([client, b"", b"", (-1).to_bytes(8, "big", signed=True), b""])
        router.close(linger=0)

    def close(self) -> None:
        self._running = False
        self._router.join(timeout=2)
        self.pub.close(linger=0)
        self.context.term()


def block_stored(hashes: list, tokens: list[int], block_size: int, parent=None, medium: str = "GPU") -> dict:
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": tokens,
        "block_size": block_size,
        "lora_id": None,
        "medium": medium,
        "lora_name": None,
    }
