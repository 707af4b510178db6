"""The host's topology: its NICs, GPUs and NUMA nodes, and for each memory location ("cpu:N", "gpu:N")
the NICs a transfer from a buffer there should leave on.

A NIC is preferred for a location when it sits behind the same PCIe switch as the GPU, else on the same
NUMA node (for a GPU with no NIC behind its switch, and for host memory), else every usable NIC is.
`available` lists the other usable ones. Discovery reads a sysfs tree (`sysfs_root`, "/sys" on a host; tests
hand it fake trees) and never fails: what it cannot read is unknown (-1, "") and named in `problems`.

GPUs are numbered in PCI address order, as CUDA numbers them with CUDA_DEVICE_ORDER=PCI_BUS_ID. Unless
named (KVSTORE_NICS), only NICs with a PCI device count: veth pairs and bridges are left out, except on a
host (a container) whose every NIC is virtual.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from transfer_engine.errors import InvalidArgumentError

_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,64}")


@dataclass(frozen=True)
class NicSelection:
    """KVSTORE_NICS: the NICs named (net device, RDMA device or PCI address), or all but those (`exclude`)."""

    names: tuple[str, ...] = ()
    exclude: bool = False

    @classmethod
    def parse(cls, text: str) -> NicSelection:
        """ "eth1,mlx5_0" uses only those; "^eth0" every NIC but eth0; "" every NIC."""
        text = text.strip()
        exclude = text.startswith("^")
        body = text[1:] if exclude else text
        if not body:
            if exclude:
                raise InvalidArgumentError("KVSTORE_NICS: '^' must be followed by the NICs to leave out")
            return cls()
        names = tuple(name.strip() for name in body.split(","))
        for name in names:
            if not _NAME.fullmatch(name):
                raise InvalidArgumentError(
                    f"KVSTORE_NICS: {name!r} is no NIC name (a net device, RDMA device or PCI address, "
                    "comma-separated; a leading ^ leaves them out)"
                )
        return cls(names, exclude)


@dataclass(frozen=True)
class Nic:
    name: str  # net device; "" for an RDMA device with none
    rdma_device: str  # "" when it has none
    pci_address: str  # "" for a virtual device
    numa_node: int  # -1: unknown
    speed_mbps: int  # -1: unknown (or the link is down)
    state: str  # "up", "down", or what the kernel says ("unknown" for some virtual devices)
    pci_chain: tuple[str, ...]  # its PCI ancestors and itself, the root port first

    @property
    def usable(self) -> bool:
        """Not down (a virtual device's "unknown" counts as up)."""
        return self.state != "down"

    @property
    def label(self) -> str:
        return self.name or self.rdma_device

    def naming(self) -> dict[str, str]:
        """How `kvstore topology --json` names it in a location's lists."""
        return {"net": self.name, "rdma": self.rdma_device, "pci": self.pci_address}


@dataclass(frozen=True)
class Gpu:
    index: int
    pci_address: str
    numa_node: int
    pci_chain: tuple[str, ...]


@dataclass(frozen=True)
class Location:
    name: str  # "cpu:0", "gpu:3"
    preferred: tuple[Nic, ...]
    available: tuple[Nic, ...]
    nearness: str  # what the preferred NICs share with it: "pcie-switch", "numa-node" or "any"


@dataclass(frozen=True)
class Topology:
    nics: tuple[Nic, ...]
    gpus: tuple[Gpu, ...]
    numa_nodes: dict[int, tuple[int, ...]]  # node -> its CPUs
    numa_known: bool  # False: the host shows no NUMA nodes, and node 0 stands for it
    locations: dict[str, Location]
    problems: tuple[str, ...]

    def to_json(self) -> dict[str, dict[str, object]]:
        """Keyed by location: its preferred and available NICs, each named by net device, RDMA device and
        PCI address, and what the preferred share with it."""
        return {
            name: {
                "preferred": [nic.naming() for nic in loc.preferred],
                "available": [nic.naming() for nic in loc.available],
                "nearness": loc.nearness,
            }
            for name, loc in self.locations.items()
        }

    def describe(self) -> dict[str, object]:
        """Everything discovered, as plain data."""
        return {
            "nics": [asdict(nic) for nic in self.nics],
            "gpus": [asdict(gpu) for gpu in self.gpus],
            "numa_nodes": {str(k): list(v) for k, v in self.numa_nodes.items()},
            "numa_known": self.numa_known,
            "problems": list(self.problems),
        }


def discover(sysfs_root: str = "/sys", selection: NicSelection | str = "") -> Topology:
    """The topology under `sysfs_root`, with the NICs `selection` (or KVSTORE_NICS-style text) allows."""
    if isinstance(selection, str):
        selection = NicSelection.parse(selection)
    from transfer_engine import _core  # (the data-plane extension, loaded only when asked)

    raw = _core.discover_topology(str(sysfs_root), list(selection.names), selection.exclude)
    nics = tuple(Nic(**{**n, "pci_chain": tuple(n["pci_chain"])}) for n in raw["nics"])
    gpus = tuple(Gpu(**{**g, "pci_chain": tuple(g["pci_chain"])}) for g in raw["gpus"])
    locations = {
        loc["name"]: Location(
            loc["name"],
            tuple(nics[i] for i in loc["preferred"]),
            tuple(nics[i] for i in loc["available"]),
            loc["nearness"],
        )
        for loc in raw["locations"]
    }
    return Topology(
        nics,
        gpus,
        {node: tuple(cpus) for node, cpus in raw["numa_nodes"]},
        raw["numa_known"],
        locations,
        tuple(raw["problems"]),
    )
