#include "topology/topology.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "topology/sysfs.h"

namespace kvs::topology {
namespace {

constexpr const char* kNvidiaVendor = "0x10de";

std::optional<long long> parse_int(const std::string& text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return value;
}

class Discovery {
 public:
  Discovery(const std::string& root, const NicSelection& selection) : fs_(root), selection_(selection) {}

  Topology run() {
    read_numa_nodes();
    read_net_devices();
    read_rdma_devices();
    read_gpus();
    select();
    build_locations();
    return std::move(t_);
  }

 private:
  void problem(std::string text) { t_.problems.push_back(std::move(text)); }

  // A device's NUMA node from its PCI function's numa_node file (-1: unknown, as sysfs says).
  int numa_of(const std::string& resolved_pci_dir, const std::string& label) {
    const auto text = fs_.read(resolved_pci_dir + "/numa_node");
    if (!text) return -1;
    const auto value = parse_int(*text);
    if (!value || *value < -1 || *value > 4096) {
      problem(label + ": numa_node reads " + *text);
      return -1;
    }
    return static_cast<int>(*value);
  }

  // The PCI function dir of a device link ("class/net/eth0/device"): the nearest PCI address on its
  // resolved path (a virtio NIC's link leads to virtio0, under its PCI function). Nothing: no PCI device.
  std::optional<std::string> pci_dir(const std::string& device_link, std::vector<std::string>* chain) {
    const auto resolved = fs_.resolve(device_link);
    if (!resolved) return std::nullopt;
    std::string dir = *resolved;
    while (!dir.empty()) {
      const size_t slash = dir.rfind('/');
      const std::string last = slash == std::string::npos ? dir : dir.substr(slash + 1);
      if (is_pci_address(last)) {
        *chain = pci_chain(dir);
        return dir;
      }
      if (slash == std::string::npos) break;
      dir.resize(slash);
    }
    return std::nullopt;
  }

  void read_numa_nodes() {
    for (const auto& name : fs_.list("devices/system/node")) {
      if (name.rfind("node", 0) != 0) continue;
      const auto id = parse_int(name.substr(4));
      if (!id || *id < 0 || *id > 4096) continue;
      NumaNode node{static_cast<int>(*id), {}};
      const auto text = fs_.read("devices/system/node/" + name + "/cpulist");
      const auto cpus = text ? parse_cpu_list(*text) : std::nullopt;
      if (cpus) {
        node.cpus = *cpus;
      } else {
        problem("devices/system/node/" + name + "/cpulist: " + (text ? "reads " + *text : "unreadable"));
      }
      t_.numa_nodes.push_back(std::move(node));
    }
    std::sort(t_.numa_nodes.begin(), t_.numa_nodes.end(),
              [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
    t_.numa_known = !t_.numa_nodes.empty();
    if (!t_.numa_known) {  // one node stands for the host
      NumaNode node{0, {}};
      const auto text = fs_.read("devices/system/cpu/online");
      const auto cpus = text ? parse_cpu_list(*text) : std::nullopt;
      if (cpus) node.cpus = *cpus;
      t_.numa_nodes.push_back(std::move(node));
    }
  }

  void read_net_devices() {
    if (!fs_.exists("class/net")) problem("class/net: missing (no net devices found)");
    for (const auto& name : fs_.list("class/net")) {
      if (name == "lo") continue;
      const std::string base = "class/net/" + name;
      Nic nic;
      nic.name = name;
      const auto dir = pci_dir(base + "/device", &nic.pci_chain);
      if (dir) {
        nic.pci_address = nic.pci_chain.back();
        nic.numa_node = numa_of(*dir, base);
      } else if (fs_.is_link(base + "/device")) {
        problem(base + "/device: a broken link (taken for a virtual device)");
      }
      if (const auto state = fs_.read(base + "/operstate")) nic.state = *state;
      if (const auto speed = fs_.read(base + "/speed")) {  // Mb/s; -1 (or unreadable) while down
        const auto value = parse_int(*speed);
        if (value && *value > 0) {
          nic.speed_mbps = *value;
        } else if (!value) {
          problem(base + "/speed: reads " + *speed);
        }
      }
      t_.nics.push_back(std::move(nic));
    }
  }

  // An RDMA device joins the net device of its PCI function (RoCE, IPoIB); else it is a NIC of its own.
  void read_rdma_devices() {
    for (const auto& name : fs_.list("class/infiniband")) {
      const std::string base = "class/infiniband/" + name;
      std::vector<std::string> chain;
      const auto dir = pci_dir(base + "/device", &chain);
      if (!dir) {
        problem(base + ": no PCI device");
        continue;
      }
      Nic* joined = nullptr;
      for (Nic& nic : t_.nics) {
        if (nic.pci_address == chain.back() && nic.rdma_device.empty()) {
          joined = &nic;
          break;
        }
      }
      if (joined == nullptr) {
        Nic nic;
        nic.pci_address = chain.back();
        nic.pci_chain = chain;
        nic.numa_node = numa_of(*dir, base);
        const auto ports = fs_.list(base + "/ports");
        if (!ports.empty()) {
          const std::string port = base + "/ports/" + ports.front();
          if (const auto state = fs_.read(port + "/state")) {  // "4: ACTIVE"
            nic.state = state->find("ACTIVE") != std::string::npos ? "up" : "down";
          }
          if (const auto rate = fs_.read(port + "/rate")) {  // "200 Gb/sec (4X HDR)"
            const auto gbps = parse_int(rate->substr(0, rate->find(' ')));
            if (gbps && *gbps > 0) nic.speed_mbps = *gbps * 1000;
          }
        }
        t_.nics.push_back(std::move(nic));
        joined = &t_.nics.back();
      }
      joined->rdma_device = name;
    }
  }

  void read_gpus() {
    for (const auto& address : fs_.list("bus/pci/devices")) {
      const std::string base = "bus/pci/devices/" + address;
      if (fs_.read(base + "/vendor").value_or("") != kNvidiaVendor) continue;
      const std::string cls = fs_.read(base + "/class").value_or("");
      if (cls.rfind("0x0300", 0) != 0 && cls.rfind("0x0302", 0) != 0) continue;  // VGA or 3D controller
      Gpu gpu;
      gpu.pci_address = address;
      const auto resolved = fs_.resolve(base);
      if (resolved) {
        gpu.pci_chain = pci_chain(*resolved);
        gpu.numa_node = numa_of(*resolved, base);
      } else {
        problem(base + ": a broken link");
        gpu.pci_chain = {address};
      }
      gpu.index = static_cast<int>(t_.gpus.size());  // (listed in address order)
      t_.gpus.push_back(std::move(gpu));
    }
  }

  bool named(const Nic& nic, const std::string& name) const {
    return name == nic.name || name == nic.rdma_device || name == nic.pci_address;
  }

  void select() {
    const auto& names = selection_.names;
    for (const auto& name : names) {
      if (std::none_of(t_.nics.begin(), t_.nics.end(), [&](const Nic& n) { return named(n, name); })) {
        problem("KVSTORE_NICS names " + name + ", which this host does not have");
      }
    }
    auto listed = [&](const Nic& nic) {
      return std::any_of(names.begin(), names.end(), [&](const auto& n) { return named(nic, n); });
    };
    const bool include = !selection_.exclude && !names.empty();
    // Unless named, only NICs with a PCI device: not veth pairs or bridges, except on a host (a
    // container) whose every NIC is virtual.
    const bool any_physical =
        std::any_of(t_.nics.begin(), t_.nics.end(), [](const Nic& nic) { return !nic.pci_address.empty(); });
    std::vector<Nic> kept;
    for (Nic& nic : t_.nics) {
      const bool keep = include ? listed(nic) : !listed(nic) && (!nic.pci_address.empty() || !any_physical);
      if (keep) kept.push_back(std::move(nic));
    }
    t_.nics = std::move(kept);
    if (std::none_of(t_.nics.begin(), t_.nics.end(), [](const Nic& nic) { return nic.usable(); })) {
      problem("no usable NIC: transfers to other hosts leave where the routing table sends them");
    }
  }

  void build_locations() {
    for (const NumaNode& node : t_.numa_nodes) {
      add_location("cpu:" + std::to_string(node.id), [&](const Nic& nic) -> std::optional<Nearness> {
        if (t_.numa_known && nic.numa_node == node.id) return Nearness::kNumaNode;
        return std::nullopt;
      });
    }
    for (const Gpu& gpu : t_.gpus) {
      const bool any_behind_switch = std::any_of(t_.nics.begin(), t_.nics.end(), [&](const Nic& nic) {
        return nic.usable() && shared_pci_ancestors(nic.pci_chain, gpu.pci_chain) >= 2;
      });
      add_location("gpu:" + std::to_string(gpu.index), [&](const Nic& nic) -> std::optional<Nearness> {
        if (any_behind_switch) {
          if (shared_pci_ancestors(nic.pci_chain, gpu.pci_chain) >= 2) return Nearness::kPcieSwitch;
          return std::nullopt;
        }
        if (gpu.numa_node >= 0 && nic.numa_node == gpu.numa_node) return Nearness::kNumaNode;
        return std::nullopt;
      });
    }
  }

  // `near` says whether a NIC is preferred for the location; with none preferred, every usable NIC is.
  template <typename Near>
  void add_location(std::string name, Near near) {
    Location loc;
    loc.name = std::move(name);
    for (size_t i = 0; i < t_.nics.size(); ++i) {
      if (!t_.nics[i].usable()) continue;
      const auto how = near(t_.nics[i]);
      if (how) {
        loc.preferred.push_back(i);
        loc.nearness = *how;
      } else {
        loc.available.push_back(i);
      }
    }
    if (loc.preferred.empty()) {
      loc.preferred.swap(loc.available);
      loc.nearness = Nearness::kAny;
    }
    t_.locations.push_back(std::move(loc));
  }

  SysfsTree fs_;
  const NicSelection& selection_;
  Topology t_;
};

}  // namespace

const char* nearness_name(Nearness n) {
  switch (n) {
    case Nearness::kPcieSwitch: return "pcie-switch";
    case Nearness::kNumaNode: return "numa-node";
    case Nearness::kAny: return "any";
  }
  return "any";
}

size_t shared_pci_ancestors(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  // The last entry of each chain is the device itself: only what is above both counts.
  const size_t above = std::min(a.empty() ? 0 : a.size() - 1, b.empty() ? 0 : b.size() - 1);
  size_t shared = 0;
  while (shared < above && a[shared] == b[shared]) ++shared;
  return shared;
}

Topology discover(const std::string& sysfs_root, const NicSelection& selection) {
  return Discovery(sysfs_root, selection).run();
}

}  // namespace kvs::topology
