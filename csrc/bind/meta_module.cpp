// kvstore._meta: metadata-side C++ (the offset allocator the master runs per segment, the master's object
// table). It links none of the data plane.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "bind/meta_hash_order.h"
#include "bind/meta_hold_book.h"
#include "bind/meta_locations_reply.h"
#include "bind/meta_memory_space.h"
#include "bind/meta_object_table.h"
#include "bind/meta_put_reply.h"
#include "bind/status_error.h"
#include "meta/offset_allocator.h"

namespace py = pybind11;

PYBIND11_MODULE(_meta, m) {
  m.doc() =
      "kvstore metadata helpers: the segment offset allocator, the master's object table and memory space";
  kvs::bind::register_status_translator();
  using kvs::AllocatorStats;
  using kvs::OffsetAllocator;
  py::class_<OffsetAllocator, std::shared_ptr<OffsetAllocator>>(
      m, "OffsetAllocator", "Best-fit allocator of offsets inside a segment.")
      .def(py::init<uint64_t, uint64_t>(), py::arg("capacity"), py::arg("alignment") = 64)
      .def(
          "allocate",
          [](OffsetAllocator& a, uint64_t size) -> py::object {
            auto offset = a.allocate(size);
            if (!offset) return py::none();
            return py::int_(*offset);
          },
          py::arg("size"), "Offset of a new block, or None when it does not fit.")
      .def(
          "allocate_many",
          [](OffsetAllocator& a,
             const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& sizes) {
            // One crossing for a whole batch; -1 marks a block that did not fit.
            py::array_t<int64_t> out(sizes.size());
            auto w = out.mutable_unchecked<1>();
            for (py::ssize_t i = 0; i < sizes.size(); ++i) {
              auto offset = a.allocate(sizes.data()[i]);
              w(i) = offset ? static_cast<int64_t>(*offset) : -1;
            }
            return out;
          },
          py::arg("sizes"))
      .def(
          "reserve_many",
          [](OffsetAllocator& a, const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& sizes) {
            // One crossing for a batch of blocks a node names back, in order (a later one may overlap an
            // earlier one: refused, as it would be alone).
            if (offsets.size() != sizes.size()) throw py::value_error("one size per offset");
            std::vector<bool> out(offsets.size());
            for (size_t i = 0; i < offsets.size(); ++i) out[i] = a.reserve(offsets[i], sizes[i]);
            return out;
          },
          py::arg("offsets"), py::arg("sizes"),
          "reserve of each block in turn; per block whether it was taken.")
      .def("reserve", &OffsetAllocator::reserve, py::arg("offset"), py::arg("size"),
           "Takes exactly [offset, offset+size) if free (rebuilding a segment's map); False otherwise.")
      .def("free", &OffsetAllocator::free, py::arg("offset"), "Frees a block; False if none starts there.")
      .def("block_size", &OffsetAllocator::block_size, py::arg("offset"))
      .def_property_readonly("capacity", &OffsetAllocator::capacity)
      .def_property_readonly("alignment", &OffsetAllocator::alignment)
      .def_property_readonly("largest_free", &OffsetAllocator::largest_free)
      .def_property_readonly("used", [](const OffsetAllocator& a) { return a.stats().used; })
      .def("stats", [](const OffsetAllocator& a) {
        const AllocatorStats s = a.stats();
        py::dict d;
        d["capacity"] = s.capacity;
        d["used"] = s.used;
        d["free"] = s.free;
        d["largest_free"] = s.largest_free;
        d["allocations"] = s.allocations;
        d["free_extents"] = s.free_extents;
        d["fragmentation"] = s.fragmentation();
        return d;
      });
  m.def(
      "plain_keys",
      [](const py::list& values, Py_ssize_t max_bytes) {
        // One pass over the objects, nothing made: the check of every keyed request's keys (the msgpack
        // decoder's strs are exact and ready, their ASCII flag set when they are).
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values.ptr()); ++i) {
          PyObject* v = PyList_GET_ITEM(values.ptr(), i);
          if (!PyUnicode_CheckExact(v)) return false;
          if (PyUnicode_READY(v) != 0) throw py::error_already_set();
          const Py_ssize_t length = PyUnicode_GET_LENGTH(v);
          if (!PyUnicode_IS_ASCII(v) || length < 1 || length > max_bytes) return false;
        }
        return true;
      },
      py::arg("values"), py::arg("max_bytes"),
      "Whether every value is a str (not a subclass) of 1..max_bytes ASCII characters.");
  kvs::bind::register_object_table(m);
  kvs::bind::register_hash_order(m);
  kvs::bind::register_memory_space(m);
  kvs::bind::register_put_reply(m);
  kvs::bind::register_hold_book(m);
  kvs::bind::register_locations_reply(m);
}
