"""Mooncake Conductor's indexer API over HTTP (its docs/source/api-reference/http/conductor-indexer.md,
after RFCs #1403 and #1527), so a router or gateway written for Conductor works with kvstore unchanged:

    POST /register        {endpoint, replay_endpoint?, type, modelname, lora_name?, tenant_id?, instance_id,
                           block_size, dp_rank, additionalsalt?, namespace?}
    POST /unregister      {instance_id, tenant_id?, dp_rank, ...}
    POST /query           {model, token_ids, block_size, lora_name?, tenant_id?, instance_id?, cache_salt?}
    POST /query_by_hash   the same with seq_hashes (or block_hash) instead of token_ids
    GET  /status, /health

A query answers, per tenant and instance, the longest matched prefix in tokens, the matched tokens per
medium (GPU, CPU, DISK) and per data-parallel rank ("DP"). Every instance registered for the query's
model, block size, tenant and salt is listed (with zeros where it holds nothing), so a router has its
candidates in one answer. Bad requests get 400 and {"error": "..."}.

A kvstore master's events registered with type "kvstore" and a `namespace` (the connectors' namespace
for the model, e.g. the one its KV cache group's blocks are keyed under) make the store a shared tier
rather than an instance: every block it holds in that namespace is a hit for every instance registered
under the same model, block size, LoRA, tenant and salt. Each instance's row then also has "STORE" (the
store's run from the start, in tokens), and its "longest_matched" is the longest prefix whose every block
is on that instance or in the store (the store serves any instance); GPU/CPU/DISK and DP stay the
instance's own. Without a namespace, a "kvstore" publisher is listed as an instance of its own, as before.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kvstore.errors import (
    AddressInUseError,
    HostNotUsableError,
    InternalError,
    InvalidArgumentError,
    KVStoreError,
)
from kvstore.index.hashing import U64, seq_hashes
from kvstore.index.subscriptions import Registration, Subscriptions
from kvstore.index.table import MEDIA, STORE, Match, Matches, PrefixIndex, Scope
from kvstore.limited_log import LimitedLog

log = logging.getLogger("kvstore.index")

MAX_BODY = 16 << 20  # bytes of a request body
MAX_TOKENS = 1 << 22  # token ids (or hashes) in one query
MAX_CONNECTIONS = 256  # open at once; a new one past it takes the place of the one idle longest
IDLE_TIMEOUT = 60.0  # seconds a connection may wait for (or between the bytes of) its next request
EVICT_WAIT = 2.0  # seconds a new connection waits for the slot of the one it evicted


class IndexService:
    """The index, its publishers and the answers to the API's calls (the HTTP layer only parses)."""

    def __init__(self, index: PrefixIndex, subscriptions: Subscriptions, seed: int) -> None:
        self.index, self.subscriptions, self.seed = index, subscriptions, seed
        self.lock = subscriptions.lock

    def register(self, body: dict[str, Any]) -> dict[str, Any]:
        r = Registration(
            endpoint=_text(body, "endpoint", required=True),
            kind=_text(body, "type", required=True),
            scope=Scope(
                _text(body, "modelname", required=True),
                _count(body, "block_size", required=True),
                _text(body, "lora_name"),
                _text(body, "tenant_id") or "default",
                _text(body, "additionalsalt"),
            ),
            instance_id=_text(body, "instance_id", required=True),
            dp_rank=_count(body, "dp_rank", required=True, zero=True),
            replay_endpoint=_text(body, "replay_endpoint") or None,
            namespace=_namespace(body),
        )
        self.subscriptions.register(r)
        return {"status": "registered successfully", "instance_id": r.instance_id}

    def unregister(self, body: dict[str, Any]) -> dict[str, Any]:
        removed = self.subscriptions.unregister(
            _text(body, "instance_id", required=True),
            _text(body, "tenant_id") or "default",
            _count(body, "dp_rank", required=True, zero=True),
        )
        return {"status": "unregistered successfully", "removed_instances": removed}

    def query(self, body: dict[str, Any], by_hash: bool) -> dict[str, Any]:
        scope = self._scope(body)
        if by_hash:
            key = "seq_hashes" if "seq_hashes" in body else "block_hash"
            hashes = _hash_list(body.get(key), key)
        else:
            tokens = body.get("token_ids")
            if not isinstance(tokens, list) or len(tokens) > MAX_TOKENS:
                raise InvalidArgumentError(f"token_ids must be a list of at most {MAX_TOKENS} integers")
            hashes = seq_hashes(tokens, scope.block_size, self.seed)
        instance = _text(body, "instance_id") or None
        with self.lock:
            matches = self.index.match_all(scope, hashes, instance)
            registered = [r for r in self.subscriptions.registered() if r.scope.group() == scope.group()]
            candidates = {
                r.instance_id for r in registered if not r.credits_store and instance in (None, r.instance_id)
            }
            with_store = any(r.credits_store and r.scope == scope for r in registered)
        return {scope.tenant_id: _answer(matches, candidates, scope.block_size, with_store)}

    def _scope(self, body: dict[str, Any]) -> Scope:
        lora = _text(body, "lora_name")
        if body.get("lora_id") is not None:
            if lora:
                raise InvalidArgumentError("give lora_name or the deprecated lora_id, not both")
            lora_id = body["lora_id"]
            if not isinstance(lora_id, (int, str)) or isinstance(lora_id, bool):
                raise InvalidArgumentError("lora_id must be an integer or a string")
            lora = str(lora_id)
        return Scope(
            _text(body, "model", required=True),
            _count(body, "block_size", required=True),
            lora,
            _text(body, "tenant_id") or "default",
            _text(body, "cache_salt"),
        )

    def status(self) -> dict[str, Any]:
        with self.lock:
            scopes = [
                {"scope": scope._asdict(), "blocks": blocks, "holders": holders}
                for scope, blocks, holders in self.index.scopes()
            ]
            entries, refused = self.index.entries, self.index.refused
        return {
            "blocks": entries,
            "refused_blocks": refused,
            "scopes": scopes,
            "publishers": self.subscriptions.status(),
        }


def _answer(matches: Matches, candidates: set[str], block_size: int, with_store: bool) -> dict[str, Any]:
    """A row per instance; "STORE" where a store credits the scope (its run reaches every instance)."""
    out: dict[str, Any] = {}
    for instance in sorted(candidates | matches.instances.keys()):
        m = matches.instances.get(instance, Match())
        row: dict[str, Any] = {"longest_matched": max(m.longest, matches.store) * block_size}
        for medium in (*MEDIA, *sorted(m.media.keys() - set(MEDIA))):
            row[medium] = m.media.get(medium, 0) * block_size
        if with_store:
            row[STORE] = matches.store * block_size
        row["DP"] = {str(rank): n * block_size for rank, n in sorted(m.ranks.items())}
        out[instance] = row
    return out


def _namespace(body: dict[str, Any]) -> str | None:
    """The namespace a store's publisher credits (None: not given)."""
    if body.get("namespace") is None:
        return None
    if _text(body, "type").lower() != "kvstore":
        raise InvalidArgumentError('namespace is for a kvstore master\'s events (type "kvstore")')
    return _text(body, "namespace")


def _text(body: dict[str, Any], name: str, required: bool = False) -> str:
    v = body.get(name)
    if v is None:
        if required:
            raise InvalidArgumentError(f"{name} is required")
        return ""
    if not isinstance(v, str) or len(v) > 1024:
        raise InvalidArgumentError(f"{name} must be a string of at most 1024 characters")
    if required and not v:
        raise InvalidArgumentError(f"{name} must not be empty")
    return v


def _count(body: dict[str, Any], name: str, required: bool = False, zero: bool = False) -> int:
    v = body.get(name)
    if v is None and not required:
        return 0
    if not isinstance(v, int) or isinstance(v, bool) or v < (0 if zero else 1) or v >= 1 << 31:
        raise InvalidArgumentError(f"{name} must be a {'non-negative' if zero else 'positive'} integer")
    return v


def _hash_list(v: Any, name: str) -> list[int]:
    if not isinstance(v, list) or len(v) > MAX_TOKENS:
        raise InvalidArgumentError(f"{name} must be a list of at most {MAX_TOKENS} hashes")
    for h in v:
        if not isinstance(h, int) or isinstance(h, bool) or not -(1 << 63) <= h <= U64:
            raise InvalidArgumentError(f"{name} must hold 64-bit integers")
    return [h & U64 for h in v]


class _Handler(BaseHTTPRequestHandler):
    server: IndexHttpServer
    protocol_version = "HTTP/1.1"  # (keep-alive: a router asks many times on one connection)

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.idle_timeout)  # (a silent peer holds a thread: this long)

    def do_POST(self) -> None:
        service = self.server.service
        routes = {
            "/register": service.register,
            "/unregister": service.unregister,
            "/query": lambda b: service.query(b, by_hash=False),
            "/query_by_hash": lambda b: service.query(b, by_hash=True),
        }
        route = routes.get(self.path)
        if route is None:
            self._reply(404, {"error": f"no such endpoint: POST {self.path}"})
            return
        try:
            body = self._body()
            with self.server.answering(self.request):
                self._reply(200, route(body))
        except InternalError as exc:
            self._reply(500, {"error": str(exc)})
        except KVStoreError as exc:
            self._reply(400, {"error": str(exc)})
        except Exception as exc:  # (a bug: said, not a dropped connection)
            log.exception("index request %s failed", self.path)
            self._reply(500, {"error": f"internal error: {exc}"})

    def do_GET(self) -> None:
        with self.server.answering(self.request):
            if self.path == "/health":
                self._reply(200, {"status": "ok"})
            elif self.path == "/status":
                self._reply(200, self.server.service.status())
            else:
                self._reply(404, {"error": f"no such endpoint: GET {self.path}"})

    def _body(self) -> dict[str, Any]:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit() or int(length) > MAX_BODY:
            self.close_connection = True  # (the body, if any, is not read)
            raise InvalidArgumentError(f"a request needs a Content-Length of at most {MAX_BODY} bytes")
        raw = self.rfile.read(int(length))
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidArgumentError(f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise InvalidArgumentError("the body must be a JSON object")
        return body

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # (a line per query would be most of the index's work)


class IndexHttpServer(ThreadingHTTPServer):
    """A thread per connection, at most max_connections. Past it, the connection idle longest (not in
    the middle of answering: waiting for a request, or for the rest of one) is shut down to make room,
    so sockets held open and silent never lock a router out (256 of them did); a connection is also cut
    after idle_timeout without a byte."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        service: IndexService,
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self.service, self.idle_timeout = service, idle_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        self._open: dict[socket.socket, list[Any]] = {}  # connection -> [idle since, answering]
        self._log = LimitedLog(log)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False) and not self._make_room():
            self._log.warn("full", f"refused a connection from {client_address[0]}: every one is busy")
            self.shutdown_request(request)
            return
        with self._lock:
            self._open[request] = [time.monotonic(), False]
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._open.pop(request, None)
            self._slots.release()

    def _make_room(self) -> bool:
        """Shuts down the connection idle longest and takes its slot once its thread gave it back."""
        with self._lock:
            idle = [(since, conn) for conn, (since, answering) in self._open.items() if not answering]
            if not idle:
                return False
            _, victim = min(idle, key=lambda pair: pair[0])
            self._open[victim][1] = True  # (chosen once)
        self._log.warn("evicted", "closed the connection idle longest to make room for a new one")
        with contextlib.suppress(OSError):
            victim.shutdown(socket.SHUT_RDWR)  # (its thread's read ends; it closes the socket)
        return self._slots.acquire(timeout=EVICT_WAIT)

    def answering(self, request: socket.socket) -> _Answering:
        """Marks `request`'s connection busy while a request is answered (never evicted meanwhile)."""
        return _Answering(self, request)

    def _mark(self, request: socket.socket, answering: bool) -> None:
        with self._lock:
            state = self._open.get(request)
            if state is not None:
                state[0], state[1] = time.monotonic(), answering

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed (a peer gone, one evicted mid-request): a line a second, no traceback."""
        self._log.warn("failed", f"a connection from {client_address[0]} failed")


class _Answering:
    def __init__(self, server: IndexHttpServer, request: socket.socket) -> None:
        self.server, self.request = server, request

    def __enter__(self) -> None:
        self.server._mark(self.request, True)

    def __exit__(self, *exc: object) -> None:
        self.server._mark(self.request, False)


def serve(
    service: IndexService,
    host: str,
    port: int,
    max_connections: int = MAX_CONNECTIONS,
    idle_timeout: float = IDLE_TIMEOUT,
) -> tuple[IndexHttpServer, threading.Thread]:
    """The HTTP server on its own thread; returns it (server.server_address is where it listens)."""
    try:
        server = IndexHttpServer((host, port), service, max_connections, idle_timeout)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:  # (one line, not a traceback: kvstore.cli names the flag)
            raise AddressInUseError(host, port) from None
        raise HostNotUsableError.of(exc, host, port) or exc from None
    thread = threading.Thread(target=server.serve_forever, name="kvstore-index-http", daemon=True)
    thread.start()
    return server, thread
