// kvstore._meta.ObjectTable: the master's object table (csrc/meta/object_table.h). An object is named by a
// reference, (incarnation << 32) | row, checked on every call: a stale one raises LookupError instead of
// reaching the object that reuses its row. Batch entry points take a list of keys and cross once.
#include "bind/meta_object_table.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "meta/msgpack_writer.h"
#include "meta/object_table.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

using meta::MemoryCopy;
using meta::Object;
using meta::ObjectTable;
using meta::Order;
using meta::Row;

using Ref = uint64_t;

Ref ref_of(const ObjectTable& t, Row row) {
  return (static_cast<Ref>(t.incarnation(row)) << 32) | row;
}

Row row_of(const ObjectTable& t, Ref ref) {
  const Row row = static_cast<Row>(ref & 0xFFFFFFFFu);
  if (!t.alive(row, static_cast<uint32_t>(ref >> 32))) throw py::key_error("stale object reference");
  return row;
}

Order order_of(int o) {
  if (o != 0 && o != 1) throw std::invalid_argument("order is 0 (memory eviction) or 1 (disk eviction)");
  return static_cast<Order>(o);
}

template <typename T>
void field(py::class_<ObjectTable>& c, const std::string& name, T Object::* member) {
  c.def(
      name.c_str(), [member](const ObjectTable& t, Ref ref) { return t.at(row_of(t, ref)).*member; },
      py::arg("ref"));
  c.def(("set_" + name).c_str(),
        [member](ObjectTable& t, Ref ref, T value) { t.at(row_of(t, ref)).*member = value; }, py::arg("ref"),
        py::arg("value"));
}

// A key of a list passed in: a str, read as its UTF-8 (cached in the str for ASCII keys).
std::string_view key_of(PyObject* item) {
  if (!PyUnicode_Check(item)) throw py::type_error("keys must be str");
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(item, &size);
  if (data == nullptr) throw py::error_already_set();
  return {data, static_cast<size_t>(size)};
}

// An attribute of an object the master made (NewObject, Replica), as a new reference.
py::object attr_of(PyObject* obj, const py::str& name) {
  PyObject* value = PyObject_GetAttr(obj, name.ptr());
  if (value == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(value);
}

uint64_t u64_of(const py::object& value) {
  const unsigned long long v = PyLong_AsUnsignedLongLong(value.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

// The keys (of `keys`, in order) found in the table whose row passes `test` (which may change it).
template <typename Test>
py::list keys_where(const ObjectTable& t, const py::list& keys, Test test) {
  py::list out;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.ptr()); ++i) {
    PyObject* key = PyList_GET_ITEM(keys.ptr(), i);
    const Row row = t.find(key_of(key));
    if (row != meta::kNoRow && test(row)) out.append(py::handle(key));
  }
  return out;
}

py::object ref_or_none(const ObjectTable& t, Row row) {
  return row == meta::kNoRow ? py::none() : py::object(py::int_(ref_of(t, row)));
}

// Readers see it: committed, and not a member of a group missing some member.
bool visible(const Object& o) {
  return o.complete && o.group != meta::kHidden;
}

// The group part of a member key `<group>#<i>of<n>` (kvstore.blocks.member_key: the master marks only keys
// of that form as members) and n; n is 0 for a key of another form.
std::pair<std::string_view, uint32_t> group_of(std::string_view key) {
  const size_t hash = key.rfind('#');
  const size_t of = hash == std::string_view::npos ? hash : key.find("of", hash);
  if (of == std::string_view::npos || of + 2 >= key.size()) return {{}, 0};
  uint32_t n = 0;
  for (const char ch : key.substr(of + 2)) {
    if (ch < '0' || ch > '9' || n > 1024) return {{}, 0};
    n = n * 10 + static_cast<uint32_t>(ch - '0');
  }
  return {key.substr(0, hash), n};
}

// Raises the lease of every member of `key`'s group in the table to `until` (a lease on one member holds
// them all: eviction and removal take a group whole).
void lease_group(ObjectTable& t, std::string_view key, double until) {
  const auto [group, n] = group_of(key);
  std::string name(group);
  name += '#';
  const size_t base = name.size();
  const std::string tail = "of" + std::to_string(n);
  for (uint32_t i = 0; i < n; ++i) {
    name.resize(base);
    name += std::to_string(i);
    name += tail;
    const Row row = t.find(name);
    if (row != meta::kNoRow && t.at(row).lease_until < until) t.at(row).lease_until = until;
  }
}

}  // namespace

void register_object_table(py::module_& m) {
  py::class_<ObjectTable> c(m, "ObjectTable",
                            "The master's object table: rows of metadata by key, and the eviction order and "
                            "puts in progress linked through them.");
  c.def(py::init<uint64_t>(), py::arg("seed") = 0)
      .def("__len__", &ObjectTable::size)
      .def(
          "find", [](const ObjectTable& t, std::string_view key) { return ref_or_none(t, t.find(key)); },
          py::arg("key"), "The object's reference, or None.")
      .def(
          "insert", [](ObjectTable& t, std::string_view key) { return ref_or_none(t, t.insert(key)); },
          py::arg("key"), "A new object's reference, or None when the key is present.")
      .def(
          "add",
          [](ObjectTable& t, std::string_view key, uint64_t size, uint64_t checksum, uint32_t writer,
             bool complete, bool pinned, double last_access, uint8_t base_replicas, uint64_t hold_seq,
             const std::vector<std::tuple<uint32_t, uint64_t, uint32_t, uint64_t>>& copies,
             uint32_t disk_segment, uint64_t disk_offset) -> py::object {
            // A new object with its fields and copies, in one crossing (the put path adds one per item).
            const Row row = t.insert(key);
            if (row == meta::kNoRow) return py::none();
            Object& o = t.at(row);
            o.size = size;
            o.checksum = checksum;
            o.writer = writer;
            o.complete = complete;
            o.pinned = pinned;
            o.last_access = last_access;
            o.base_replicas = base_replicas;
            o.hold_seq = hold_seq;
            o.disk_segment = disk_segment;
            o.disk_offset = disk_offset;
            for (const auto& [segment, offset, slot, gen] : copies)
              t.add_copy(row, MemoryCopy{segment, slot, offset, gen});
            return py::int_(ref_of(t, row));
          },
          py::arg("key"), py::arg("size"), py::arg("checksum"), py::arg("writer"), py::arg("complete"),
          py::arg("pinned"), py::arg("last_access"), py::arg("base_replicas"), py::arg("hold_seq"),
          py::arg("copies"), py::arg("disk_segment"), py::arg("disk_offset"),
          "A new object's reference, or None when the key is present.")
      .def(
          "erase", [](ObjectTable& t, Ref ref) { t.erase(row_of(t, ref)); }, py::arg("ref"))
      .def(
          "alive",
          [](const ObjectTable& t, Ref ref) {
            return t.alive(static_cast<Row>(ref & 0xFFFFFFFFu), static_cast<uint32_t>(ref >> 32));
          },
          py::arg("ref"))
      .def(
          "key", [](const ObjectTable& t, Ref ref) { return py::str(std::string(t.key(row_of(t, ref)))); },
          py::arg("ref"))
      .def(
          "copies",
          [](const ObjectTable& t, Ref ref) {
            const Row row = row_of(t, ref);
            std::vector<std::tuple<uint32_t, uint64_t, uint32_t, uint64_t>> out;
            out.reserve(t.copy_count(row));
            for (size_t i = 0; i < t.copy_count(row); ++i) {
              const MemoryCopy& c = t.copy(row, i);
              out.emplace_back(c.segment, c.offset, c.slot, c.gen);
            }
            return out;
          },
          py::arg("ref"), "(segment, offset, slot, gen) of each memory copy, in the order they were added.")
      .def(
          "copy_count", [](const ObjectTable& t, Ref ref) { return t.copy_count(row_of(t, ref)); },
          py::arg("ref"))
      .def(
          "add_copy",
          [](ObjectTable& t, Ref ref, uint32_t segment, uint64_t offset, uint32_t slot, uint64_t gen) {
            t.add_copy(row_of(t, ref), MemoryCopy{segment, slot, offset, gen});
          },
          py::arg("ref"), py::arg("segment"), py::arg("offset"), py::arg("slot"), py::arg("gen"))
      .def(
          "drop_copy",
          [](ObjectTable& t, Ref ref, uint32_t segment, uint64_t offset, uint32_t slot, uint64_t gen) {
            return t.drop_copy(row_of(t, ref), MemoryCopy{segment, slot, offset, gen});
          },
          py::arg("ref"), py::arg("segment"), py::arg("offset"), py::arg("slot"), py::arg("gen"))
      .def(
          "drop_copies_on",
          [](ObjectTable& t, uint32_t segment, const py::list& keys, bool tell) {
            // A segment is gone: the copies on it of these objects go. Returns (dropped, bare, disk only):
            // with `tell`, per copy dropped (key, offset, slot, gen), else nothing; the keys left with no
            // copy and no disk record; the keys left with no copy in memory but a disk record.
            py::list dropped, bare, disk_only;
            std::vector<MemoryCopy> on_it;
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.ptr()); ++i) {
              PyObject* key = PyList_GET_ITEM(keys.ptr(), i);
              const Row row = t.find(key_of(key));
              if (row == meta::kNoRow) continue;
              on_it.clear();
              for (size_t c = 0; c < t.copy_count(row); ++c) {
                if (t.copy(row, c).segment == segment) on_it.push_back(t.copy(row, c));
              }
              if (on_it.empty()) continue;
              const py::handle k(key);
              for (const MemoryCopy& c : on_it) {
                t.drop_copy(row, c);
                if (tell) dropped.append(py::make_tuple(k, c.offset, c.slot, c.gen));
              }
              if (t.copy_count(row) == 0) (t.at(row).disk_segment == 0 ? bare : disk_only).append(k);
            }
            return py::make_tuple(dropped, bare, disk_only);
          },
          py::arg("segment"), py::arg("keys"), py::arg("tell"))
      .def(
          "clear_copies", [](ObjectTable& t, Ref ref) { t.clear_copies(row_of(t, ref)); }, py::arg("ref"))
      .def(
          "linked",
          [](const ObjectTable& t, int o, Ref ref) { return t.linked(order_of(o), row_of(t, ref)); },
          py::arg("order"), py::arg("ref"))
      .def(
          "push_back", [](ObjectTable& t, int o, Ref ref) { t.push_back(order_of(o), row_of(t, ref)); },
          py::arg("order"), py::arg("ref"))
      .def(
          "push_front", [](ObjectTable& t, int o, Ref ref) { t.push_front(order_of(o), row_of(t, ref)); },
          py::arg("order"), py::arg("ref"))
      .def(
          "unlink", [](ObjectTable& t, int o, Ref ref) { t.unlink(order_of(o), row_of(t, ref)); },
          py::arg("order"), py::arg("ref"))
      .def(
          "length", [](const ObjectTable& t, int o) { return t.length(order_of(o)); }, py::arg("order"))
      // The same by key, one crossing each (an eviction policy's calls: kvstore.master.objects.TableOrder).
      .def(
          "order_add",
          [](ObjectTable& t, int o, std::string_view key, bool front) {
            const Row row = t.find(key);
            if (row == meta::kNoRow) throw py::key_error(std::string(key));
            front ? t.push_front(order_of(o), row) : t.push_back(order_of(o), row);
          },
          py::arg("order"), py::arg("key"), py::arg("front"),
          "Links the object first or last (moved if linked).")
      .def(
          "order_add_many",
          [](ObjectTable& t, int o, const py::list& keys, bool front) {
            const Order order = order_of(o);
            const Py_ssize_t n = PyList_GET_SIZE(keys.ptr());
            std::vector<Row> rows(static_cast<size_t>(n));
            for (Py_ssize_t i = 0; i < n; ++i) {  // all or nothing: every key is found first
              const std::string_view key = key_of(PyList_GET_ITEM(keys.ptr(), i));
              rows[i] = t.find(key);
              if (rows[i] == meta::kNoRow) throw py::key_error(std::string(key));
            }
            for (Row row : rows) front ? t.push_front(order, row) : t.push_back(order, row);
          },
          py::arg("order"), py::arg("keys"), py::arg("front"),
          "order_add of each key, in order (one crossing).")
      .def(
          "order_touch",
          [](ObjectTable& t, int o, std::string_view key) {
            const Row row = t.find(key);
            if (row == meta::kNoRow || !t.linked(order_of(o), row)) return false;
            t.push_back(order_of(o), row);
            return true;
          },
          py::arg("order"), py::arg("key"), "Moves a linked object last; False if not linked.")
      .def(
          "order_touch_many",
          [](ObjectTable& t, int o, const py::list& keys) {
            const Order order = order_of(o);
            std::vector<bool> out(static_cast<size_t>(PyList_GET_SIZE(keys.ptr())));
            for (size_t i = 0; i < static_cast<size_t>(PyList_GET_SIZE(keys.ptr())); ++i) {
              const Row row = t.find(key_of(PyList_GET_ITEM(keys.ptr(), i)));
              out[i] = row != meta::kNoRow && t.linked(order, row);
              if (out[i]) t.push_back(order, row);
            }
            return out;
          },
          py::arg("order"), py::arg("keys"), "order_touch of each key, in order (one crossing).")
      .def(
          "order_remove",
          [](ObjectTable& t, int o, std::string_view key) {
            const Row row = t.find(key);
            if (row == meta::kNoRow || !t.linked(order_of(o), row)) return false;
            t.unlink(order_of(o), row);
            return true;
          },
          py::arg("order"), py::arg("key"), "Unlinks the object; False if it was not linked.")
      .def(
          "order_remove_many",
          [](ObjectTable& t, int o, const py::list& keys) {
            const Order order = order_of(o);
            return keys_where(t, keys, [&t, order](Row row) {
              if (!t.linked(order, row)) return false;
              t.unlink(order, row);
              return true;
            });
          },
          py::arg("order"), py::arg("keys"), "order_remove of each key; the keys that were linked.")
      .def(
          "order_has",
          [](const ObjectTable& t, int o, std::string_view key) {
            const Row row = t.find(key);
            return row != meta::kNoRow && t.linked(order_of(o), row);
          },
          py::arg("order"), py::arg("key"))
      .def(
          "first", [](const ObjectTable& t, int o) { return ref_or_none(t, t.first(order_of(o))); },
          py::arg("order"))
      .def(
          "next",
          [](const ObjectTable& t, int o, Ref ref) {
            return ref_or_none(t, t.next(order_of(o), row_of(t, ref)));
          },
          py::arg("order"), py::arg("ref"))
      .def(
          "walk",
          [](const ObjectTable& t, int o, py::object after, size_t limit) {
            // Up to `limit` keys in order, from the one after `after` (None: from the first): one crossing
            // per slice of the order, so a caller that stops early pays only for what it read.
            const Order order = order_of(o);
            Row row = after.is_none() ? t.first(order) : t.next(order, row_of(t, after.cast<Ref>()));
            py::list out;
            for (; row != meta::kNoRow && static_cast<size_t>(py::len(out)) < limit;
                 row = t.next(order, row)) {
              out.append(py::make_tuple(std::string(t.key(row)), ref_of(t, row)));
            }
            return out;
          },
          py::arg("order"), py::arg("after"), py::arg("limit"),
          "[(key, reference)] of up to `limit` objects in the order, after `after` (None: from the first).")
      .def(
          "scan",
          [](const ObjectTable& t, Row start, size_t limit) {
            // Every object, a slice at a time (rows in table order): ([(key, reference)], next start;
            // None once done). For rare whole-table jobs (remove_all); nothing periodic calls it.
            py::list out;
            Row row = start;
            for (; row < t.row_limit() && static_cast<size_t>(py::len(out)) < limit; ++row) {
              if (t.live(row)) out.append(py::make_tuple(std::string(t.key(row)), ref_of(t, row)));
            }
            return py::make_tuple(out, row < t.row_limit() ? py::object(py::int_(row)) : py::none());
          },
          py::arg("start"), py::arg("limit"))
      .def(
          "keys_on",
          [](const ObjectTable& t, uint32_t segment, bool disk) {
            // The keys with a memory copy (or, with `disk`, their record) on the segment: a walk of the
            // whole table, for a segment's unmounting (rare; nothing periodic calls it).
            std::vector<std::string> out;
            for (Row row = 0; row < t.row_limit(); ++row) {
              if (!t.live(row)) continue;
              bool on = false;
              if (disk) {
                on = t.at(row).disk_segment == segment;
              } else {
                for (size_t c = 0; c < t.copy_count(row) && !on; ++c) on = t.copy(row, c).segment == segment;
              }
              if (on) out.emplace_back(t.key(row));
            }
            return out;
          },
          py::arg("segment"), py::arg("disk"))
      .def(
          "victim_state",
          [](const ObjectTable& t, std::string_view key, double now, bool disk_backed) {
            // Whether the object may be evicted: 0 no (absent, a put in progress, pinned; with
            // `disk_backed`, without a disk record or a memory copy), 1 yes, 2 yes but a reader holds
            // it until its lease ends (one crossing per candidate of kvstore.master.victims).
            const Row row = t.find(key);
            if (row == meta::kNoRow) return 0;
            const Object& o = t.at(row);
            if (!o.complete || o.pinned) return 0;
            if (disk_backed && (o.disk_segment == 0 || t.copy_count(row) == 0)) return 0;
            return o.lease_until <= now ? 1 : 2;
          },
          py::arg("key"), py::arg("now"), py::arg("disk_backed"))
      .def(
          "first_victim",
          [](const ObjectTable& t, int o, double now) {
            // The first object of the order that may be evicted (committed, not pinned) and no reader
            // holds, and the first such one a reader holds: (key or None, key or None). Walks the order in
            // C++ (the victim is usually first; what is put, pinned or leased is stepped over).
            py::object free = py::none(), held = py::none();
            for (Row row = t.first(order_of(o)); row != meta::kNoRow; row = t.next(order_of(o), row)) {
              const Object& obj = t.at(row);
              if (!obj.complete || obj.pinned) continue;
              if (obj.lease_until <= now) {
                free = py::str(std::string(t.key(row)));
                break;
              }
              if (held.is_none()) held = py::str(std::string(t.key(row)));
            }
            return py::make_tuple(free, held);
          },
          py::arg("order"), py::arg("now"))
      .def(
          "erase_key",
          [](ObjectTable& t, std::string_view key) -> int64_t {
            // Forgets the object; the bytes it leaves the stored total (its size if committed, else 0),
            // or -1 when there is none.
            const Row row = t.find(key);
            if (row == meta::kNoRow) return -1;
            const Object& o = t.at(row);
            const int64_t freed = o.complete ? static_cast<int64_t>(o.size) : 0;
            t.erase(row);
            return freed;
          },
          py::arg("key"))
      .def(
          "erase_many",
          [](ObjectTable& t, const py::list& keys) {
            // erase_key of each; the bytes they leave the stored total (absent keys count nothing).
            uint64_t freed = 0;
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.ptr()); ++i) {
              const Row row = t.find(key_of(PyList_GET_ITEM(keys.ptr(), i)));
              if (row == meta::kNoRow) continue;
              if (t.at(row).complete) freed += t.at(row).size;
              t.erase(row);
            }
            return freed;
          },
          py::arg("keys"))
      .def(
          "commit_many",
          [](ObjectTable& t, const py::list& keys) {
            // All or nothing: every key is checked before any is marked.
            std::vector<Row> rows(static_cast<size_t>(PyList_GET_SIZE(keys.ptr())));
            for (size_t i = 0; i < static_cast<size_t>(PyList_GET_SIZE(keys.ptr())); ++i) {
              rows[i] = t.find(key_of(PyList_GET_ITEM(keys.ptr(), i)));
              if (rows[i] == meta::kNoRow)
                throw py::key_error(std::string(key_of(PyList_GET_ITEM(keys.ptr(), i))));
            }
            uint64_t added = 0;
            for (Row row : rows) {
              Object& o = t.at(row);
              if (!o.complete) added += o.size;
              o.complete = true;
            }
            return added;
          },
          py::arg("keys"), "Marks the objects committed; the bytes of those that were not yet.")
      .def(
          "locate_many",
          [](ObjectTable& t, const py::list& keys, bool prefix, double now, double lease_until,
             double half_life, double hot_heat, const py::dict& places, bool transient) {
            // A reader's lookup of a batch. Each hit is a use: its lease reaches at least `lease_until`, its
            // heat (decayed with `half_life`) grows by one. Returns (reply, hits, notes):
            // A member of a group missing some member is a miss; a hit on a member leases its whole group.
            //  - reply: the get_replicas reply, msgpack-encoded: per key nil (a miss; with `prefix`, every
            //    key after the first miss too; also a hit with no copy in memory, which the caller fills)
            //    or [size, checksum, [[tier, host, engine, region, offset, slot, gen, ""], ...]], each copy's
            //    first four fields from `places` (segment id -> (tier, host, engine, region));
            //  - hits: the keys found, in order;
            //  - notes: (index, key, in memory, disk segment, attention) of the hits the caller must look
            //    at: with no copy in memory, on a disk (every one in memory too when `transient`), or
            //    needing replication's attention (as hot as `hot_heat`, below its replicas, or with a count
            //    set by change_replica).
            if (!(half_life > 0)) throw std::invalid_argument("half_life must be positive");
            // Segment id -> its copies' first fields, encoded once per call for the segments the batch
            // meets (`places` names every segment ever mounted: hundreds in a fleet).
            std::unordered_map<uint32_t, std::string> where_of;
            auto where = [&where_of, &places](uint32_t segment) -> const std::string& {
              auto it = where_of.find(segment);
              if (it != where_of.end()) return it->second;
              PyObject* place = PyDict_GetItem(places.ptr(), py::int_(segment).ptr());  // borrowed
              if (place == nullptr || !PyTuple_Check(place) || PyTuple_GET_SIZE(place) != 4)
                throw std::logic_error("a copy's segment has no place (tier, host, engine, region)");
              const auto p = py::reinterpret_borrow<py::tuple>(place);
              meta::MsgpackWriter w;
              w.uint(p[0].cast<uint64_t>());
              w.str(p[1].cast<std::string_view>());
              w.str(p[2].cast<std::string_view>());
              w.uint(p[3].cast<uint64_t>());
              return where_of.emplace(segment, w.data()).first->second;
            };
            const size_t n = static_cast<size_t>(PyList_GET_SIZE(keys.ptr()));
            meta::MsgpackWriter reply;
            reply.reserve(n * 64);
            reply.array(static_cast<uint32_t>(n));
            py::list hits, notes;
            std::unordered_set<std::string_view> leased_groups;  // (a batch often reads a group whole)
            size_t i = 0;
            for (; i < n; ++i) {
              PyObject* key = PyList_GET_ITEM(keys.ptr(), i);
              const std::string_view name = key_of(key);
              const Row row = t.find(name);
              if (row == meta::kNoRow || !visible(t.at(row))) {
                reply.nil();
                if (prefix) break;
                continue;
              }
              if (t.at(row).group == meta::kShown && leased_groups.insert(group_of(name).first).second)
                lease_group(t, name, lease_until);
              Object& o = t.at(row);
              if (o.lease_until < lease_until) o.lease_until = lease_until;
              o.last_access = now;
              ++o.access_count;
              const double idle = now > o.heat_time ? now - o.heat_time : 0.0;
              o.heat = o.heat * std::exp2(-idle / half_life) + 1.0;
              o.heat_time = now;
              hits.append(py::handle(key));
              const size_t copies = t.copy_count(row);
              if (copies == 0) {
                reply.nil();
              } else {
                reply.array(3);
                reply.uint(o.size);
                reply.uint(o.checksum);
                reply.array(static_cast<uint32_t>(copies));
                for (size_t c = 0; c < copies; ++c) {
                  const MemoryCopy& m = t.copy(row, c);
                  reply.array(8);
                  reply.raw(where(m.segment));
                  reply.uint(m.offset);
                  reply.uint(m.slot);
                  reply.uint(m.gen);
                  reply.str("");  // a memory copy is read through its engine: no path
                }
              }
              const bool attention = o.heat >= hot_heat || copies < o.base_replicas || o.target_replicas != 0;
              if (attention || copies == 0 || o.disk_segment != 0 || transient) {
                notes.append(py::make_tuple(i, py::handle(key), copies > 0, o.disk_segment, attention));
              }
            }
            for (++i; i < n; ++i) reply.nil();  // after a prefix's first miss
            return py::make_tuple(py::bytes(reply.data()), hits, notes);
          },
          py::arg("keys"), py::arg("prefix"), py::arg("now"), py::arg("lease_until"), py::arg("half_life"),
          py::arg("hot_heat"), py::arg("places"), py::arg("transient"))
      .def(
          "complete_many",
          [](const ObjectTable& t, const py::list& keys) {
            // Straight off the list (pybind's conversion to a vector of views cost more than the lookups).
            const Py_ssize_t n = PyList_GET_SIZE(keys.ptr());
            py::list out(n);
            for (Py_ssize_t i = 0; i < n; ++i) {
              const Row row = t.find(key_of(PyList_GET_ITEM(keys.ptr(), i)));
              PyList_SET_ITEM(out.ptr(), i,
                              py::bool_(row != meta::kNoRow && visible(t.at(row))).release().ptr());
            }
            return out;
          },
          py::arg("keys"), "Per key: stored, committed and shown (not a member of a group missing some).")
      .def(
          "with_hash",
          [](const ObjectTable&, const py::list& keys) {
            py::list out;
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.ptr()); ++i) {
              PyObject* key = PyList_GET_ITEM(keys.ptr(), i);
              if (key_of(key).find('#') != std::string_view::npos) out.append(py::handle(key));
            }
            return out;
          },
          py::arg("keys"),
          "The keys (of these, in order) with a '#': the only ones that may be group members (the put "
          "path's check, with no Python step per key).")
      .def(
          "set_group_many",
          [](ObjectTable& t, const py::list& keys, uint8_t state) {
            if (state > meta::kHidden) throw std::invalid_argument("group state is 0, 1 or 2");
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.ptr()); ++i) {
              const Row row = t.find(key_of(PyList_GET_ITEM(keys.ptr(), i)));
              if (row != meta::kNoRow) t.at(row).group = state;
            }
          },
          py::arg("keys"), py::arg("state"),
          "Sets the group state (0: no member, 1: shown, 2: hidden) of those of the keys in the table.")
      .def(
          "lease_groups",
          [](ObjectTable& t, const py::list& keys, double until) {
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.ptr()); ++i) {
              const std::string_view key = key_of(PyList_GET_ITEM(keys.ptr(), i));
              const Row row = t.find(key);
              if (row != meta::kNoRow && t.at(row).group != meta::kNotMember) lease_group(t, key, until);
            }
          },
          py::arg("keys"), py::arg("until"),
          "Raises to `until` the lease of every member of the groups these member keys belong to.")
      .def(
          "in_memory",
          [](const ObjectTable& t, const py::list& keys) {
            return keys_where(t, keys, [&t](Row row) { return t.at(row).complete && t.copy_count(row) > 0; });
          },
          py::arg("keys"), "The keys (of these, in order) of committed objects with a copy in memory.")
      .def(
          "short_of_copies",
          [](const ObjectTable& t, const py::list& keys) {
            return keys_where(t, keys, [&t](Row row) { return t.copy_count(row) < t.at(row).base_replicas; });
          },
          py::arg("keys"),
          "The keys (of these, in the table) with fewer memory copies than their put asked for.")
      .def(
          "add_many",
          [](ObjectTable& t, const py::list& news, const py::dict& writers) {
            // NewObjects (kvstore.master.objects) read in C++: one crossing per put batch. All or nothing:
            // every key is checked first.
            const py::str a_key("key"), a_size("size"), a_checksum("checksum"), a_writer("writer"),
                a_complete("complete"), a_pinned("pinned"), a_last("last_access"), a_base("base_replicas"),
                a_hold("hold_seq"), a_replicas("replicas"), a_disk("disk"), a_segment("segment"), a_id("id"),
                a_offset("offset"), a_slot("slot"), a_gen("gen");
            const Py_ssize_t n = PyList_GET_SIZE(news.ptr());
            std::vector<std::string_view> keys(static_cast<size_t>(n));
            std::unordered_set<std::string_view> seen;
            for (Py_ssize_t i = 0; i < n; ++i) {
              keys[i] =
                  key_of(attr_of(PyList_GET_ITEM(news.ptr(), i), a_key).ptr());  // (the object keeps it)
              if (t.find(keys[i]) != meta::kNoRow || !seen.insert(keys[i]).second)
                throw py::value_error("a key is in the table already, or twice in the batch");
            }
            for (Py_ssize_t i = 0; i < n; ++i) {
              PyObject* obj = PyList_GET_ITEM(news.ptr(), i);
              PyObject* writer = PyDict_GetItem(writers.ptr(), attr_of(obj, a_writer).ptr());  // borrowed
              if (writer == nullptr) throw py::key_error("a writer without a number");
              const Row row = t.insert(keys[i]);
              Object& o = t.at(row);
              o.size = u64_of(attr_of(obj, a_size));
              o.checksum = u64_of(attr_of(obj, a_checksum));
              o.writer = static_cast<uint32_t>(u64_of(py::reinterpret_borrow<py::object>(writer)));
              o.complete = attr_of(obj, a_complete).ptr() == Py_True;
              o.pinned = attr_of(obj, a_pinned).ptr() == Py_True;
              o.last_access = PyFloat_AsDouble(attr_of(obj, a_last).ptr());
              o.base_replicas = static_cast<uint8_t>(u64_of(attr_of(obj, a_base)));
              o.hold_seq = u64_of(attr_of(obj, a_hold));
              const py::object replicas = attr_of(obj, a_replicas);
              if (!PyList_Check(replicas.ptr())) throw py::type_error("replicas must be a list");
              for (Py_ssize_t c = 0; c < PyList_GET_SIZE(replicas.ptr()); ++c) {
                PyObject* r = PyList_GET_ITEM(replicas.ptr(), c);
                t.add_copy(
                    row, MemoryCopy{static_cast<uint32_t>(u64_of(attr_of(attr_of(r, a_segment).ptr(), a_id))),
                                    static_cast<uint32_t>(u64_of(attr_of(r, a_slot))),
                                    u64_of(attr_of(r, a_offset)), u64_of(attr_of(r, a_gen))});
              }
              const py::object disk = attr_of(obj, a_disk);
              if (!disk.is_none()) {
                o.disk_segment =
                    static_cast<uint32_t>(u64_of(attr_of(attr_of(disk.ptr(), a_segment).ptr(), a_id)));
                o.disk_offset = u64_of(attr_of(disk.ptr(), a_offset));
              }
            }
          },
          py::arg("news"), py::arg("writers"),
          "Adds new objects (NewObject: key, size, checksum, writer, complete, pinned, last_access, "
          "base_replicas, hold_seq, replicas, disk), `writers` numbering their writers.")
      .def(
          "adopt_many",
          [](ObjectTable& t, uint32_t segment, const py::list& records, uint32_t writer, double last_access,
             uint8_t most_replicas) {
            // Objects a node named back (RestoreSegment's records: offset, slot, gen, key, size, checksum,
            // pinned, replicas), each committed with its one copy on `segment`; no Python object per
            // record. All or nothing: every record is read and every key checked first. Returns their bytes.
            struct Adopted {
              std::string_view key;
              uint64_t offset, gen, size, checksum;
              uint32_t slot;
              bool pinned;
              uint8_t base;
            };
            const Py_ssize_t n = PyList_GET_SIZE(records.ptr());
            std::vector<Adopted> rows(static_cast<size_t>(n));
            std::unordered_set<std::string_view> seen;
            for (Py_ssize_t i = 0; i < n; ++i) {
              PyObject* r = PyList_GET_ITEM(records.ptr(), i);
              if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 8)
                throw py::type_error("a record is an 8-tuple");
              auto field = [r](Py_ssize_t f) {
                return py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(r, f));
              };
              Adopted& a = rows[i];
              a.offset = u64_of(field(0));
              a.slot = static_cast<uint32_t>(u64_of(field(1)));
              a.gen = u64_of(field(2));
              a.key = key_of(PyTuple_GET_ITEM(r, 3));
              a.size = u64_of(field(4));
              a.checksum = u64_of(field(5));
              a.pinned = PyTuple_GET_ITEM(r, 6) == Py_True;
              a.base = static_cast<uint8_t>(std::min<uint64_t>(u64_of(field(7)), most_replicas));
              if (t.find(a.key) != meta::kNoRow || !seen.insert(a.key).second)
                throw py::value_error("a key is in the table already, or twice in the batch");
            }
            uint64_t added = 0;
            for (const Adopted& a : rows) {
              const Row row = t.insert(a.key);
              Object& o = t.at(row);
              o.size = a.size;
              o.checksum = a.checksum;
              o.writer = writer;
              o.complete = true;
              o.pinned = a.pinned;
              o.last_access = last_access;
              o.base_replicas = a.base;
              t.add_copy(row, MemoryCopy{segment, a.slot, a.offset, a.gen});
              added += a.size;
            }
            return added;
          },
          py::arg("segment"), py::arg("records"), py::arg("writer"), py::arg("last_access"),
          py::arg("most_replicas"), "Adds the objects nodes named back on a segment; returns their bytes.")
      .def(
          "first_present",
          [](const ObjectTable& t, const py::list& keys) {
            const Py_ssize_t n = PyList_GET_SIZE(keys.ptr());
            for (Py_ssize_t i = 0; i < n; ++i) {
              if (t.find(key_of(PyList_GET_ITEM(keys.ptr(), i))) != meta::kNoRow) return i;
            }
            return n;
          },
          py::arg("keys"), "The index of the first key in the table (committed or not), else len(keys).")
      .def_property_readonly("memory_bytes", &ObjectTable::memory_bytes);
  field(c, "size", &Object::size);
  field(c, "checksum", &Object::checksum);
  field(c, "hold_seq", &Object::hold_seq);
  field(c, "lease_until", &Object::lease_until);
  field(c, "last_access", &Object::last_access);
  field(c, "heat", &Object::heat);
  field(c, "heat_time", &Object::heat_time);
  field(c, "loaded_at", &Object::loaded_at);
  field(c, "disk_offset", &Object::disk_offset);
  field(c, "disk_segment", &Object::disk_segment);
  field(c, "writer", &Object::writer);
  field(c, "access_count", &Object::access_count);
  field(c, "base_replicas", &Object::base_replicas);
  field(c, "target_replicas", &Object::target_replicas);
  field(c, "complete", &Object::complete);
  field(c, "pinned", &Object::pinned);
  field(c, "group", &Object::group);
}

}  // namespace kvs::bind
