"""`kvstore index`: the routing index serving its HTTP API until SIGTERM/SIGINT."""

from __future__ import annotations

import threading

from kvstore.config.index import IndexConfig
from kvstore.config.security import SecurityConfig
from kvstore.errors import PermissionDeniedError
from kvstore.index.http_api import IndexHttpServer, IndexService, serve
from kvstore.index.subscriptions import Subscriptions
from kvstore.index.table import PrefixIndex
from kvstore.log_lines import status
from kvstore.procs import say_ready
from transfer_engine.procs import on_stop_request
from transfer_engine.security import is_loopback


def start_index(config: IndexConfig) -> tuple[IndexService, IndexHttpServer]:
    """The service and its HTTP server (call .shutdown() on it, then service.subscriptions.close())."""
    if not is_loopback(config.host) and not SecurityConfig.load().insecure:
        # (Conductor's API has no authentication: anyone who reaches it could register publishers)
        raise PermissionDeniedError(
            f"the index would listen on {config.host}, where anyone could register publishers and read "
            "what is cached: keep it on loopback beside the router, or allow it with KVSTORE_INSECURE=1 / "
            "--insecure"
        )
    index = PrefixIndex(config.max_blocks)
    subscriptions = Subscriptions(index, threading.Lock(), config.hash_seed, config.max_publishers)
    service = IndexService(index, subscriptions, config.hash_seed)
    server, _ = serve(service, config.host, config.port, config.max_connections, config.idle_timeout)
    return service, server


def run_index(config: IndexConfig) -> None:
    service, server = start_index(config)
    stopped = threading.Event()
    on_stop_request(stopped.set)
    host, port = str(server.server_address[0]), server.server_address[1]
    say_ready(f"http://{host}:{port}")
    status(f"serving Conductor's API on http://{host}:{port}")
    try:
        stopped.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        service.subscriptions.close()
