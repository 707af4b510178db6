// The object table's calls over a batch of keys (part of kvstore._meta.ObjectTable): each reads its list
// once into C++ (meta/object_batches.h, object_queries.h, object_orders.h, object_groups.h, locate.h,
// object_use.h) and answers with the caller's own key objects.
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bind/meta_keys.h"
#include "bind/meta_object_table.h"
#include "meta/locate.h"
#include "meta/object_batches.h"
#include "meta/object_groups.h"
#include "meta/object_orders.h"
#include "meta/object_queries.h"
#include "meta/object_use.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

using meta::MemoryCopy;
using meta::ObjectTable;
using meta::order_of;

// A segment's place from the master's {segment id: (tier, host, engine, region)} (views into its strs).
std::optional<meta::Place> place_in(const py::dict& places, uint32_t segment) {
  PyObject* place = PyDict_GetItem(places.ptr(), py::int_(segment).ptr());  // borrowed
  if (place == nullptr || !PyTuple_Check(place) || PyTuple_GET_SIZE(place) != 4) return std::nullopt;
  const auto p = py::reinterpret_borrow<py::tuple>(place);
  return meta::Place{p[0].cast<uint64_t>(), p[1].cast<std::string_view>(), p[2].cast<std::string_view>(),
                     p[3].cast<uint64_t>()};
}

py::tuple locate_many(ObjectTable& t, const py::list& keys, bool prefix, double now, double lease_until,
                      double half_life, double hot_heat, const py::dict& places, bool transient,
                      int touch_order, uint32_t sample) {
  const meta::UseRule rule{now, lease_until, half_life, hot_heat};
  meta::ReadTouch touch{std::nullopt, sample};
  if (touch_order >= 0) touch.order = order_of(touch_order);
  const meta::Located got = meta::locate_many(
      t, keys_of(keys), prefix, rule, transient,
      [&places](uint32_t segment) { return place_in(places, segment); }, touch);
  py::list notes;
  for (const meta::LocateNote& n : got.notes) {
    notes.append(py::make_tuple(n.index, py::handle(PyList_GET_ITEM(keys.ptr(), n.index)), n.in_memory,
                                n.disk_segment, n.attention));
  }
  return py::make_tuple(py::bytes(got.reply), picked(keys, got.sampled), notes, got.hits.size());
}

// A NewObject (kvstore.master.objects) read in C++; its key is read (and admitted) by the caller.
meta::NewObject new_object(PyObject* obj, std::string_view key, const py::dict& writers) {
  static const py::str a_size("size"), a_checksum("checksum"), a_writer("writer"), a_complete("complete"),
      a_pinned("pinned"), a_last("last_access"), a_base("base_replicas"), a_hold("hold_seq"),
      a_replicas("replicas"), a_disk("disk"), a_segment("segment"), a_id("id"), a_offset("offset"),
      a_slot("slot"), a_gen("gen");
  PyObject* writer = PyDict_GetItem(writers.ptr(), attr_of(obj, a_writer).ptr());  // borrowed
  if (writer == nullptr) throw py::key_error("a writer without a number");
  meta::NewObject o{key, {}, {}};
  o.fields.size = u64_of(attr_of(obj, a_size));
  o.fields.checksum = u64_of(attr_of(obj, a_checksum));
  o.fields.writer = static_cast<uint32_t>(u64_of(py::reinterpret_borrow<py::object>(writer)));
  o.fields.complete = attr_of(obj, a_complete).ptr() == Py_True;
  o.fields.pinned = attr_of(obj, a_pinned).ptr() == Py_True;
  o.fields.last_access = PyFloat_AsDouble(attr_of(obj, a_last).ptr());
  o.fields.base_replicas = static_cast<uint8_t>(u64_of(attr_of(obj, a_base)));
  o.fields.hold_seq = u64_of(attr_of(obj, a_hold));
  const py::object replicas = attr_of(obj, a_replicas);
  if (!PyList_Check(replicas.ptr())) throw py::type_error("replicas must be a list");
  for (Py_ssize_t c = 0; c < PyList_GET_SIZE(replicas.ptr()); ++c) {
    PyObject* r = PyList_GET_ITEM(replicas.ptr(), c);
    o.copies.push_back(MemoryCopy{static_cast<uint32_t>(u64_of(attr_of(attr_of(r, a_segment).ptr(), a_id))),
                                  static_cast<uint32_t>(u64_of(attr_of(r, a_slot))),
                                  u64_of(attr_of(r, a_offset)), u64_of(attr_of(r, a_gen))});
  }
  const py::object disk = attr_of(obj, a_disk);
  if (!disk.is_none()) {
    o.fields.disk_segment =
        static_cast<uint32_t>(u64_of(attr_of(attr_of(disk.ptr(), a_segment).ptr(), a_id)));
    o.fields.disk_offset = u64_of(attr_of(disk.ptr(), a_offset));
  }
  return o;
}

void add_many(ObjectTable& t, const py::list& news, const py::dict& writers) {
  static const py::str a_key("key");
  const Py_ssize_t n = PyList_GET_SIZE(news.ptr());
  std::vector<std::string_view> keys(static_cast<size_t>(n));
  meta::NewKeys admitted(t);
  for (Py_ssize_t i = 0; i < n; ++i) {
    keys[i] = key_of(attr_of(PyList_GET_ITEM(news.ptr(), i), a_key).ptr());  // (the object keeps it)
    if (!admitted.admit(keys[i]))
      throw py::value_error("a key is in the table already, or twice in the batch");
  }
  std::vector<meta::NewObject> objects;
  objects.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i)
    objects.push_back(new_object(PyList_GET_ITEM(news.ptr(), i), keys[i], writers));
  meta::add_objects(t, objects);
}

// RestoreSegment's records (offset, slot, gen, key, size, checksum, pinned, replicas), with no Python object
// per record.
uint64_t adopt_many(ObjectTable& t, uint32_t segment, const py::list& records, uint32_t writer,
                    double last_access, uint8_t most_replicas) {
  const Py_ssize_t n = PyList_GET_SIZE(records.ptr());
  std::vector<meta::NamedBack> rows(static_cast<size_t>(n));
  meta::NewKeys admitted(t);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* r = PyList_GET_ITEM(records.ptr(), i);
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 8) throw py::type_error("a record is an 8-tuple");
    auto field = [r](Py_ssize_t f) {
      return u64_of(py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(r, f)));
    };
    meta::NamedBack& a = rows[i];
    a.offset = field(0);
    a.slot = static_cast<uint32_t>(field(1));
    a.gen = field(2);
    a.key = key_of(PyTuple_GET_ITEM(r, 3));
    a.size = field(4);
    a.checksum = field(5);
    a.pinned = PyTuple_GET_ITEM(r, 6) == Py_True;
    a.replicas = field(7);
    if (!admitted.admit(a.key)) throw py::value_error("a key is in the table already, or twice in the batch");
  }
  return meta::adopt(t, segment, rows, writer, last_access, most_replicas);
}

py::tuple drop_copies_on(ObjectTable& t, uint32_t segment, const py::list& keys, bool tell) {
  const meta::SegmentLoss loss = meta::drop_copies_on(t, segment, keys_of(keys), tell);
  py::list dropped;
  for (const meta::DroppedCopy& d : loss.dropped) {
    dropped.append(py::make_tuple(py::handle(PyList_GET_ITEM(keys.ptr(), d.index)), d.copy.offset,
                                  d.copy.slot, d.copy.gen));
  }
  return py::make_tuple(dropped, picked(keys, loss.bare), picked(keys, loss.disk_only));
}

// The rows of every key, or KeyError naming the first the table does not hold (all or nothing).
std::vector<meta::Row> rows_of_all(const ObjectTable& t, const std::vector<std::string_view>& keys) {
  meta::FoundRows found = meta::find_all(t, keys);
  if (found.missing != SIZE_MAX) throw py::key_error(std::string(keys[found.missing]));
  return std::move(found.rows);
}

// Commits, removals and the group index's calls.
void writes(py::class_<ObjectTable>& c) {
  c.def("add_many", &add_many, py::arg("news"), py::arg("writers"),
        "Adds new objects (NewObject: key, size, checksum, writer, complete, pinned, last_access, "
        "base_replicas, hold_seq, replicas, disk), `writers` numbering their writers; one crossing per put "
        "batch, all or nothing: every key is checked first.")
      .def("adopt_many", &adopt_many, py::arg("segment"), py::arg("records"), py::arg("writer"),
           py::arg("last_access"), py::arg("most_replicas"),
           "Adds the objects nodes named back on a segment (RestoreSegment's records), each committed with "
           "its "
           "one copy there; all or nothing. Returns their bytes.")
      .def(
          "commit_many",
          [](ObjectTable& t, const py::list& keys) {
            return meta::commit_rows(t, rows_of_all(t, keys_of(keys)));
          },
          py::arg("keys"), "Marks the objects committed; the bytes of those that were not yet.")
      .def(
          "erase_many",
          [](ObjectTable& t, const py::list& keys) { return meta::erase_keys(t, keys_of(keys)); },
          py::arg("keys"),
          "erase_key of each; the bytes they leave the stored total (absent keys count nothing).")
      .def(
          "drop_copies_on", &drop_copies_on, py::arg("segment"), py::arg("keys"), py::arg("tell"),
          "A segment is gone: the copies on it of these objects go. Returns (dropped, bare, disk only): with "
          "`tell`, per copy dropped (key, offset, slot, gen), else nothing; the keys left with no copy and "
          "no "
          "disk record; the keys left with no copy in memory but a disk record.")
      .def(
          "set_group_many",
          [](ObjectTable& t, const py::list& keys, uint8_t state) {
            meta::set_group_state(t, keys_of(keys), state);
          },
          py::arg("keys"), py::arg("state"),
          "Sets the group state (0: no member, 1: shown, 2: hidden) of those of the keys in the table.")
      .def(
          "lease_groups",
          [](ObjectTable& t, const py::list& keys, double until) {
            meta::lease_groups(t, keys_of(keys), until);
          },
          py::arg("keys"), py::arg("until"),
          "Raises to `until` the lease of every member of the groups these member keys belong to.");
}

// Reads and the eviction orders by batch.
void reads(py::class_<ObjectTable>& c) {
  c.def("locate_many", &locate_many, py::arg("keys"), py::arg("prefix"), py::arg("now"),
        py::arg("lease_until"), py::arg("half_life"), py::arg("hot_heat"), py::arg("places"),
        py::arg("transient"), py::arg("touch_order") = -1, py::arg("sample") = 1,
        "A reader's lookup of a batch (meta/locate.h): (reply, sampled, notes, hits) — the get_replicas "
        "reply, msgpack-encoded; the hit keys the eviction policy is told of (each hit linked in order "
        "`touch_order` is moved last there, and those whose CRC-32 is divisible by `sample` are named; no "
        "order: every hit, sample 1: all); (index, key, in memory, disk segment, attention) of the hits "
        "the caller must look at; how many keys were found. `places`: segment id -> (tier, host, engine, "
        "region).")
      .def(
          "use_many",
          [](ObjectTable& t, const py::list& keys, double now, double lease_until, double half_life,
             double hot_heat, bool count_access) {
            const meta::UseRule rule{now, lease_until, half_life, hot_heat, count_access};
            return meta::use_many(t, keys_of(keys), rule);
          },
          py::arg("keys"), py::arg("now"), py::arg("lease_until"), py::arg("half_life"), py::arg("hot_heat"),
          py::arg("count_access"),
          "A use of each key present and committed, under the read rule (meta/object_use.h; lease_until 0: "
          "no lease). Per key: 0 (absent, or a put in progress), else 1 (used) | 2 (replication's "
          "attention) | 4 (a memory copy) | 8 (a disk record).")
      .def(
          "complete_many",
          [](const ObjectTable& t, const py::list& keys) { return meta::visible_mask(t, keys_of(keys)); },
          py::arg("keys"), "Per key: stored, committed and shown (not a member of a group missing some).")
      .def(
          "with_hash",
          [](const ObjectTable&, const py::list& keys) {
            const std::vector<std::string_view> views = keys_of(keys);
            std::vector<uint32_t> members;
            for (size_t i = 0; i < views.size(); ++i) {
              if (meta::may_be_member(views[i])) members.push_back(static_cast<uint32_t>(i));
            }
            return picked(keys, members);
          },
          py::arg("keys"),
          "The keys (of these, in order) with a '#': the only ones that may be group members (the put "
          "path's check, with no Python step per key).")
      .def(
          "in_memory",
          [](const ObjectTable& t, const py::list& keys) {
            return picked(keys, meta::in_memory(t, keys_of(keys)));
          },
          py::arg("keys"), "The keys (of these, in order) of committed objects with a copy in memory.")
      .def(
          "short_of_copies",
          [](const ObjectTable& t, const py::list& keys) {
            return picked(keys, meta::short_of_copies(t, keys_of(keys)));
          },
          py::arg("keys"),
          "The keys (of these, in the table) with fewer memory copies than their put asked for.")
      .def(
          "first_present",
          [](const ObjectTable& t, const py::list& keys) { return meta::first_present(t, keys_of(keys)); },
          py::arg("keys"), "The index of the first key in the table (committed or not), else len(keys).")
      .def(
          "order_add_many",
          [](ObjectTable& t, int o, const py::list& keys, bool front) {
            const meta::Order order = order_of(o);
            meta::link_rows(t, order, rows_of_all(t, keys_of(keys)), front);
          },
          py::arg("order"), py::arg("keys"), py::arg("front"),
          "order_add of each key, in order (one crossing; all or nothing: every key is found first).")
      .def(
          "order_touch_many",
          [](ObjectTable& t, int o, const py::list& keys) {
            return meta::touch_all(t, order_of(o), keys_of(keys));
          },
          py::arg("order"), py::arg("keys"), "order_touch of each key, in order (one crossing).")
      .def(
          "order_remove_many",
          [](ObjectTable& t, int o, const py::list& keys) {
            return picked(keys, meta::unlink_keys(t, order_of(o), keys_of(keys)));
          },
          py::arg("order"), py::arg("keys"), "order_remove of each key; the keys that were linked.");
}

}  // namespace

void register_object_batches(py::class_<ObjectTable>& c) {
  writes(c);
  reads(c);
}

}  // namespace kvs::bind
