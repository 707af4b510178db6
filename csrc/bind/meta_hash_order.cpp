// kvstore._meta.HashOrder: an ordered set of keys by their seeded 64-bit hash (csrc/meta/hash_order.h),
// for the eviction policies' shadows and ghost lists.
#include "bind/meta_hash_order.h"

#include <string_view>

#include "meta/crc32.h"
#include "meta/hash_order.h"
#include "meta/key_hash.h"
#include "meta/shadow_replay.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

struct PyHashOrder {
  explicit PyHashOrder(uint64_t seed) : seed(seed ^ 0x5851F42D4C957F2Dull) {}
  uint64_t hash(std::string_view key) const { return meta::hash_key(key, seed); }
  uint64_t seed;
  meta::HashOrder order;
};

}  // namespace

void register_hash_order(py::module_& m) {
  py::class_<PyHashOrder>(m, "HashOrder",
                          "An ordered set of keys kept as 64-bit hashes, first to go first (no Python "
                          "object per key); keys with the same hash count as one.")
      .def(py::init<uint64_t>(), py::arg("seed") = 0)
      .def(
          "add", [](PyHashOrder& o, std::string_view key, bool front) { o.order.add(o.hash(key), front); },
          py::arg("key"), py::arg("front") = false, "Puts the key last (or first), moving it if present.")
      .def(
          "add_many",
          [](PyHashOrder& o, const py::list& keys) {
            for (const py::handle key : keys) o.order.add(o.hash(key.cast<std::string_view>()), false);
          },
          py::arg("keys"), "add() of each key, last, in order.")
      .def(
          "add_hash", [](PyHashOrder& o, uint64_t h) { o.order.add(h, false); }, py::arg("h"),
          "Puts a hash last (one pop_first returned, from an order with the same seed).")
      .def(
          "touch", [](PyHashOrder& o, std::string_view key) { return o.order.touch(o.hash(key)); },
          py::arg("key"), "Moves the key last; False if absent.")
      .def(
          "discard", [](PyHashOrder& o, std::string_view key) { return o.order.discard(o.hash(key)); },
          py::arg("key"), "Removes the key; False if absent.")
      .def(
          "__contains__",
          [](const PyHashOrder& o, const py::object& key) {
            return py::isinstance<py::str>(key) && o.order.contains(o.hash(key.cast<std::string_view>()));
          },
          py::arg("key"))
      .def(
          "pop_first",
          [](PyHashOrder& o) -> py::object {
            const auto h = o.order.pop_first();
            return h ? py::object(py::int_(*h)) : py::none();
          },
          "Removes the first entry; its hash, or None when empty.")
      .def(
          "trim", [](PyHashOrder& o, size_t limit) { return o.order.trim(limit); }, py::arg("limit"),
          "Removes first entries until at most `limit` are left; the number removed.")
      .def(
          "sampled",
          [](const PyHashOrder& o, const py::list& keys, uint64_t sample) {
            // The CRC-32 of the key's UTF-8 (zlib.crc32's) picks the sample: the one the policy was tuned
            // with.
            if (sample == 0) throw py::value_error("sample must be positive");
            py::list out;
            for (const py::handle key : keys) {
              if (meta::crc32(key.cast<std::string_view>()) % sample == 0) out.append(key);
            }
            return out;
          },
          py::arg("keys"), py::arg("sample"),
          "The keys of a 1/`sample` sample (CRC-32 of the key's UTF-8 divisible by it), in order.")
      .def(
          "replay_shadow",
          [](PyHashOrder& o, PyHashOrder& ghost, const py::list& keys, size_t capacity, bool bimodal,
             double decay, double hits) {
            if (&ghost == &o || ghost.seed != o.seed) {
              throw py::value_error("a shadow's ghost is another order of the same seed");
            }
            std::vector<uint64_t> hashes;
            hashes.reserve(keys.size());
            for (const py::handle key : keys) hashes.push_back(o.hash(key.cast<std::string_view>()));
            return meta::replay_shadow(o.order, ghost.order, hashes, capacity, bimodal, decay, hits);
          },
          py::arg("ghost"), py::arg("keys"), py::arg("capacity"), py::arg("bimodal"), py::arg("decay"),
          py::arg("hits"),
          "This order as a shadow cache of `capacity` keys with its `ghost` list replays the references of "
          "`keys` in order (csrc/meta/shadow_replay.h); returns `hits` decayed and counted through them.")
      .def("__len__", [](const PyHashOrder& o) { return o.order.size(); })
      .def_property_readonly("memory_bytes", [](const PyHashOrder& o) { return o.order.memory_bytes(); });
}

}  // namespace kvs::bind
