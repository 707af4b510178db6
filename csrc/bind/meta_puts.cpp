// The object table's puts (part of kvstore._meta.ObjectTable; meta/puts.h): a batch started from columns and
// a batch ended, each in one crossing with no Python object per key, and the puts in progress it keeps.
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bind/meta_keys.h"
#include "bind/meta_object_table.h"
#include "meta/object_orders.h"
#include "meta/object_refs.h"
#include "meta/puts.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

using meta::ObjectTable;
using meta::Row;

// A list of non-negative ints, read in C (TypeError naming `what` for anything else).
std::vector<uint64_t> u64s_of(const py::list& values, const char* what) {
  const Py_ssize_t n = PyList_GET_SIZE(values.ptr());
  std::vector<uint64_t> out(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* v = PyList_GET_ITEM(values.ptr(), i);
    if (!PyLong_Check(v)) throw py::type_error(std::string(what) + " must be ints");
    out[static_cast<size_t>(i)] = PyLong_AsUnsignedLongLong(v);
    if (PyErr_Occurred()) throw py::error_already_set();
  }
  return out;
}

// The copies' columns, key-major: the segments, offsets, slots and generations of each copy in turn.
std::vector<meta::MemoryCopy> copies_of(const py::list& segments, const py::list& offsets,
                                        const py::list& slots, const py::list& gens) {
  const std::vector<uint64_t> seg = u64s_of(segments, "segments"), off = u64s_of(offsets, "offsets"),
                              slot = u64s_of(slots, "slots"), gen = u64s_of(gens, "gens");
  if (off.size() != seg.size() || slot.size() != seg.size() || gen.size() != seg.size())
    throw py::value_error("one segment, offset, slot and generation per copy");
  std::vector<meta::MemoryCopy> out(seg.size());
  for (size_t i = 0; i < seg.size(); ++i)
    out[i] = meta::MemoryCopy{static_cast<uint32_t>(seg[i]), static_cast<uint32_t>(slot[i]), off[i], gen[i]};
  return out;
}

py::list start_puts(ObjectTable& t, const py::list& keys, const py::list& sizes, const py::list& checksums,
                    const py::list& hold_seqs, uint32_t count, const py::list& segments,
                    const py::list& offsets, const py::list& slots, const py::list& gens, uint32_t writer,
                    bool pinned, uint8_t base_replicas, double started, double deadline) {
  meta::StartedPuts p;
  p.keys = keys_of(keys);
  p.sizes = u64s_of(sizes, "sizes");
  p.checksums = u64s_of(checksums, "checksums");
  p.hold_seqs = u64s_of(hold_seqs, "hold numbers");
  p.copies = copies_of(segments, offsets, slots, gens);
  p.count = count;
  p.writer = writer;
  p.pinned = pinned;
  p.base_replicas = base_replicas;
  p.started = started;
  p.deadline = deadline;
  std::vector<Row> rows;
  try {
    rows = meta::start_puts(t, p);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
  py::list refs(static_cast<Py_ssize_t>(rows.size()));
  for (size_t i = 0; i < rows.size(); ++i) refs[i] = py::int_(meta::ref_of(t, rows[i]));
  return refs;
}

py::tuple end_puts(ObjectTable& t, const py::list& keys, uint32_t writer, int link, uint32_t sample) {
  const std::optional<meta::Order> order = link < 0 ? std::nullopt : std::optional(meta::order_of(link));
  const meta::EndedPuts e = meta::end_puts(t, keys_of(keys), writer, order, sample);
  py::dict marks;
  for (const auto& [segment, seq] : e.marks) marks[py::int_(segment)] = py::int_(seq);
  return py::make_tuple(e.bytes, e.missing, picked(keys, e.ended), picked(keys, e.short_of_copies), marks,
                        picked(keys, e.sampled));
}

// [(key, reference)] of the rows.
py::list keyed(const ObjectTable& t, const std::vector<Row>& rows) {
  py::list out(static_cast<Py_ssize_t>(rows.size()));
  for (size_t i = 0; i < rows.size(); ++i) {
    out[i] = py::make_tuple(py::str(std::string(t.key(rows[i]))), meta::ref_of(t, rows[i]));
  }
  return out;
}

}  // namespace

void register_puts(py::class_<ObjectTable>& c) {
  c.def("start_puts", &start_puts, py::arg("keys"), py::arg("sizes"), py::arg("checksums"),
        py::arg("hold_seqs"), py::arg("count"), py::arg("segments"), py::arg("offsets"), py::arg("slots"),
        py::arg("gens"), py::arg("writer"), py::arg("pinned"), py::arg("base_replicas"), py::arg("started"),
        py::arg("deadline"),
        "Puts started by `writer` (its number), `count` copies each (the copies' columns key-major): each "
        "key's row made uncommitted and charged to the writer until it ends, expiring at `deadline`; "
        "`hold_seqs` "
        "empty: none yet. Returns their references in order. All or nothing: ValueError when a key is "
        "present or twice, or the columns disagree.")
      .def("end_puts", &end_puts, py::arg("keys"), py::arg("writer"), py::arg("link") = -1,
           py::arg("sample") = 0,
           "Commits the writer's puts of `keys`, each object committed going last in order `link` (-1: "
           "none). Returns (bytes committed, indexes of the keys it had no put of in progress, the keys "
           "committed, those of them short of the copies asked, {segment id: the highest hold number of a "
           "put committed with a copy there}, the keys committed whose CRC-32 is divisible by `sample` "
           "(0: none)).")
      .def(
          "puts_expired", [](ObjectTable& t, double now) { return keyed(t, meta::expired_puts(t, now)); },
          py::arg("now"),
          "[(key, reference)] of the puts in progress whose deadline passed at `now`, oldest first.")
      .def(
          "puts_of", [](ObjectTable& t, uint32_t writer) { return keyed(t, meta::puts_of(t, writer)); },
          py::arg("writer"),
          "[(key, reference)] of the puts in progress (writer 0: everyone's), oldest first.")
      .def(
          "puts_held",
          [](const ObjectTable& t, uint32_t writer) {
            const meta::PutsHeld h = t.puts().held(writer);
            return std::make_pair(h.objects, h.bytes);
          },
          py::arg("writer"), "(objects, bytes) of the writer's puts in progress.")
      .def(
          "puts_credit", [](ObjectTable& t, double seconds) { t.puts().credit(seconds); }, py::arg("seconds"),
          "Every put in progress has `seconds` longer (the master stalled).")
      .def("puts_count", [](const ObjectTable& t) { return t.puts().size(); }, "Puts in progress.");
}

}  // namespace kvs::bind
