// kvstore._meta.encode_put_reply: a put_start's outcomes (kvstore.master.service.puts.Puts.start_puts's
// `out`: per item a list of Replica, an int naming placed copies' columns, None, or a KVStoreError) read in
// one crossing and encoded in C++ (csrc/meta/put_reply.h).
#include "bind/meta_put_reply.h"

#include <string_view>
#include <vector>

#include "bind/meta_keys.h"
#include "meta/put_reply.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

std::string_view text_of(PyObject* s, const char* what) {
  if (!PyUnicode_Check(s)) throw py::type_error(std::string(what) + " must be str");
  return key_of(s);
}

// Placement's fields of a Replica (kvstore.master.planners.placement.PLACEMENT_SOURCES); the engine's str
// goes into `alive` (its UTF-8 is read in place until the reply is encoded).
meta::PlacedCopy copy_of(PyObject* replica, std::vector<py::object>& alive) {
  static const py::str a_segment("segment"), a_engine("engine"), a_region("region_id"), a_offset("offset"),
      a_slot("slot"), a_gen("gen");
  const py::object segment = attr_of(replica, a_segment);
  meta::PlacedCopy c;
  alive.push_back(attr_of(segment.ptr(), a_engine));
  c.engine = text_of(alive.back().ptr(), "a segment's engine");
  c.region_id = u64_of(attr_of(segment.ptr(), a_region));
  c.offset = u64_of(attr_of(replica, a_offset));
  c.slot = u64_of(attr_of(replica, a_slot));
  c.gen = u64_of(attr_of(replica, a_gen));
  return c;
}

// A request's placed copies as columns (kvstore.master.service.puts.PlacedColumns: segment ids, offsets,
// slots, generations), with where each segment is ({segment id: (tier, host, engine, region)}): an
// outcome that is an int names copies [v >> 8, (v >> 8) + (v & 255)) of them.
class PlacedColumns {
 public:
  PlacedColumns(const py::object& placed, const py::object& places) {
    if (placed.is_none()) return;
    const auto columns = placed.cast<py::tuple>();
    if (columns.size() != 4) throw py::value_error("placed copies are 4 columns");
    for (size_t c = 0; c < 4; ++c) columns_[c] = u64s(columns[c]);
    for (size_t c = 1; c < 4; ++c)
      if (columns_[c].size() != columns_[0].size()) throw py::value_error("placed columns of one length");
    places_ = places.cast<py::dict>();
  }

  // Appends copies [first, first + count) to `copies`.
  void append(uint64_t first, uint64_t count, std::vector<meta::PlacedCopy>& copies,
              std::vector<py::object>& alive) {
    if (first + count > columns_[0].size()) throw py::value_error("a placed outcome past the placed copies");
    for (uint64_t i = first; i < first + count; ++i) {
      PyObject* place = PyDict_GetItem(places_.ptr(), py::int_(columns_[0][i]).ptr());  // borrowed
      if (place == nullptr || !PyTuple_Check(place) || PyTuple_GET_SIZE(place) != 4)
        throw py::value_error("a placed copy's segment has no place");
      meta::PlacedCopy c;
      alive.push_back(py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(place, 2)));
      c.engine = text_of(alive.back().ptr(), "a segment's engine");
      c.region_id = u64_of(py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(place, 3)));
      c.offset = columns_[1][i];
      c.slot = columns_[2][i];
      c.gen = columns_[3][i];
      copies.push_back(c);
    }
  }

 private:
  static std::vector<uint64_t> u64s(py::handle list) {
    if (!PyList_Check(list.ptr())) throw py::type_error("placed columns must be lists");
    const Py_ssize_t n = PyList_GET_SIZE(list.ptr());
    std::vector<uint64_t> out(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i)
      out[static_cast<size_t>(i)] =
          u64_of(py::reinterpret_borrow<py::object>(PyList_GET_ITEM(list.ptr(), i)));
    return out;
  }

  std::vector<uint64_t> columns_[4];
  py::dict places_;
};

py::bytes encode_put_reply(const py::list& outcomes, const py::object& placed, const py::object& places) {
  static const py::str a_code("code");
  const Py_ssize_t n = PyList_GET_SIZE(outcomes.ptr());
  std::vector<meta::PutOutcome> items(static_cast<size_t>(n));
  std::vector<meta::PlacedCopy> copies;
  copies.reserve(static_cast<size_t>(n));
  std::vector<py::object> alive;  // (the strs read in place: engines, errors' messages)
  PlacedColumns columns(placed, places);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* outcome = PyList_GET_ITEM(outcomes.ptr(), i);
    meta::PutOutcome& item = items[static_cast<size_t>(i)];
    if (outcome == Py_None) continue;  // (kStored)
    if (PyLong_CheckExact(outcome)) {
      const uint64_t v = u64_of(py::reinterpret_borrow<py::object>(outcome));
      item.kind = meta::PutOutcome::Kind::kPlaced;
      item.first = static_cast<uint32_t>(copies.size());
      item.count = static_cast<uint32_t>(v & 255);
      columns.append(v >> 8, v & 255, copies, alive);
      continue;
    }
    if (PyList_Check(outcome)) {
      item.kind = meta::PutOutcome::Kind::kPlaced;
      item.first = static_cast<uint32_t>(copies.size());
      item.count = static_cast<uint32_t>(PyList_GET_SIZE(outcome));
      for (Py_ssize_t r = 0; r < PyList_GET_SIZE(outcome); ++r)
        copies.push_back(copy_of(PyList_GET_ITEM(outcome, r), alive));
      continue;
    }
    item.kind = meta::PutOutcome::Kind::kFailed;
    item.code = u64_of(attr_of(outcome, a_code));
    PyObject* message = PyObject_Str(outcome);
    if (message == nullptr) throw py::error_already_set();
    alive.push_back(py::reinterpret_steal<py::object>(message));
    item.message = text_of(message, "an error's message");
  }
  const std::string reply = meta::encode_put_reply(items, copies);
  return py::bytes(reply.data(), reply.size());
}

}  // namespace

void register_put_reply(py::module_& m) {
  m.def("encode_put_reply", &encode_put_reply, py::arg("outcomes"), py::arg("placed") = py::none(),
        py::arg("places") = py::none(),
        "A put_start reply, msgpack-encoded: per outcome (a list of Replica, or an int v naming copies "
        "[v >> 8, (v >> 8) + (v & 255)) of `placed`'s columns (segment ids, offsets, slots, gens) whose "
        "segments `places` maps to (tier, host, engine, region): placed; None: stored already; an error "
        "with a `code`: failed) [0, \"\", [[engine, region_id, offset, slot, gen], ...]], [0, \"\", nil] or "
        "[code, message, nil], as msgpack-python packs the same values.");
}

}  // namespace kvs::bind
