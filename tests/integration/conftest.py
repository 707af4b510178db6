"""Fixtures shared by the integration tests: a second "host" as a network namespace behind a veth pair."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


@dataclass
class Namespace:
    name: str
    local_addr: str  # this side of the veth pair (root namespace)
    peer_addr: str  # inside the namespace
    link: str = ""  # the veth end in the root namespace (set it down to cut the namespace off)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def wait_carrier(device: str, namespace: str = "", timeout: float = 5.0) -> None:
    """Waits until `device` is running (UP and LOWER_UP). The kernel may report a veth's carrier some time
    after `ip link set up` returns (its link watcher runs deferred), and UCX opens only running devices: a
    process started in between would leave that NIC out of its address for good."""
    where = ["-n", namespace] if namespace else []
    deadline = time.monotonic() + timeout
    while True:
        shown = subprocess.run(
            ["ip", *where, "-o", "link", "show", "dev", device], capture_output=True, text=True, timeout=10
        ).stdout
        flags = shown.partition("<")[2].partition(">")[0].split(",")
        if "UP" in flags and "LOWER_UP" in flags and "state UP" in shown:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{device} is not running {timeout} s after it was set up: {shown.strip()}")
        time.sleep(0.02)


def flush_route_cache(namespace: str = "") -> None:
    """Drops the kernel's cached route exceptions (`ip route show cache`). UCX 1.22 reads them as routes:
    a PMTU exception for a peer's address via the default route (left by a test that took a veth down
    while traffic to it was in flight: for 10 minutes) made UCX refuse the veth path ("no route") in the
    next test on the same subnet, though the kernel routed by the veth."""
    where = ["-n", namespace] if namespace else []
    subprocess.run(["ip", *where, "route", "flush", "cache"], check=True, capture_output=True, timeout=10)


def wait_route(address: str, device: str, namespace: str = "", timeout: float = 5.0) -> None:
    """Waits until the kernel routes `address` through `device`. A NIC made right after one of the same
    name and subnet was deleted (the previous test's) may lack its connected route for a moment, and UCX
    reads the routing table once per process: a process started then finds "no route" for good."""
    where = ["-n", namespace] if namespace else []
    deadline = time.monotonic() + timeout
    while True:
        shown = subprocess.run(
            ["ip", *where, "route", "get", address], capture_output=True, text=True, timeout=10
        ).stdout
        if f" dev {device} " in f" {shown} ":
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"no route to {address} through {device} {timeout} s after it was set up: {shown!r}"
            )
        time.sleep(0.02)


@dataclass
class SecondNic:
    """A second veth pair between the root namespace and the netns fixture's, on another subnet."""

    outside: str  # its end in the root namespace
    inside: str
    local_addr: str
    peer_addr: str


@pytest.fixture
def second_nic(netns: Namespace) -> Iterator[SecondNic]:
    tag = netns.name.removeprefix("kvs")
    nic = SecondNic(
        f"kva{tag}",
        f"kvb{tag}",
        netns.local_addr.replace("10.231.", "10.232."),
        netns.peer_addr.replace("10.231.", "10.232."),
    )
    _ip("link", "add", nic.outside, "type", "veth", "peer", "name", nic.inside)
    try:
        _ip("link", "set", nic.inside, "netns", netns.name)
        _ip("addr", "add", f"{nic.local_addr}/30", "dev", nic.outside)
        _ip("link", "set", nic.outside, "up")
        _ip("-n", netns.name, "addr", "add", f"{nic.peer_addr}/30", "dev", nic.inside)
        _ip("-n", netns.name, "link", "set", nic.inside, "up")
        wait_carrier(nic.outside)
        wait_carrier(nic.inside, netns.name)
        wait_route(nic.peer_addr, nic.outside)
        wait_route(nic.local_addr, nic.inside, netns.name)
        flush_route_cache()
        flush_route_cache(netns.name)
        yield nic
    finally:
        subprocess.run(["ip", "link", "del", nic.outside], capture_output=True, timeout=10)


def flap_link(device: str, after: float, down_for: float) -> threading.Thread:
    """Takes `device` down `after` seconds from now and up again `down_for` seconds later, on a thread of
    its own (started; join it)."""

    def flap() -> None:
        time.sleep(after)
        subprocess.run(["ip", "link", "set", device, "down"], check=True, capture_output=True, timeout=10)
        time.sleep(down_for)
        subprocess.run(["ip", "link", "set", device, "up"], check=True, capture_output=True, timeout=10)
        wait_carrier(device)

    thread = threading.Thread(target=flap)
    thread.start()
    return thread


def limit_rate(device: str, rate: str, namespace: str = "") -> None:
    """Caps a device's egress with a token bucket (tc tbf), as a slower NIC would."""
    where = ["-n", namespace] if namespace else []
    subprocess.run(
        [
            "tc",
            *where,
            "qdisc",
            "replace",
            "dev",
            device,
            "root",
            "tbf",
            "rate",
            rate,
            "burst",
            "64kb",
            "latency",
            "100ms",
        ],
        check=True,
        capture_output=True,
        timeout=10,
    )


@pytest.fixture
def netns() -> Iterator[Namespace]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (ip) is not installed")
    tag = f"{os.getpid() % 100000}"
    ns, veth_host, veth_ns = f"kvs{tag}", f"kvh{tag}", f"kvn{tag}"
    subnet = 1 + os.getpid() % 250
    local, peer = f"10.231.{subnet}.1", f"10.231.{subnet}.2"
    try:
        _ip("netns", "add", ns)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create a network namespace here: {exc.stderr.decode().strip()}")
    try:
        _ip("link", "add", veth_host, "type", "veth", "peer", "name", veth_ns)
        _ip("link", "set", veth_ns, "netns", ns)
        _ip("addr", "add", f"{local}/30", "dev", veth_host)
        _ip("link", "set", veth_host, "up")
        _ip("-n", ns, "addr", "add", f"{peer}/30", "dev", veth_ns)
        _ip("-n", ns, "link", "set", veth_ns, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        wait_carrier(veth_host)
        wait_carrier(veth_ns, ns)
        wait_route(peer, veth_host)
        wait_route(local, veth_ns, ns)
        flush_route_cache()
        flush_route_cache(ns)
        yield Namespace(ns, local, peer, veth_host)
    finally:
        subprocess.run(["ip", "link", "del", veth_host], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
