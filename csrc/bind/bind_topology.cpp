// The host's topology as a dict (transfer_engine.topology turns it into typed records).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "topology/topology.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

py::dict discover_topology(const std::string& sysfs_root, const std::vector<std::string>& names,
                           bool exclude) {
  topology::Topology t;
  {
    py::gil_scoped_release release;  // (file reads: a slow sysfs must not hold other threads)
    t = topology::discover(sysfs_root, topology::NicSelection{names, exclude});
  }
  py::list nics, gpus, nodes, locations;
  for (const auto& n : t.nics) {
    py::dict d;
    d["name"] = n.name;
    d["rdma_device"] = n.rdma_device;
    d["pci_address"] = n.pci_address;
    d["numa_node"] = n.numa_node;
    d["speed_mbps"] = n.speed_mbps;
    d["state"] = n.state;
    d["pci_chain"] = n.pci_chain;
    nics.append(d);
  }
  for (const auto& g : t.gpus) {
    py::dict d;
    d["index"] = g.index;
    d["pci_address"] = g.pci_address;
    d["numa_node"] = g.numa_node;
    d["pci_chain"] = g.pci_chain;
    gpus.append(d);
  }
  for (const auto& node : t.numa_nodes) nodes.append(py::make_tuple(node.id, node.cpus));
  for (const auto& loc : t.locations) {
    py::dict d;
    d["name"] = loc.name;
    d["preferred"] = loc.preferred;
    d["available"] = loc.available;
    d["nearness"] = topology::nearness_name(loc.nearness);
    locations.append(d);
  }
  py::dict out;
  out["nics"] = nics;
  out["gpus"] = gpus;
  out["numa_nodes"] = nodes;
  out["numa_known"] = t.numa_known;
  out["locations"] = locations;
  out["problems"] = t.problems;
  return out;
}

}  // namespace

void bind_topology(py::module_& m) {
  m.def("discover_topology", &discover_topology, py::arg("sysfs_root"), py::arg("names"), py::arg("exclude"),
        "NICs, GPUs, NUMA nodes and each location's preferred/available NICs under a sysfs root.");
}

}  // namespace kvs::bind
