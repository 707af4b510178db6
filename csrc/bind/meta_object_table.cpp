// kvstore._meta.ObjectTable: the master's object table (csrc/meta/object_table.h). An object is named by a
// reference (meta/object_refs.h), checked on every call: a stale one raises LookupError instead of reaching
// the object that reuses its row. This file binds the table and its single objects; the calls over a batch
// of keys are in meta_object_batches.cpp.
#include "bind/meta_object_table.h"

#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

#include "meta/object_batches.h"
#include "meta/object_orders.h"
#include "meta/object_queries.h"
#include "meta/object_refs.h"
#include "meta/object_use.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

using meta::MemoryCopy;
using meta::Object;
using meta::ObjectTable;
using meta::order_of;
using meta::Ref;
using meta::Row;
using CopyTuple = std::tuple<uint32_t, uint64_t, uint32_t, uint64_t>;  // (segment, offset, slot, gen)

Row checked_row(const ObjectTable& t, Ref ref) {
  const Row row = meta::row_of(t, ref);
  if (row == meta::kNoRow) throw py::key_error("stale object reference");
  return row;
}

py::object ref_or_none(const ObjectTable& t, Row row) {
  return row == meta::kNoRow ? py::none() : py::object(py::int_(meta::ref_of(t, row)));
}

py::object key_or_none(const ObjectTable& t, Row row) {
  return row == meta::kNoRow ? py::none() : py::object(py::str(std::string(t.key(row))));
}

// [(key, reference)] of the rows.
py::list keyed_refs(const ObjectTable& t, const std::vector<Row>& rows) {
  py::list out;
  for (const Row row : rows) out.append(py::make_tuple(std::string(t.key(row)), meta::ref_of(t, row)));
  return out;
}

MemoryCopy copy_of(uint32_t segment, uint64_t offset, uint32_t slot, uint64_t gen) {
  return MemoryCopy{segment, slot, offset, gen};
}

template <typename T>
void field(py::class_<ObjectTable>& c, const std::string& name, T Object::* member) {
  c.def(
      name.c_str(), [member](const ObjectTable& t, Ref ref) { return t.at(checked_row(t, ref)).*member; },
      py::arg("ref"));
  c.def(("set_" + name).c_str(),
        [member](ObjectTable& t, Ref ref, T value) { t.at(checked_row(t, ref)).*member = value; },
        py::arg("ref"), py::arg("value"));
}

void fields(py::class_<ObjectTable>& c) {
  c.def(
      "heat_at",
      [](const ObjectTable& t, Ref ref, double now, double half_life) {
        return meta::heat_at(t, checked_row(t, ref), now, half_life);
      },
      py::arg("ref"), py::arg("now"), py::arg("half_life"),
      "The object's heat decayed to `now` (meta/object_use.h: the heat replication plans by).");
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

py::object add(ObjectTable& t, std::string_view key, uint64_t size, uint64_t checksum, uint32_t writer,
               bool complete, bool pinned, double last_access, uint8_t base_replicas, uint64_t hold_seq,
               const std::vector<CopyTuple>& copies, uint32_t disk_segment, uint64_t disk_offset) {
  meta::NewObject o{key, {}, {}};
  o.fields.size = size;
  o.fields.checksum = checksum;
  o.fields.writer = writer;
  o.fields.complete = complete;
  o.fields.pinned = pinned;
  o.fields.last_access = last_access;
  o.fields.base_replicas = base_replicas;
  o.fields.hold_seq = hold_seq;
  o.fields.disk_segment = disk_segment;
  o.fields.disk_offset = disk_offset;
  for (const auto& [segment, offset, slot, gen] : copies)
    o.copies.push_back(copy_of(segment, offset, slot, gen));
  return ref_or_none(t, meta::add_object(t, o));
}

std::vector<CopyTuple> copies(const ObjectTable& t, Ref ref) {
  const Row row = checked_row(t, ref);
  std::vector<CopyTuple> out;
  out.reserve(t.copy_count(row));
  for (size_t i = 0; i < t.copy_count(row); ++i) {
    const MemoryCopy& c = t.copy(row, i);
    out.emplace_back(c.segment, c.offset, c.slot, c.gen);
  }
  return out;
}

// The keys and links of single objects, by reference.
void rows(py::class_<ObjectTable>& c) {
  c.def(py::init<uint64_t>(), py::arg("seed") = 0)
      .def("__len__", &ObjectTable::size)
      .def(
          "find", [](const ObjectTable& t, std::string_view key) { return ref_or_none(t, t.find(key)); },
          py::arg("key"), "The object's reference, or None.")
      .def(
          "insert", [](ObjectTable& t, std::string_view key) { return ref_or_none(t, t.insert(key)); },
          py::arg("key"), "A new object's reference, or None when the key is present.")
      .def("add", &add, py::arg("key"), py::arg("size"), py::arg("checksum"), py::arg("writer"),
           py::arg("complete"), py::arg("pinned"), py::arg("last_access"), py::arg("base_replicas"),
           py::arg("hold_seq"), py::arg("copies"), py::arg("disk_segment"), py::arg("disk_offset"),
           "A new object's reference, or None when the key is present.")
      .def(
          "erase", [](ObjectTable& t, Ref ref) { t.erase(checked_row(t, ref)); }, py::arg("ref"))
      .def(
          "alive", [](const ObjectTable& t, Ref ref) { return meta::ref_alive(t, ref); }, py::arg("ref"))
      .def(
          "key",
          [](const ObjectTable& t, Ref ref) { return py::str(std::string(t.key(checked_row(t, ref)))); },
          py::arg("ref"))
      .def("copies", &copies, py::arg("ref"),
           "(segment, offset, slot, gen) of each memory copy, in the order they were added.")
      .def(
          "copy_count", [](const ObjectTable& t, Ref ref) { return t.copy_count(checked_row(t, ref)); },
          py::arg("ref"))
      .def(
          "add_copy",
          [](ObjectTable& t, Ref ref, uint32_t segment, uint64_t offset, uint32_t slot, uint64_t gen) {
            t.add_copy(checked_row(t, ref), copy_of(segment, offset, slot, gen));
          },
          py::arg("ref"), py::arg("segment"), py::arg("offset"), py::arg("slot"), py::arg("gen"))
      .def(
          "drop_copy",
          [](ObjectTable& t, Ref ref, uint32_t segment, uint64_t offset, uint32_t slot, uint64_t gen) {
            return t.drop_copy(checked_row(t, ref), copy_of(segment, offset, slot, gen));
          },
          py::arg("ref"), py::arg("segment"), py::arg("offset"), py::arg("slot"), py::arg("gen"))
      .def(
          "clear_copies", [](ObjectTable& t, Ref ref) { t.clear_copies(checked_row(t, ref)); },
          py::arg("ref"))
      .def(
          "erase_key", [](ObjectTable& t, std::string_view key) { return meta::erase_key(t, key); },
          py::arg("key"),
          "Forgets the object; the bytes it leaves the stored total (its size if committed, else 0), or -1 "
          "when there is none.")
      .def_property_readonly("memory_bytes", &ObjectTable::memory_bytes);
}

// The eviction orders: by reference, by key (an eviction policy's calls: kvstore.master.objects.TableOrder),
// and the walks over them.
void orders(py::class_<ObjectTable>& c) {
  c.def(
       "linked",
       [](const ObjectTable& t, int o, Ref ref) { return t.linked(order_of(o), checked_row(t, ref)); },
       py::arg("order"), py::arg("ref"))
      .def(
          "push_back", [](ObjectTable& t, int o, Ref ref) { t.push_back(order_of(o), checked_row(t, ref)); },
          py::arg("order"), py::arg("ref"))
      .def(
          "push_front",
          [](ObjectTable& t, int o, Ref ref) { t.push_front(order_of(o), checked_row(t, ref)); },
          py::arg("order"), py::arg("ref"))
      .def(
          "unlink", [](ObjectTable& t, int o, Ref ref) { t.unlink(order_of(o), checked_row(t, ref)); },
          py::arg("order"), py::arg("ref"))
      .def(
          "length", [](const ObjectTable& t, int o) { return t.length(order_of(o)); }, py::arg("order"))
      .def(
          "order_add",
          [](ObjectTable& t, int o, std::string_view key, bool front) {
            const Row row = t.find(key);
            if (row == meta::kNoRow) throw py::key_error(std::string(key));
            meta::link_rows(t, order_of(o), {row}, front);
          },
          py::arg("order"), py::arg("key"), py::arg("front"),
          "Links the object first or last (moved if linked).")
      .def(
          "order_touch",
          [](ObjectTable& t, int o, std::string_view key) { return meta::touch(t, order_of(o), key); },
          py::arg("order"), py::arg("key"), "Moves a linked object last; False if not linked.")
      .def(
          "order_remove",
          [](ObjectTable& t, int o, std::string_view key) { return meta::unlink_key(t, order_of(o), key); },
          py::arg("order"), py::arg("key"), "Unlinks the object; False if it was not linked.")
      .def(
          "order_has",
          [](const ObjectTable& t, int o, std::string_view key) {
            return meta::linked_key(t, order_of(o), key);
          },
          py::arg("order"), py::arg("key"))
      .def(
          "first", [](const ObjectTable& t, int o) { return ref_or_none(t, t.first(order_of(o))); },
          py::arg("order"))
      .def(
          "next",
          [](const ObjectTable& t, int o, Ref ref) {
            return ref_or_none(t, t.next(order_of(o), checked_row(t, ref)));
          },
          py::arg("order"), py::arg("ref"))
      .def(
          "walk",
          [](const ObjectTable& t, int o, py::object after, size_t limit) {
            const Row from = after.is_none() ? meta::kNoRow : checked_row(t, after.cast<Ref>());
            return keyed_refs(t, meta::walk(t, order_of(o), from, limit));
          },
          py::arg("order"), py::arg("after"), py::arg("limit"),
          "[(key, reference)] of up to `limit` objects in the order, after `after` (None: from the first): "
          "one crossing per slice of the order, so a caller that stops early pays only for what it read.")
      .def(
          "first_victim",
          [](const ObjectTable& t, int o, double now) {
            const meta::FirstVictims v = meta::first_victims(t, order_of(o), now);
            return py::make_tuple(key_or_none(t, v.free), key_or_none(t, v.held));
          },
          py::arg("order"), py::arg("now"),
          "The first object of the order that may be evicted (committed, not pinned) and no reader holds, "
          "and the first such one a reader holds: (key or None, key or None).");
}

// Whole-table walks and eviction's questions.
void queries(py::class_<ObjectTable>& c) {
  c.def(
       "scan",
       [](const ObjectTable& t, Row start, size_t limit) {
         Row next = meta::kNoRow;
         py::list out = keyed_refs(t, meta::scan(t, start, limit, &next));
         return py::make_tuple(out, next == meta::kNoRow ? py::none() : py::object(py::int_(next)));
       },
       py::arg("start"), py::arg("limit"),
       "Every object, a slice at a time (rows in table order): ([(key, reference)], next start; None once "
       "done). For rare whole-table jobs (remove_all); nothing periodic calls it.")
      .def(
          "keys_on",
          [](const ObjectTable& t, uint32_t segment, bool disk) {
            std::vector<std::string> out;
            for (const Row row : meta::rows_on(t, segment, disk)) out.emplace_back(t.key(row));
            return out;
          },
          py::arg("segment"), py::arg("disk"),
          "The keys with a memory copy (or, with `disk`, their record) on the segment: a walk of the whole "
          "table, for a segment's unmounting (rare; nothing periodic calls it).")
      .def(
          "victim_state",
          [](const ObjectTable& t, std::string_view key, double now, bool disk_backed) {
            return static_cast<int>(meta::victim_state(t, key, now, disk_backed));
          },
          py::arg("key"), py::arg("now"), py::arg("disk_backed"),
          "Whether the object may be evicted: 0 no (absent, a put in progress, pinned; with `disk_backed`, "
          "without a disk record or a memory copy), 1 yes, 2 yes but a reader holds it until its lease "
          "ends.");
}

}  // namespace

void register_object_table(py::module_& m) {
  py::class_<ObjectTable> c(m, "ObjectTable",
                            "The master's object table: rows of metadata by key, and the eviction order and "
                            "puts in progress linked through them.");
  rows(c);
  orders(c);
  queries(c);
  register_object_batches(c);
  register_puts(c);
  fields(c);
}

}  // namespace kvs::bind
