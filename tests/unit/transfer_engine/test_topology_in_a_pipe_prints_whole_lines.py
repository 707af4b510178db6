"""`kvstore topology` piped prints its tables whole: off a terminal rich drew 80 columns and cut a host's
NIC lists with '…'."""

from __future__ import annotations

from transfer_engine.topology import Location, Nic, Topology
from transfer_engine.topology_report import print_topology


def _nic(i: int) -> Nic:
    return Nic(f"enp{i}s0f0np0", f"mlx5_bond_{i}", f"0000:{i:02x}:00.0", 1, 400_000, "up", ())


def test_topology_in_a_pipe_prints_whole_lines(capsys) -> None:
    nics = tuple(_nic(i) for i in range(8))
    where = {"cpu:0": Location("cpu:0", nics[:4], nics, "numa-node")}
    print_topology(Topology(nics, (), {0: (0, 1)}, True, where, ()))
    out = capsys.readouterr().out
    assert "…" not in out
    available = next(line for line in out.splitlines() if line.startswith("│ cpu:0"))
    assert all(nic.label in available for nic in nics)
