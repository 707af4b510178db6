"""`kvstore topology`: the host's topology as tables, or as JSON keyed by location."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from transfer_engine.topology import Nic, Topology


def _unknown(value: int) -> str:
    return "?" if value < 0 else str(value)


def _speed(nic: Nic) -> str:
    if nic.speed_mbps < 0:
        return "?"
    return f"{nic.speed_mbps // 1000} Gb/s" if nic.speed_mbps >= 1000 else f"{nic.speed_mbps} Mb/s"


def print_topology(topology: Topology, as_json: bool = False, console: Console | None = None) -> None:
    """Problems (files that could not be read, NICs named but absent) go to stderr either way."""
    for problem in topology.problems:
        print(f"kvstore topology: {problem}", file=sys.stderr)
    if as_json:
        print(json.dumps(topology.to_json()))
        return
    # Off a terminal rich draws 80 columns and cuts the cells (a host's NIC lists run longer): whole lines.
    console = console or Console(width=None if sys.stdout.isatty() else 10_000)
    nics = Table(title="NICs", title_justify="left")
    for column in ("net", "rdma", "pci", "numa", "speed", "state"):
        nics.add_column(column)
    for nic in topology.nics:
        nics.add_row(
            nic.name or "-",
            nic.rdma_device or "-",
            nic.pci_address or "(virtual)",
            _unknown(nic.numa_node),
            _speed(nic),
            nic.state,
        )
    console.print(nics)
    if topology.gpus:
        gpus = Table(title="GPUs", title_justify="left")
        for column in ("gpu", "pci", "numa"):
            gpus.add_column(column)
        for gpu in topology.gpus:
            gpus.add_row(str(gpu.index), gpu.pci_address, _unknown(gpu.numa_node))
        console.print(gpus)
    where = Table(title="NICs per memory location", title_justify="left")
    for column in ("location", "preferred", "because", "available"):
        where.add_column(column)
    for loc in topology.locations.values():
        where.add_row(
            loc.name,
            ", ".join(nic.label for nic in loc.preferred) or "-",
            loc.nearness,
            ", ".join(nic.label for nic in loc.available) or "-",
        )
    console.print(where)
    if not topology.numa_known:
        console.print("no NUMA information: cpu:0 stands for the whole host")
