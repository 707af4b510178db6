"""`kvstore master`: one master serving until interrupted, or, with `etcd`, a candidate of its cluster
that serves only while it leads (kvstore.master.wire.election).

A candidate binds its RPC address at once but listens only while it leads: clients given a list of the
masters' addresses are refused by standbys at once and connect to the leader. Each leadership starts
from an empty table that the nodes fill again (they name what they hold: kvstore.master.ledger.holds); when it
ends (the lease could not be renewed in time, or the key is gone) the master closes every connection
and campaigns again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import functools
import logging
import socket
import threading
import time
from typing import Any

from kvstore import sd_notify
from kvstore.config.etcd import EtcdConfig
from kvstore.config.master import WILDCARD_HOSTS, MasterConfig, unpublishable
from kvstore.config.security import SecurityConfig
from kvstore.errors import AddressInUseError, HostNotUsableError, InvalidArgumentError
from kvstore.log_lines import status
from kvstore.master.wire.connection_table import FD_RESERVE
from kvstore.master.wire.election import Election
from kvstore.master.wire.heap import keep_freed_heap
from kvstore.master.wire.http_endpoint import HttpEndpoint
from kvstore.master.wire.listener import address_of, listening_socket
from kvstore.master.wire.role import Role, leader_reader
from kvstore.master.wire.server import Master, new_event_loop
from kvstore.procs import say_ready, settle_collector
from kvstore.rpc import etcd
from transfer_engine.procs import on_stop_request

log = logging.getLogger("kvstore.master")

WATCH_SECONDS = 0.05  # how often a leader checks it may still serve


def run_master(config: MasterConfig) -> None:
    """Serves until SIGTERM/SIGINT (or stdin EOF when its parent asked for that lifeline).

    The config's `shard` of `shards`: the part of a cluster's key space this master serves
    (kvstore.cluster.shards: clients route each key to its shard). Without etcd a shard is just the
    master clients list in that place; with etcd its masters elect their leader under the shard's own
    name, and the cluster's shard map in etcd says how many shards there are."""
    cluster = config.cluster
    # (shard_cluster checks the pair: a client's Hello reply and the election both name it)
    config = dataclasses.replace(config, cluster=etcd.shard_cluster(cluster, config.shard, config.shards))
    loop = new_event_loop(config.busy_poll_us)
    done = asyncio.Event()

    def stop() -> None:
        loop.call_soon_threadsafe(done.set)

    on_stop_request(stop)
    settle_collector()
    keep_freed_heap()  # (each request's buffers reuse the last one's pages)
    try:
        running = _candidate(config, done, (cluster, config.shards)) if config.etcd else _single(config, done)
        loop.run_until_complete(running)
    except KeyboardInterrupt:
        pass
    finally:
        loop.close()


async def _single(config: MasterConfig, done: asyncio.Event) -> None:
    master = Master(config)
    await master.start()
    try:
        say_ready(f"{master.address} http={master.http_address or '-'}")
        sd_notify.ready(f"master serving on {master.address}")  # (a Type=notify unit: deploy/systemd)
        status(f"listening on {master.address} (authentication: {master.authentication()})")
        table = master.table
        status(
            f"connections: up to {table.budget} (RLIMIT_NOFILE {table.fd_limit}, {FD_RESERVE} kept for the "
            f"master), {table.unauthenticated} of them proving the secret; idle ones closed after "
            f"{config.idle_timeout:g} s"
        )
        if master.http_address:
            status(f"metrics on http://{master.http_address}/metrics")
        await done.wait()
    finally:
        await master.stop()


def _bound(host: str, port: int) -> socket.socket:
    """The RPC socket, bound and not listening: connections to it are refused until it leads."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:  # (one line, not a traceback: kvstore.cli names the flag)
            raise AddressInUseError(host, port) from None
        raise HostNotUsableError.of(exc, host, port) or exc from None
    return sock


def published_address(config: MasterConfig, sock: socket.socket) -> str:
    """The RPC address a candidate publishes into etcd (clients and nodes connect to it): its
    advertise_host, else the address `sock` is bound to (MasterConfig.validate refuses a wildcard host
    without advertise_host; this catches one only the bind shows, such as '0')."""
    host, port = sock.getsockname()[:2]
    if config.advertise_host:
        return address_of(config.advertise_host.strip("[]"), port)
    if host in WILDCARD_HOSTS:
        raise InvalidArgumentError(unpublishable(config.host))
    return address_of(host, port)


def _open_http(config: MasterConfig, role: Role, election: Election) -> HttpEndpoint | None:
    """/metrics and /health for the process's whole life, leading or not (with http_port)."""
    if config.http_port is None:
        return None
    http = HttpEndpoint(
        listening_socket(config.host, config.http_port), role, standbys=lambda: len(election.standbys)
    )
    http.start()
    return http


async def _candidate(config: MasterConfig, done: asyncio.Event, shard_map: tuple[str, int]) -> None:
    """`shard_map`: the cluster this master's shard is part of and how many shards it has."""
    loop = asyncio.get_running_loop()
    # (the leading Master refuses it too: refused now, before it campaigns, binds or wins)
    SecurityConfig.load().check_listen(config.host, "the master")
    sock = _bound(config.host, config.port)
    try:
        address, port = published_address(config, sock), sock.getsockname()[1]
    except InvalidArgumentError:
        sock.close()
        raise
    election = Election(config.etcd, config.cluster, address, config.leader_ttl)
    # (with one shard it writes no map, but refuses to serve a cluster whose map says more)
    publish = functools.partial(election.publish_shards, *shard_map)
    wait = EtcdConfig.load().start_wait  # (etcd started beside this master may answer a little later)
    await loop.run_in_executor(None, etcd.when_up, publish, config.etcd, wait)
    role = Role(shard_map[0], config.shard_of, address)
    role.stand_by(leader_reader(election))
    stop, http = threading.Event(), None
    stopping = asyncio.ensure_future(done.wait())
    try:
        http = _open_http(config, role, election)
        where = http.address if http is not None else "-"
        say_ready(f"{address} http={where} role=candidate cluster={config.cluster}")
        sd_notify.ready(f"master candidate of cluster {config.cluster} on {address}")
        while not done.is_set():
            campaign = loop.run_in_executor(None, election.campaign, stop)
            first: list[asyncio.Future[Any]] = [campaign, stopping]
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            if done.is_set():
                break
            epoch = campaign.result()
            if epoch is None:
                break
            role.lead(epoch)
            master = Master(config, epoch=epoch, sock=sock, election=election, http=http)
            await master.start()
            status(f"leading cluster {config.cluster} as epoch {epoch} on {address}")
            held = threading.Event()
            holding = loop.run_in_executor(None, election.hold, held)
            watching = asyncio.ensure_future(_until_deadline(election))
            pending: list[asyncio.Future[Any]] = [holding, watching, stopping]
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            held.set()
            watching.cancel()
            await master.stop()
            role.stand_by(leader_reader(election))
            if done.is_set():
                break
            status(f"stepped down from epoch {epoch}: the leadership could not be kept")
            with contextlib.suppress(Exception):  # let a standby lead now rather than at the lease's end
                await loop.run_in_executor(None, election.resign)
            await holding
            sock = _bound(config.host, port)
    finally:
        stop.set()
        stopping.cancel()
        if http is not None:
            http.close()
        await loop.run_in_executor(None, election.close)
        with contextlib.suppress(OSError):
            sock.close()


async def _until_deadline(election: Election) -> None:
    """Returns once this leader must stop serving (its lease may end soon: it was not renewed in time)."""
    while time.monotonic() < election.serving_deadline():
        await asyncio.sleep(WATCH_SECONDS)
    log.warning("the leadership's lease was not renewed in time: stepping down")
