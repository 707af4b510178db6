// Batches cross as flat numpy arrays (engine/flat_batches.h checks them); every blocking call releases the
// GIL. Also the fences of the engine's fenced regions (engine/region_fences.h).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <vector>

#include "bind/bind_engine.h"
#include "bind/status_error.h"
#include "engine/flat_batches.h"
#include "engine/region_fences.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

template <typename T>
using Flat = py::array_t<T, py::array::c_style | py::array::forcecast>;

template <typename T>
ArrayView<T> view_of(const Flat<T>& a) {
  return {a.data(), static_cast<size_t>(a.size())};
}

template <typename T>
std::optional<ArrayView<T>> view_of(const std::optional<Flat<T>>& a) {
  return a ? std::optional<ArrayView<T>>(view_of(*a)) : std::nullopt;
}

// One int32 per request, as a numpy array.
template <typename Get>
py::array_t<int32_t> per_request(const Batch& b, Get get) {
  py::array_t<int32_t> out(static_cast<py::ssize_t>(b.size()));
  auto w = out.mutable_unchecked<1>();
  for (size_t i = 0; i < b.size(); ++i) w(static_cast<py::ssize_t>(i)) = static_cast<int32_t>(get(i));
  return out;
}

py::tuple digests(const Batch& b) {
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
  const BatchArrays arrays{view_of(ops),          view_of(local),       view_of(peers),
                           view_of(regions),      view_of(offsets),     view_of(lengths),
                           view_of(fence_slots),  view_of(fence_gens),  view_of(digests),
                           view_of(piece_counts), view_of(piece_addrs), view_of(piece_lengths)};
  const BatchView view = value_or_throw(batch_view(arrays));
  py::gil_scoped_release release;
  return engine.submit(view, timeout_ms);
}

py::array_t<int32_t> wait_verified(Engine& e, Batch& b, const Flat<uint64_t>& expected,
                                   const Flat<uint8_t>& check) {
  throw_if_error(check_verified_arrays(b.size(), static_cast<size_t>(expected.size()),
                                       static_cast<size_t>(check.size())));
  py::array_t<int32_t> verdicts(static_cast<py::ssize_t>(b.size()));
  int32_t* out = verdicts.mutable_data();
  {
    py::gil_scoped_release release;
    e.wait_verified(b, expected.data(), check.data(), out);
  }
  return verdicts;
}

std::pair<int, int> transfer(Engine& e, uint8_t op, uint64_t local, uint32_t peer, uint64_t region,
                             uint64_t offset, uint64_t length, int64_t timeout_ms, uint32_t fence_slot,
                             uint64_t fence_gen) {
  const OneRequest r{static_cast<TransferOp>(op), local, peer, region, offset, length, fence_slot, fence_gen};
  py::gil_scoped_release release;
  return transfer_one(e, r, timeout_ms);
}

int32_t read_verified(Engine& e, uint64_t local, uint32_t peer, uint64_t region, uint64_t offset,
                      uint64_t length, int64_t timeout_ms, uint32_t fence_slot, uint64_t fence_gen,
                      uint64_t expected) {
  const OneRequest r{TransferOp::kRead, local, peer, region, offset, length, fence_slot, fence_gen};
  py::gil_scoped_release release;
  return read_verified_one(e, r, timeout_ms, expected);
}

// A fence call's result, its Status raised once the GIL is back.
template <typename Call>
auto unlocked(Call call) {
  auto result = [&] {
    py::gil_scoped_release release;
    return call();
  }();
  return value_or_throw(std::move(result));
}

}  // namespace

void bind_batch(py::module_& m) {
  py::class_<Batch, std::shared_ptr<Batch>>(m, "Batch", "Handle of a submitted batch.")
      .def_property_readonly("size", &Batch::size)
      .def("done", &Batch::done, "True once every request is final (applies the deadline).")
      .def(
          "states", [](Batch& b) { return per_request(b, [&](size_t i) { return b.state(i); }); },
          "Per-request RequestState values.")
      .def(
          "errors", [](Batch& b) { return per_request(b, [&](size_t i) { return b.error(i); }); },
          "Per-request error codes (0 when not failed).")
      .def("digests", &digests,
           "(taken, digests): per completed request that asked for it, the XXH3-64 of the bytes it landed "
           "(taken False where none was: not asked, several slices, or not complete).");
}

void bind_engine_batches(py::class_<Engine>& c) {
  c.def("submit", &submit, py::arg("ops"), py::arg("local_addrs"), py::arg("peers"), py::arg("region_ids"),
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
      .def("wait_verified", &wait_verified, py::arg("batch"), py::arg("expected"), py::arg("check"),
           "Runs a batch to its end, verifying each read as it ends: per request 0 (completed; its landed "
           "bytes' XXH3-64 is expected[i] where check[i]), -1 (they differ), -2 (completed, no digest "
           "taken here) or its error code.")
      .def("help_once", &Engine::help_once, py::call_guard<py::gil_scoped_release>(),
           "Runs one queued copy on this thread; False if none was queued.")
      .def("transfer", &transfer, py::arg("op"), py::arg("local_addr"), py::arg("peer"), py::arg("region_id"),
           py::arg("offset"), py::arg("length"), py::arg("timeout_ms"), py::arg("fence_slot") = 0,
           py::arg("fence_gen") = 0,
           "One request, submitted and waited for in one call; returns (state, error code).")
      .def("read_verified", &read_verified, py::arg("local_addr"), py::arg("peer"), py::arg("region_id"),
           py::arg("offset"), py::arg("length"), py::arg("timeout_ms"), py::arg("fence_slot"),
           py::arg("fence_gen"), py::arg("expected"),
           "One read, run to its end and verified in one call (its bytes hashed as they land): "
           "wait_verified's verdict.");
}

void bind_engine_fences(py::class_<Engine>& c) {
  c.def(
       "kill_allocations",
       [](Engine& e, uint64_t region_id, std::vector<uint32_t> slots, std::vector<uint64_t> gens,
          int timeout_ms) {
         return unlocked([&] { return kill_allocations(e.registry(), region_id, slots, gens, timeout_ms); });
       },
       py::arg("region_id"), py::arg("slots"), py::arg("gens"), py::arg("timeout_ms"),
       "Fences allocations off; True once no transfer admitted before can still touch them.")
      .def(
          "raise_fence_floor",
          [](Engine& e, uint64_t region_id, uint64_t floor, int timeout_ms) {
            return unlocked([&] { return raise_fence_floor(e.registry(), region_id, floor, timeout_ms); });
          },
          py::arg("region_id"), py::arg("floor"), py::arg("timeout_ms"),
          "Fences off every allocation of generation <= floor; True once drained.")
      .def(
          "kill_allocations_but",
          [](Engine& e, uint64_t region_id, uint64_t floor, const Flat<uint32_t>& kept_slots,
             const Flat<uint64_t>& kept_gens, int timeout_ms) {
            const std::vector<uint32_t> slots(kept_slots.data(), kept_slots.data() + kept_slots.size());
            const std::vector<uint64_t> gens(kept_gens.data(), kept_gens.data() + kept_gens.size());
            return unlocked([&] {
              return kill_allocations_but(e.registry(), region_id, floor, slots, gens, timeout_ms);
            });
          },
          py::arg("region_id"), py::arg("floor"), py::arg("kept_slots"), py::arg("kept_gens"),
          py::arg("timeout_ms"),
          "Fences off every allocation of generation <= floor but the kept (slot, generation) ones (flat "
          "arrays, any order), each alive in its own generation only, in one pass over the table: "
          "True once drained.")
      .def(
          "fence_enter",
          [](Engine& e, uint64_t region_id, uint32_t slot, uint64_t gen) {
            return value_or_throw(fence_enter(e.registry(), region_id, slot, gen));
          },
          py::arg("region_id"), py::arg("slot"), py::arg("gen"),
          "Admits this process's own access to a live allocation of its fenced region (as a peer's "
          "transfer would be, less the check that it was announced): True when alive; then call "
          "fence_leave once done.")
      .def(
          "announce_allocations",
          [](Engine& e, uint64_t region_id, std::vector<uint32_t> slots, std::vector<uint64_t> gens,
             std::vector<uint64_t> starts, std::vector<uint64_t> sizes) {
            throw_if_error(announce_allocations(e.registry(), region_id, slots, gens, starts, sizes));
          },
          py::arg("region_id"), py::arg("slots"), py::arg("gens"), py::arg("starts"), py::arg("sizes"),
          "Names the allocations the master handed out in a fenced region, (slot, generation, "
          "[start, start + size)) each: a peer's transfer is admitted only into the one its slot holds.")
      .def(
          "fence_leave",
          [](Engine& e, uint64_t region_id, uint32_t slot) { fence_leave(e.registry(), region_id, slot); },
          py::arg("region_id"), py::arg("slot"));
}

}  // namespace kvs::bind
