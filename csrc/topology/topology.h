// The host's NICs, NUMA nodes and GPUs as sysfs shows them, and for each memory location ("cpu:N",
// "gpu:N") the NICs a transfer from there should leave on: those behind the same PCIe switch as the
// buffer, else on its NUMA node, else any (Mooncake's topology matrix). Discovery never fails: what cannot
// be read is unknown (-1, ""), and named in `problems`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvs::topology {

struct Nic {
  std::string name;         // net device ("eth0"); "" for an RDMA device with none
  std::string rdma_device;  // "mlx5_0"; "" when it has none
  std::string pci_address;  // "0000:3b:00.0"; "" for a virtual device (veth, a bridge)
  int numa_node = -1;
  int64_t speed_mbps = -1;
  std::string state = "unknown";       // "up", "down" or what the kernel says
  std::vector<std::string> pci_chain;  // its PCI ancestors and itself, the root port first

  bool usable() const { return state != "down"; }
};

struct Gpu {
  int index = 0;  // in PCI address order (as CUDA numbers them with CUDA_DEVICE_ORDER=PCI_BUS_ID)
  std::string pci_address;
  int numa_node = -1;
  std::vector<std::string> pci_chain;
};

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;
};

enum class Nearness { kPcieSwitch, kNumaNode, kAny };
const char* nearness_name(Nearness n);

struct Location {
  std::string name;                    // "cpu:0", "gpu:3"
  std::vector<size_t> preferred;       // indexes into Topology::nics
  std::vector<size_t> available;       // the other usable NICs
  Nearness nearness = Nearness::kAny;  // what the preferred NICs share with it
};

// Which NICs a host may use (KVSTORE_NICS): the named ones only, or all but the named (`exclude`). A name
// is a net device, an RDMA device or a PCI address. Virtual devices (veth, bridges) are used only when
// named in an include list.
struct NicSelection {
  std::vector<std::string> names;
  bool exclude = false;
};

struct Topology {
  std::vector<Nic> nics;
  std::vector<Gpu> gpus;
  std::vector<NumaNode> numa_nodes;
  bool numa_known = false;  // false: one node stands for the host (no NUMA information)
  std::vector<Location> locations;
  std::vector<std::string> problems;
};

Topology discover(const std::string& sysfs_root, const NicSelection& selection = {});

// How many PCI ancestors two devices share (their chains' common prefix, the devices themselves aside):
// 2 or more means a PCIe switch in common below the root port.
size_t shared_pci_ancestors(const std::vector<std::string>& a, const std::vector<std::string>& b);

}  // namespace kvs::topology
