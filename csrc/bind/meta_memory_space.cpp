// kvstore._meta.SlotPool and MemorySpace: a segment's fence slots, and the placement of new replicas over
// every mounted segment (csrc/meta/memory_space.h). A batch of puts is placed in one crossing; its replicas
// come back as three flat lists.
#include "bind/meta_memory_space.h"

#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "meta/memory_space.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

using meta::MemorySpace;
using meta::Placed;
using meta::SlotPool;

// (segment ids, offsets, slots) of placed replicas, as Python lists.
py::tuple columns(const std::vector<Placed>& placed) {
  py::list segments(placed.size()), offsets(placed.size()), slots(placed.size());
  for (size_t i = 0; i < placed.size(); ++i) {
    segments[i] = py::int_(placed[i].segment);
    offsets[i] = py::int_(placed[i].offset);
    slots[i] = py::int_(placed[i].slot);
  }
  return py::make_tuple(segments, offsets, slots);
}

}  // namespace

void register_memory_space(py::module_& m) {
  py::class_<SlotPool, std::shared_ptr<SlotPool>>(
      m, "SlotPool", "A segment's fence slots: one per live allocation; given-back slots are reused first.")
      .def(py::init<uint32_t>(), py::arg("capacity"))
      .def_property_readonly("has_slot", &SlotPool::has_slot)
      .def(
          "take",
          [](SlotPool& p) -> py::object {
            const auto slot = p.take();
            return slot ? py::object(py::int_(*slot)) : py::none();
          },
          "A free slot, or None when every slot is in use.")
      .def("give_back", &SlotPool::give_back, py::arg("slot"),
           "A slot comes back; False (nothing changes) for one never handed out.")
      .def(
          "restart",
          [](SlotPool& p, const py::iterable& taken) {
            std::vector<uint32_t> slots;
            for (const py::handle& s : taken) {
              const auto slot = s.cast<uint32_t>();
              if (slot >= p.capacity()) throw py::value_error("a taken slot is beyond the pool's capacity");
              slots.push_back(slot);
            }
            p.restart(slots);
          },
          py::arg("taken"), "After a restore: these slots are held; every other one below them is free.")
      .def_property_readonly("capacity", &SlotPool::capacity)
      .def_property_readonly("next", &SlotPool::next, "Slots below it were handed out at least once.")
      .def_property_readonly("free_slots", &SlotPool::free_slots, "Slots given back, next to be reused last.")
      .def_property_readonly("in_use", &SlotPool::in_use);

  py::class_<MemorySpace>(m, "MemorySpace",
                          "Every mounted memory segment's allocator and slots, and where new replicas go: "
                          "distinct segments, distinct hosts first, each on the roomier of two segments "
                          "drawn at random among those that fit.")
      .def(py::init<>())
      .def("add", &MemorySpace::add, py::arg("id"), py::arg("host"), py::arg("allocator"), py::arg("slots"))
      .def("remove", &MemorySpace::remove, py::arg("id"))
      .def("set_placeable", &MemorySpace::set_placeable, py::arg("id"), py::arg("placeable"))
      .def("__len__", &MemorySpace::size)
      .def("seed", &MemorySpace::seed, py::arg("seed"),
           "Restarts placement's random draws from `seed` (same seed and calls: same placements).")
      .def(
          "place_many",
          [](MemorySpace& s, const std::vector<uint64_t>& sizes, uint32_t count) {
            if (count == 0) throw py::value_error("count must be positive");
            std::vector<Placed> placed;
            placed.reserve(sizes.size() * count);
            const size_t done = s.place_many(sizes, count, placed);
            return py::make_tuple(done, columns(placed));
          },
          py::arg("sizes"), py::arg("count"),
          "Places `count` replicas of each size in turn: (objects placed, (segments, offsets, slots)), "
          "`count` entries per object. Stops before the first that does not fit now.")
      .def(
          "place",
          [](MemorySpace& s, uint64_t size, uint32_t count, const std::vector<uint32_t>& exclude,
             const std::vector<std::string>& spread_from) -> py::object {
            if (count == 0) throw py::value_error("count must be positive");
            std::vector<Placed> placed;
            if (!s.place(size, count, exclude, spread_from, placed)) return py::none();
            return columns(placed);
          },
          py::arg("size"), py::arg("count"), py::arg("exclude") = std::vector<uint32_t>(),
          py::arg("spread_from") = std::vector<std::string>(),
          "Places `count` replicas of one object, on no segment of `exclude`, on hosts other than "
          "`spread_from` and each other first: (segments, offsets, slots), or None when they do not fit.");
}

}  // namespace kvs::bind
