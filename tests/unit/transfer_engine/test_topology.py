"""Topology discovery from fake sysfs trees: which NICs each memory location prefers, and what happens
when the tree lacks NUMA information or has missing, broken or garbled files (a result, never a crash)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.unit.transfer_engine.sysfs_trees import FakeSysfs, dgx_like, one_nic_vm
from transfer_engine.errors import InvalidArgumentError
from transfer_engine.topology import NicSelection, Topology, discover


def nets(nics: tuple) -> list[str]:  # type: ignore[type-arg]
    return [nic.name for nic in nics]


def test_a_dgx_like_host_prefers_the_nics_behind_each_gpus_switch_and_each_nodes_nics_for_host_memory(
    tmp_path: Path,
) -> None:
    t = discover(str(dgx_like(tmp_path).root))
    assert t.problems == ()
    assert nets(t.nics) == [f"ens{i}np0" for i in range(8)]  # the veth and the bridge are left out
    assert [nic.rdma_device for nic in t.nics] == [f"mlx5_{i}" for i in range(8)]
    assert {nic.speed_mbps for nic in t.nics} == {400_000}
    assert t.numa_known and sorted(t.numa_nodes) == [0, 1] and len(t.numa_nodes[1]) == 112
    assert [gpu.index for gpu in t.gpus] == list(range(8))
    assert [gpu.numa_node for gpu in t.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert sorted(t.locations) == ["cpu:0", "cpu:1"] + [f"gpu:{i}" for i in range(8)]
    for gpu in range(8):
        loc = t.locations[f"gpu:{gpu}"]
        switch = gpu // 2
        assert loc.nearness == "pcie-switch"
        assert nets(loc.preferred) == [f"ens{2 * switch}np0", f"ens{2 * switch + 1}np0"]
        assert len(loc.available) == 6 and not set(nets(loc.available)) & set(nets(loc.preferred))
    assert nets(t.locations["cpu:0"].preferred) == [f"ens{i}np0" for i in range(4)]
    assert nets(t.locations["cpu:1"].preferred) == [f"ens{i}np0" for i in range(4, 8)]
    assert t.locations["cpu:1"].nearness == "numa-node"
    named = t.to_json()["gpu:5"]["preferred"]
    assert named == [
        {"net": "ens4np0", "rdma": "mlx5_4", "pci": "0000:35:00.0"},
        {"net": "ens5np0", "rdma": "mlx5_5", "pci": "0000:36:00.0"},
    ]


def test_a_gpu_with_no_nic_behind_its_switch_prefers_its_numa_nodes_nics(tmp_path: Path) -> None:
    fake = dgx_like(tmp_path)
    fake.gpu(["0000:90:01.0", "0000:91:00.0"], numa=1)  # its own root port: no switch shared with a NIC
    t = discover(str(fake.root))
    loc = t.locations["gpu:8"]
    assert loc.nearness == "numa-node"
    assert nets(loc.preferred) == [f"ens{i}np0" for i in range(4, 8)]


def test_a_down_nic_is_in_no_list_and_a_location_left_with_none_nearby_takes_any(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.numa_node(0, "0-3")
    fake.numa_node(1, "4-7")
    up = fake.pci_device(["0000:00:01.0", "0000:01:00.0"], numa=0)
    down = fake.pci_device(["0000:80:01.0", "0000:81:00.0"], numa=1)
    fake.net("eth0", up)
    fake.net("eth1", down, operstate="down", speed="-1")
    t = discover(str(tmp_path))
    assert [(n.name, n.state, n.speed_mbps) for n in t.nics] == [
        ("eth0", "up", 100_000),
        ("eth1", "down", -1),
    ]
    assert nets(t.locations["cpu:0"].preferred) == ["eth0"] and t.locations["cpu:0"].nearness == "numa-node"
    assert nets(t.locations["cpu:1"].preferred) == ["eth0"] and t.locations["cpu:1"].nearness == "any"
    assert t.locations["cpu:1"].available == ()


def test_a_one_nic_vm(tmp_path: Path) -> None:
    t = discover(str(one_nic_vm(tmp_path).root))
    assert t.problems == ()
    (nic,) = t.nics
    assert (nic.name, nic.pci_address, nic.numa_node, nic.speed_mbps) == ("eth0", "0000:00:03.0", -1, -1)
    assert list(t.locations) == ["cpu:0"]
    assert nets(t.locations["cpu:0"].preferred) == ["eth0"] and t.locations["cpu:0"].nearness == "any"


def test_a_host_without_numa_information_has_one_location_for_its_memory(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.cpus_online("0-7")
    for i in range(2):
        device = fake.pci_device([f"0000:{i}0:01.0", f"0000:{i}1:00.0"], numa=None)  # no numa_node file
        fake.net(f"eth{i}", device)
    fake.gpu(["0000:10:01.0", "0000:12:00.0"], numa=None)
    t = discover(str(tmp_path))
    assert not t.numa_known and t.numa_nodes == {0: tuple(range(8))}
    assert [nic.numa_node for nic in t.nics] == [-1, -1]
    assert nets(t.locations["cpu:0"].preferred) == ["eth0", "eth1"]
    assert t.locations["gpu:0"].nearness == "any"  # shares only the root port with eth1: no switch


def test_a_container_whose_every_nic_is_virtual_uses_them(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.numa_node(0, "0-3")
    fake.net("eth0", None, speed="10000")
    t = discover(str(tmp_path))
    assert nets(t.nics) == ["eth0"] and t.nics[0].pci_address == ""
    assert nets(t.locations["cpu:0"].preferred) == ["eth0"]


def test_nics_are_chosen_by_net_device_rdma_device_or_pci_address_or_left_out(tmp_path: Path) -> None:
    root = str(dgx_like(tmp_path).root)
    t = discover(root, "ens0np0,mlx5_3,0000:36:00.0,veth1a2b")
    assert nets(t.nics) == ["ens0np0", "ens3np0", "ens5np0", "veth1a2b"]
    assert nets(t.locations["gpu:4"].preferred) == ["ens5np0"]  # behind its switch, still chosen
    t = discover(root, "^ens0np0,mlx5_1")
    assert nets(t.nics) == [f"ens{i}np0" for i in range(2, 8)]
    assert t.locations["gpu:0"].nearness == "numa-node"  # its switch's NICs are out: its node's are next
    assert nets(t.locations["gpu:0"].preferred) == ["ens2np0", "ens3np0"]
    t = discover(root, "ens0np0,eth9")
    assert nets(t.nics) == ["ens0np0"]
    assert t.problems == ("KVSTORE_NICS names eth9, which this host does not have",)


@pytest.mark.parametrize("text", ["^", "eth0,,eth1", "eth 0", "a" * 65, "eth0;rm"])
def test_a_malformed_nic_list_is_a_clear_error(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="KVSTORE_NICS"):
        NicSelection.parse(text)


def test_missing_broken_and_garbled_files_give_a_result_and_name_the_problem(tmp_path: Path) -> None:
    fake = FakeSysfs(tmp_path)
    fake.numa_node(0, "0-3")
    fake.numa_node(1, "banana")
    good = fake.pci_device(["0000:00:01.0", "0000:01:00.0"], numa=0)
    fake.net("eth0", good, speed="fast")
    garbled = fake.pci_device(["0000:02:01.0", "0000:03:00.0"], numa=0)
    (tmp_path / garbled / "numa_node").write_text("one\n")
    fake.net("eth1", garbled)
    fake.net("eth2", good)
    os.unlink(tmp_path / "class/net/eth2")  # a dangling device link
    os.makedirs(tmp_path / "class/net/eth2")
    os.symlink("/nonexistent/device", tmp_path / "class/net/eth2/device")
    (tmp_path / "class/net/eth3").symlink_to("/nonexistent/eth3")  # a dangling class entry
    fake.gpu(["0000:04:01.0", "0000:05:00.0"], numa=0)
    (tmp_path / "bus/pci/devices/0000:06:00.0").symlink_to("/nonexistent/gpu")  # a broken PCI entry
    (tmp_path / "class/infiniband").mkdir()
    (tmp_path / "class/infiniband/mlx5_9").symlink_to(tmp_path / "class/infiniband/mlx5_9")  # a loop
    t = discover(str(tmp_path))
    assert [(n.name, n.numa_node, n.speed_mbps) for n in t.nics] == [("eth0", 0, -1), ("eth1", -1, 100_000)]
    assert t.numa_nodes[1] == ()
    assert len(t.gpus) == 1
    problems = "\n".join(t.problems)
    for expected in (
        "node1/cpulist: reads banana",
        "eth0/speed: reads fast",
        "numa_node reads one",
        "eth2/device: a broken link",
        "mlx5_9: no PCI device",
    ):
        assert expected in problems


def test_a_root_that_is_no_sysfs_tree_gives_an_empty_topology(tmp_path: Path) -> None:
    t = discover(str(tmp_path / "missing"))
    assert t.nics == () and t.gpus == () and list(t.locations) == ["cpu:0"]
    assert any("class/net" in p for p in t.problems) and any("no usable NIC" in p for p in t.problems)


def test_kvstore_topology_prints_json_keyed_by_location_and_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvstore.cli import main

    root = str(dgx_like(tmp_path).root)
    monkeypatch.setenv("KVSTORE_NICS", "^mlx5_7")
    assert main(["topology", "--sysfs-root", root, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(out) == ["cpu:0", "cpu:1"] + [f"gpu:{i}" for i in range(8)]
    assert [n["net"] for n in out["gpu:7"]["preferred"]] == ["ens6np0"]
    assert set(out["cpu:0"]) == {"preferred", "available", "nearness"}
    assert main(["topology", "--sysfs-root", root, "--nics", "ens1np0"]) == 0
    text = capsys.readouterr().out
    assert "ens1np0" in text and "mlx5_1" in text and "gpu:3" in text and "ens0np0" not in text
    assert main(["topology", "--sysfs-root", str(tmp_path / "nowhere")]) == 1
    assert "not a directory" in capsys.readouterr().err


def test_an_engine_advertises_the_addresses_of_the_nics_it_may_use(tmp_path: Path) -> None:
    """Its descriptor lists each chosen, usable NIC once per address (no loopback, no link-local); a
    peer reads the same list; KVSTORE_NICS leaving every NIC out leaves it empty."""
    from transfer_engine import TransferEngine

    names = [nic.name for nic in discover().nics if nic.usable and nic.name]
    with TransferEngine() as engine, TransferEngine(transport="tcp") as reader:
        nics = engine.nics
        assert {nic.name for nic in nics} <= set(names)
        for nic in nics:
            assert nic.address and not nic.address.startswith(("127.", "fe80")) and nic.address != "::1"
            assert 0 < nic.prefix_len <= 128
        assert reader.open_peer(engine.name).nics == tuple(nics)
    if names:
        with TransferEngine(nics="^" + ",".join(names)) as engine:
            assert engine.nics == []
    fake = FakeSysfs(tmp_path)  # a tree with no NIC: nothing to advertise, whatever the host has
    fake.numa_node(0, "0")
    with TransferEngine(sysfs_root=str(tmp_path)) as engine:
        assert engine.nics == []


def test_this_hosts_own_topology_is_read_without_error() -> None:
    t = discover()
    assert isinstance(t, Topology) and t.locations
    assert all(name.startswith(("cpu:", "gpu:")) for name in t.locations)
