// Engine binding: a batch crosses as six flat numpy arrays; every blocking call releases the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "bind/status_error.h"
#include "engine/bootstrap.h"
#include "engine/engine.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

template <typename T>
using Flat = py::array_t<T, py::array::c_style | py::array::forcecast>;

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

// One int32 per request, as a numpy array.
template <typename Get>
py::array_t<int32_t> per_request(const Batch& b, Get get) {
  py::array_t<int32_t> out(static_cast<py::ssize_t>(b.size()));
  auto w = out.mutable_unchecked<1>();
  for (size_t i = 0; i < b.size(); ++i) w(static_cast<py::ssize_t>(i)) = static_cast<int32_t>(get(i));
  return out;
}

std::shared_ptr<Batch> submit(Engine& engine, const Flat<uint8_t>& ops, const Flat<uint64_t>& local,
                              const Flat<uint32_t>& peers, const Flat<uint64_t>& regions,
                              const Flat<uint64_t>& offsets, const Flat<uint64_t>& lengths,
                              int64_t timeout_ms, const std::optional<Flat<uint32_t>>& fence_slots,
                              const std::optional<Flat<uint64_t>>& fence_gens,
                              const std::optional<Flat<uint8_t>>& digests,
                              const std::optional<Flat<uint32_t>>& piece_counts,
                              const std::optional<Flat<uint64_t>>& piece_addrs,
                              const std::optional<Flat<uint64_t>>& piece_lengths) {
  const auto n = static_cast<size_t>(ops.size());
  if (local.size() != ops.size() || peers.size() != ops.size() || regions.size() != ops.size() ||
      offsets.size() != ops.size() || lengths.size() != ops.size()) {
    throw StatusError(Status(Code::kInvalidArgument, "batch arrays differ in length"));
  }
  BatchView view{ops.data(), local.data(), peers.data(), regions.data(), offsets.data(), lengths.data(), n};
  if (fence_slots.has_value() != fence_gens.has_value() ||
      (fence_slots && (fence_slots->size() != ops.size() || fence_gens->size() != ops.size()))) {
    throw StatusError(
        Status(Code::kInvalidArgument, "fence arrays must both be given, one entry per request"));
  }
  if (fence_slots) {
    view.fence_slots = fence_slots->data();
    view.fence_gens = fence_gens->data();
  }
  if (digests) {
    if (digests->size() != ops.size())
      throw StatusError(Status(Code::kInvalidArgument, "one digest flag per request"));
    view.digests = digests->data();
  }
  if (piece_counts || piece_addrs || piece_lengths) {
    if (!piece_counts || !piece_addrs || !piece_lengths || piece_counts->size() != ops.size() ||
        piece_addrs->size() != piece_lengths->size()) {
      throw StatusError(Status(Code::kInvalidArgument,
                               "pieces take three arrays: a count per request, then every piece's address "
                               "and length"));
    }
    view.piece_counts = piece_counts->data();
    view.piece_addrs = piece_addrs->data();
    view.piece_lengths = piece_lengths->data();
    view.piece_total = static_cast<size_t>(piece_addrs->size());
  }
  py::gil_scoped_release release;
  return engine.submit(view, timeout_ms);
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
  py::class_<Batch, std::shared_ptr<Batch>>(m, "Batch", "Handle of a submitted batch.")
      .def_property_readonly("size", &Batch::size)
      .def("done", &Batch::done, "True once every request is final (applies the deadline).")
      .def(
          "states", [](Batch& b) { return per_request(b, [&](size_t i) { return b.state(i); }); },
          "Per-request RequestState values.")
      .def(
          "errors", [](Batch& b) { return per_request(b, [&](size_t i) { return b.error(i); }); },
          "Per-request error codes (0 when not failed).")
      .def(
          "digests",
          [](const Batch& b) {
            py::array_t<uint64_t> values(static_cast<py::ssize_t>(b.size()));
            py::array_t<bool> taken(static_cast<py::ssize_t>(b.size()));
            auto v = values.mutable_unchecked<1>();
            auto t = taken.mutable_unchecked<1>();
            for (size_t i = 0; i < b.size(); ++i) {
              uint64_t d = 0;
              t(static_cast<py::ssize_t>(i)) = b.digest(i, &d);
              v(static_cast<py::ssize_t>(i)) = d;
            }
            return py::make_tuple(taken, values);
          },
          "(taken, digests): per completed request that asked for it, the XXH3-64 of the bytes it landed "
          "(taken False where none was: not asked, several slices, or not complete).");

  py::class_<Engine>(m, "Engine", "The transfer engine core.")
      .def(py::init([](const std::string& host, uint16_t port, const std::string& transport, int copy_threads,
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
          "kill_allocations",
          [](Engine& e, uint64_t region_id, std::vector<uint32_t> slots, std::vector<uint64_t> gens,
             int timeout_ms) {
            auto region = e.registry().find(region_id);
            if (!region || region->fence() == nullptr || slots.size() != gens.size()) {
              throw StatusError(
                  Status(Code::kInvalidArgument, "no fenced region with that id, or bad lists"));
            }
            py::gil_scoped_release release;
            return region->fence()->kill(slots, gens, timeout_ms);
          },
          py::arg("region_id"), py::arg("slots"), py::arg("gens"), py::arg("timeout_ms"),
          "Fences allocations off; True once no transfer admitted before can still touch them.")
      .def(
          "raise_fence_floor",
          [](Engine& e, uint64_t region_id, uint64_t floor, int timeout_ms) {
            auto region = e.registry().find(region_id);
            if (!region || region->fence() == nullptr) {
              throw StatusError(Status(Code::kInvalidArgument, "no fenced region with that id"));
            }
            py::gil_scoped_release release;
            return region->fence()->raise_floor(floor, timeout_ms);
          },
          py::arg("region_id"), py::arg("floor"), py::arg("timeout_ms"),
          "Fences off every allocation of generation <= floor; True once drained.")
      .def(
          "fence_enter",
          [](Engine& e, uint64_t region_id, uint32_t slot, uint64_t gen) {
            auto region = e.registry().find(region_id);
            if (!region || region->fence() == nullptr) {
              throw StatusError(Status(Code::kInvalidArgument, "no fenced region with that id"));
            }
            return region->fence()->enter_owned(slot, gen);
          },
          py::arg("region_id"), py::arg("slot"), py::arg("gen"),
          "Admits this process's own access to a live allocation of its fenced region (as a peer's "
          "transfer would be, less the check that it was announced): True when alive; then call "
          "fence_leave once done.")
      .def(
          "announce_allocations",
          [](Engine& e, uint64_t region_id, std::vector<uint32_t> slots, std::vector<uint64_t> gens,
             std::vector<uint64_t> starts, std::vector<uint64_t> sizes) {
            auto region = e.registry().find(region_id);
            const size_t n = slots.size();
            if (!region || region->fence() == nullptr || gens.size() != n || starts.size() != n ||
                sizes.size() != n) {
              throw StatusError(
                  Status(Code::kInvalidArgument, "no fenced region with that id, or bad lists"));
            }
            for (size_t i = 0; i < n; ++i) {
              if (!in_bounds(starts[i], sizes[i], region->info().length)) {
                throw StatusError(
                    Status(Code::kOutOfRange, "an announced allocation lies outside the region"));
              }
            }
            for (size_t i = 0; i < n; ++i) region->fence()->announce(slots[i], gens[i], starts[i], sizes[i]);
          },
          py::arg("region_id"), py::arg("slots"), py::arg("gens"), py::arg("starts"), py::arg("sizes"),
          "Names the allocations the master handed out in a fenced region, (slot, generation, "
          "[start, start + size)) each: a peer's transfer is admitted only into the one its slot holds.")
      .def(
          "fence_leave",
          [](Engine& e, uint64_t region_id, uint32_t slot) {
            auto region = e.registry().find(region_id);
            if (region && region->fence() != nullptr && slot < region->fence()->slots())
              region->fence()->leave(slot);
          },
          py::arg("region_id"), py::arg("slot"))
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
          py::arg("handle"), "The paths of the peer's links and what each carried.")
      .def("submit", &submit, py::arg("ops"), py::arg("local_addrs"), py::arg("peers"), py::arg("region_ids"),
           py::arg("offsets"), py::arg("lengths"), py::arg("timeout_ms"), py::arg("fence_slots") = py::none(),
           py::arg("fence_gens") = py::none(), py::arg("digests") = py::none(),
           py::arg("piece_counts") = py::none(), py::arg("piece_addrs") = py::none(),
           py::arg("piece_lengths") = py::none(),
           "Submits a batch given as flat arrays; returns a Batch handle at once. `digests`: non-zero for "
           "reads whose landed bytes' XXH3-64 is wanted (Batch.digests). `piece_counts`: request i's local "
           "side is its next piece_counts[i] pieces of piece_addrs/piece_lengths (0: local_addrs[i]).")
      .def(
          "wait",
          [](Engine& e, Batch& b, int64_t timeout_us, bool help) {
            py::gil_scoped_release release;
            return e.wait(b, timeout_us, help);
          },
          py::arg("batch"), py::arg("timeout_us"), py::arg("help") = true,
          "Waits for a batch; True when every request is final.")
      .def(
          "wait_verified",
          [](Engine& e, Batch& b, const Flat<uint64_t>& expected, const Flat<uint8_t>& check) {
            if (static_cast<size_t>(expected.size()) != b.size() ||
                static_cast<size_t>(check.size()) != b.size()) {
              throw StatusError(
                  Status(Code::kInvalidArgument, "one expected digest and check flag per request"));
            }
            py::array_t<int32_t> verdicts(static_cast<py::ssize_t>(b.size()));
            int32_t* out = verdicts.mutable_data();
            {
              py::gil_scoped_release release;
              e.wait_verified(b, expected.data(), check.data(), out);
            }
            return verdicts;
          },
          py::arg("batch"), py::arg("expected"), py::arg("check"),
          "Runs a batch to its end, verifying each read as it ends: per request 0 (completed; its landed "
          "bytes' XXH3-64 is expected[i] where check[i]), -1 (they differ), -2 (completed, no digest "
          "taken here) or its error code.")
      .def("help_once", &Engine::help_once, py::call_guard<py::gil_scoped_release>(),
           "Runs one queued copy on this thread; False if none was queued.")
      .def(
          "transfer",
          [](Engine& e, uint8_t op, uint64_t local, uint32_t peer, uint64_t region, uint64_t offset,
             uint64_t length, int64_t timeout_ms, uint32_t fence_slot, uint64_t fence_gen) {
            py::gil_scoped_release release;
            BatchView view{&op, &local, &peer, &region, &offset, &length, 1, &fence_slot, &fence_gen};
            auto batch = e.submit(view, timeout_ms);
            e.wait(*batch, -1);
            return std::make_pair(static_cast<int>(batch->state(0)), static_cast<int>(batch->error(0)));
          },
          py::arg("op"), py::arg("local_addr"), py::arg("peer"), py::arg("region_id"), py::arg("offset"),
          py::arg("length"), py::arg("timeout_ms"), py::arg("fence_slot") = 0, py::arg("fence_gen") = 0,
          "One request, submitted and waited for in one call; returns (state, error code).")
      .def(
          "read_verified",
          [](Engine& e, uint64_t local, uint32_t peer, uint64_t region, uint64_t offset, uint64_t length,
             int64_t timeout_ms, uint32_t fence_slot, uint64_t fence_gen, uint64_t expected) {
            py::gil_scoped_release release;
            uint8_t op = static_cast<uint8_t>(TransferOp::kRead);
            uint8_t asked = 1;
            BatchView view{&op, &local, &peer, &region, &offset, &length, 1, &fence_slot, &fence_gen};
            view.digests = &asked;
            auto batch = e.submit(view, timeout_ms);
            int32_t verdict = 0;
            e.wait_verified(*batch, &expected, &asked, &verdict);
            return verdict;
          },
          py::arg("local_addr"), py::arg("peer"), py::arg("region_id"), py::arg("offset"), py::arg("length"),
          py::arg("timeout_ms"), py::arg("fence_slot"), py::arg("fence_gen"), py::arg("expected"),
          "One read, run to its end and verified in one call (its bytes hashed as they land): "
          "wait_verified's verdict.");
}

}  // namespace kvs::bind
