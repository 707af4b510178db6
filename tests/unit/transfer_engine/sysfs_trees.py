"""Fake sysfs trees, laid out as the kernel lays out the real one: devices under devices/pci<root>/<chain>,
reached through symlinks from class/net, class/infiniband and bus/pci/devices."""

from __future__ import annotations

import os
from pathlib import Path


class FakeSysfs:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")

    def _link(self, rel: str, target: str) -> None:
        """A relative symlink at `rel` to `target` (both relative to the root), as sysfs makes them."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(self.root / target, path.parent), path)

    def numa_node(self, node: int, cpulist: str) -> None:
        self._write(f"devices/system/node/node{node}/cpulist", cpulist)

    def cpus_online(self, cpulist: str) -> None:
        self._write("devices/system/cpu/online", cpulist)

    def pci_device(
        self, chain: list[str], *, numa: int | None = -1, vendor: str = "0x15b3", cls: str = "0x020000"
    ) -> str:
        """A PCI function behind the bridges `chain[:-1]` (root port first); returns its directory."""
        root_bus = "pci" + chain[0][:7]
        directory = "devices/" + "/".join([root_bus, *chain])
        for depth in range(1, len(chain) + 1):  # every bridge is a PCI function too
            bridge = "devices/" + "/".join([root_bus, *chain[:depth]])
            (self.root / bridge).mkdir(parents=True, exist_ok=True)
            if not (self.root / "bus/pci/devices" / chain[depth - 1]).exists():
                self._link(f"bus/pci/devices/{chain[depth - 1]}", bridge)
        self._write(f"{directory}/vendor", vendor)
        self._write(f"{directory}/class", cls)
        if numa is not None:
            self._write(f"{directory}/numa_node", str(numa))
        return directory

    def gpu(self, chain: list[str], numa: int | None = -1) -> None:
        self.pci_device(chain, numa=numa, vendor="0x10de", cls="0x030200")

    def net(
        self,
        name: str,
        device: str | None,
        *,
        speed: str | None = "100000",
        operstate: str = "up",
        under: str = "",
    ) -> None:
        """A net device: of the PCI function dir `device` (`under` a child of it, as virtio0), or virtual."""
        if device is None:
            directory = f"devices/virtual/net/{name}"
        else:
            parent = f"{device}/{under}" if under else device
            directory = f"{parent}/net/{name}"
            self._link(f"{directory}/device", parent)
        (self.root / directory).mkdir(parents=True, exist_ok=True)
        self._write(f"{directory}/operstate", operstate)
        if speed is not None:
            self._write(f"{directory}/speed", speed)
        self._link(f"class/net/{name}", directory)

    def rdma(
        self, name: str, device: str, *, state: str = "4: ACTIVE", rate: str = "400 Gb/sec (4X NDR)"
    ) -> None:
        directory = f"{device}/infiniband/{name}"
        self._link(f"{directory}/device", device)
        self._write(f"{directory}/ports/1/state", state)
        self._write(f"{directory}/ports/1/rate", rate)
        self._link(f"class/infiniband/{name}", directory)


def dgx_like(root: Path) -> FakeSysfs:
    """2 NUMA nodes; 4 PCIe switches, two per node; behind each switch 2 GPUs and 2 RoCE NICs (mlx5_N
    with net device ensNnp0). GPU 2s and 2s+1 and NICs 2s and 2s+1 share switch s."""
    fake = FakeSysfs(root)
    fake.numa_node(0, "0-55,112-167")
    fake.numa_node(1, "56-111,168-223")
    for switch in range(4):
        bus = 0x10 * (switch + 1)
        upstream = [f"0000:{bus:02x}:01.0", f"0000:{bus + 1:02x}:00.0"]
        numa = switch // 2
        for k in range(2):
            fake.gpu([*upstream, f"0000:{bus + 2:02x}:0{k}.0", f"0000:{bus + 3 + k:02x}:00.0"], numa)
            nic = 2 * switch + k
            device = fake.pci_device(
                [*upstream, f"0000:{bus + 2:02x}:0{k + 2}.0", f"0000:{bus + 5 + k:02x}:00.0"], numa=numa
            )
            fake.net(f"ens{nic}np0", device, speed="400000")
            fake.rdma(f"mlx5_{nic}", device)
    fake.net("docker0", None, speed=None, operstate="down")
    fake.net("veth1a2b", None, speed="10000")
    fake.net("lo", None, speed=None, operstate="unknown")
    return fake


def one_nic_vm(root: Path) -> FakeSysfs:
    """A VM: one node, one virtio NIC (its device link leads to virtio0 under the PCI function)."""
    fake = FakeSysfs(root)
    fake.numa_node(0, "0-1")
    device = fake.pci_device(["0000:00:03.0"], numa=-1, vendor="0x1af4")
    fake.net("eth0", device, under="virtio2", speed=None)
    fake.net("lo", None, speed=None, operstate="unknown")
    return fake
