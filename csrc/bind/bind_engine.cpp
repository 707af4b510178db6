// Engine binding: the engine, its regions and its peers (batches and fences: bind_engine_batches.cpp); every
// blocking call releases the GIL.
#include "bind/bind_engine.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bind/status_error.h"
#include "engine/bootstrap.h"
#include "engine/engine.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

py::dict region_dict(const RegionInfo& r) {
  py::dict d;
  d["id"] = r.id;
  d["key"] = r.key;
  d["base"] = r.base;
  d["length"] = r.length;
  d["kind"] = location_name(r.location);
  d["exported"] = r.exported;
  d["read_only"] = r.read_only;
  d["shareable"] = r.shareable;
  d["numa_node"] = r.numa_node;
  return d;
}

py::dict descriptor_dict(const Engine& engine, const EngineDescriptor& s) {
  py::dict d;
  d["name"] = s.name;
  d["engine_id"] = s.engine_id;
  d["host_id"] = s.host_id;
  py::list regions;
  for (const auto& r : s.regions) regions.append(region_dict(r));
  d["regions"] = regions;
  py::dict sections;  // what each transport offers, as far as this engine can read it
  for (const auto& [name, body] : s.sections) sections[py::str(name)] = engine.describe_section(name, body);
  d["transports"] = sections;
  py::list nics;
  for (const auto& n : s.nics) {
    py::dict nic;
    nic["name"] = n.name;
    nic["rdma_device"] = n.rdma_device;
    nic["address"] = n.address;
    nic["prefix_len"] = n.prefix_len;
    nic["numa_node"] = n.numa_node;
    nic["speed_mbps"] = n.speed_mbps;
    nics.append(nic);
  }
  d["nics"] = nics;
  d["owner"] = s.owner;
  return d;
}

// The engine at `name`'s descriptor through its authenticated handshake (without the GIL meanwhile).
EngineDescriptor handshake(const std::string& name, int timeout_ms, const std::string& secret) {
  auto d = [&] {
    py::gil_scoped_release unlocked;
    return fetch_descriptor(name, timeout_ms, secret);
  }();
  return value_or_throw(std::move(d));
}

}  // namespace

void bind_engine(py::module_& m) {
  m.def(
      "fetch_owned_regions",
      [](const std::string& name, int timeout_ms, const std::string& secret) {
        const EngineDescriptor d = handshake(name, timeout_ms, secret);
        std::map<uint64_t, uint64_t> lengths;
        for (const auto& r : d.regions) lengths[r.id] = r.length;
        return std::make_pair(d.owner, lengths);
      },
      py::arg("name"), py::arg("timeout_ms"), py::arg("secret"),
      "(owner, {region id: length}) of the engine at `name` (\"host:port\"), through its authenticated "
      "handshake: what a master checks a segment's mount against.");
  m.def(
      "open_session",
      [](const std::string& name, int timeout_ms, const std::string& secret) {
        const EngineDescriptor got = handshake(name, timeout_ms, secret);
        py::dict keys;
        for (const auto& r : got.regions) keys[py::int_(r.id)] = r.key;
        py::dict out;
        out["engine_id"] = got.engine_id;
        out["session_id"] = py::bytes(got.session.id);
        out["session_key"] =
            py::bytes(reinterpret_cast<const char*>(got.session.key.data()), got.session.key.size());
        out["keys"] = keys;
        return out;
      },
      py::arg("name"), py::arg("timeout_ms"), py::arg("secret"),
      "A handshake with the engine at `name`, as a raw test peer needs it: {engine_id, session_id, "
      "session_key, keys: {region id: its key in this session}}.");
  bind_batch(m);
  py::class_<Engine> c(m, "Engine", "The transfer engine core.");
  c.def(py::init([](const std::string& host, uint16_t port, const std::string& transport, int copy_threads,
                    int handshake_timeout_ms, int peer_pin_timeout_ms,
                    const std::map<std::string, std::map<std::string, int64_t>>& transport_options,
                    const std::vector<std::string>& nics, bool nics_exclude, const std::string& sysfs_root,
                    py::bytes cluster_secret) {
          EngineConfig c;
          c.host = host;
          c.port = port;
          c.transport = transport;
          c.copy_threads = copy_threads;
          c.handshake_timeout_ms = handshake_timeout_ms;
          c.peer_pin_timeout_ms = peer_pin_timeout_ms;
          c.transport_options = transport_options;
          c.nic_names = nics;
          c.nic_exclude = nics_exclude;
          c.sysfs_root = sysfs_root;
          c.cluster_secret = cluster_secret;
          return std::make_unique<Engine>(c);
        }),
        py::arg("host"), py::arg("port"), py::arg("transport"), py::arg("copy_threads"),
        py::arg("handshake_timeout_ms"), py::arg("peer_pin_timeout_ms"), py::arg("transport_options"),
        py::arg("nics") = std::vector<std::string>{}, py::arg("nics_exclude") = false,
        py::arg("sysfs_root") = "/sys", py::arg("cluster_secret") = py::bytes(),
        "cluster_secret: what peers prove they know at the handshake; nics: the NICs to use (or, with "
        "nics_exclude, to leave out); "
        "transport_options: {transport name: {setting: integer}} (durations in ms, sizes in bytes).")
      .def("start", [](Engine& e) { throw_if_error(e.start()); })
      .def("stop", &Engine::stop, py::call_guard<py::gil_scoped_release>())
      .def("transport_starts", &Engine::transport_starts, py::arg("name"),
           "Whether start() will bring that transport up (ucx: only where it pays, or when asked).")
      .def("unavailable_transports", &Engine::unavailable_transports,
           "Enabled transports that serve and reach nobody here, and why.")
      .def_property_readonly("name", &Engine::name)
      .def_property_readonly("id", &Engine::id)
      .def_property_readonly(
          "copy_parallelism", &Engine::copy_parallelism,
          "Threads that copy a same-host batch its caller waits on (workers + the caller).")
      .def(
          "register",
          [](Engine& e, uint64_t addr, uint64_t length, const std::string& kind, bool exported,
             bool read_only, int32_t numa_node) {
            const MemoryLocation location = value_or_throw(parse_location(kind));
            return region_dict(
                value_or_throw(e.registry().add(addr, length, location, exported, read_only, numa_node)));
          },
          py::arg("addr"), py::arg("length"), py::arg("kind"), py::arg("exported"),
          py::arg("read_only") = false, py::arg("numa_node") = -1,
          "numa_node: host memory's NUMA node (-1: found from the memory itself).")
      .def(
          "register_file",
          [](Engine& e, const std::string& path, bool exported) {
            return region_dict(value_or_throw(e.registry().add_file(path, exported)));
          },
          py::arg("path"), py::arg("exported"))
      .def(
          "allocate",
          [](Engine& e, uint64_t length, bool exported, uint32_t fence_slots, bool pinned, bool populate,
             const std::string& backing_file) {
            StatusOr<RegionInfo> r = Status();
            {
              py::gil_scoped_release release;  // pre-faulting takes a while for large regions
              r = e.registry().allocate(length, exported, fence_slots, pinned, populate, backing_file);
            }
            const RegionInfo info = value_or_throw(std::move(r));
            // The array keeps the mapping alive: a view used after unregister reads stale memory,
            // never unmapped memory.
            auto* holder = new std::shared_ptr<Region>(e.registry().find(info.id));
            py::capsule owner(holder, [](void* p) { delete static_cast<std::shared_ptr<Region>*>(p); });
            py::array_t<uint8_t> view(static_cast<py::ssize_t>(info.length),
                                      reinterpret_cast<uint8_t*>(info.base), owner);
            py::dict d = region_dict(info);
            d["pinned_by"] = pin_method_name((*holder)->pin_method());
            return py::make_tuple(d, view);
          },
          py::arg("length"), py::arg("exported"), py::arg("fence_slots") = 0, py::arg("pinned") = false,
          py::arg("populate") = true, py::arg("backing_file") = "",
          "Allocates registered memfd host memory; returns (region info, uint8 numpy view). With "
          "fence_slots > 0 every transfer into it must name a live (slot, generation) allocation; with "
          "populate false its pages are faulted in by prefault() (huge pages asked for). backing_file: "
          "the memory is that shared-memory file (reused as it is when it has length bytes).")
      .def(
          "prefault",
          [](Engine& e, uint64_t region_id, uint64_t offset, uint64_t length) {
            Status st;
            {
              py::gil_scoped_release release;
              st = e.registry().prefault(region_id, offset, length);
            }
            if (!st.ok()) throw StatusError(st);
          },
          py::arg("region_id"), py::arg("offset"), py::arg("length"),
          "Faults in a range of a region allocated with populate false (several threads may fault "
          "disjoint ranges at once); NoMemoryError when the host has no memory left for it.")
      .def(
          "unregister",
          [](Engine& e, uint64_t id) {
            Status st;
            {
              py::gil_scoped_release release;  // waits for transfers that still touch the region
              st = e.registry().remove(id);
            }
            throw_if_error(st);
          },
          py::arg("region_id"))
      .def("regions",
           [](Engine& e) {
             py::list out;
             for (const auto& r : e.registry().all()) out.append(region_dict(r));
             return out;
           })
      .def("descriptor", [](Engine& e) { return descriptor_dict(e, e.descriptor()); })
      .def("set_owner", &Engine::set_owner, py::arg("owner"),
           "Names the client this engine's process registered as (its descriptor's owner).")
      .def("transports", &Engine::transports, "The transports this engine runs, cheapest first.")
      .def(
          "open_peer",
          [](Engine& e, const std::string& name, const std::string& transport) {
            StatusOr<uint32_t> r = Status();
            {
              py::gil_scoped_release release;
              r = e.open_peer(name, transport);
            }
            return value_or_throw(std::move(r));
          },
          py::arg("name"), py::arg("transport") = "")
      .def(
          "refresh_peer",
          [](Engine& e, uint32_t handle) {
            Status st;
            {
              py::gil_scoped_release release;
              st = e.refresh_peer(handle);
            }
            throw_if_error(st);
          },
          py::arg("handle"))
      .def(
          "peer_info",
          [](Engine& e, uint32_t handle) {
            py::dict d = descriptor_dict(e, value_or_throw(e.peer_descriptor(handle)));
            const auto transports = value_or_throw(e.peer_transports(handle));
            d["transport"] = transports.front();
            d["links"] = transports;
            return d;
          },
          py::arg("handle"))
      .def(
          "peer_paths",
          [](Engine& e, uint32_t handle) {
            py::list out;
            for (const auto& [transport, p] : value_or_throw(e.peer_paths(handle))) {
              py::dict d;
              d["transport"] = transport;
              d["local_nic"] = p.local_nic;
              d["local_address"] = p.local_address;
              d["remote_nic"] = p.remote_nic;
              d["remote_address"] = p.remote_address;
              d["up"] = p.up;
              d["connections"] = p.connections;
              d["bytes"] = p.bytes;
              d["slices"] = p.slices;
              d["failures"] = p.failures;
              d["failovers"] = p.failovers;
              out.append(d);
            }
            return out;
          },
          py::arg("handle"), "The paths of the peer's links and what each carried.");
  bind_engine_batches(c);
  bind_engine_fences(c);
}

}  // namespace kvs::bind
