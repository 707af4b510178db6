// Where Python buffers' bytes are: one crossing for a batch of them (a Python step per buffer cost more
// than the rest of a small-object batch).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>

#include "common/range_lookup.h"

namespace py = pybind11;

namespace kvs::bind {

namespace {

using U64Array = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;
using I64Array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// range_tags (common/range_lookup.h) over numpy columns: an array of tags, or None.
py::object range_tags(const I64Array& starts, const I64Array& ends, const I64Array& tags,
                      const U64Array& addrs, const U64Array& lengths) {
  const auto ranges = static_cast<size_t>(starts.size());
  const auto n = static_cast<size_t>(addrs.size());
  if (static_cast<size_t>(ends.size()) != ranges || static_cast<size_t>(tags.size()) != ranges ||
      static_cast<size_t>(lengths.size()) != n) {
    throw py::value_error("range_tags: columns differ in length");
  }
  py::array_t<int64_t> out(static_cast<py::ssize_t>(n));
  bool all_inside = false;
  {
    py::gil_scoped_release unlocked;
    all_inside = kvs::range_tags(starts.data(), ends.data(), tags.data(), ranges, addrs.data(),
                                 lengths.data(), n, out.mutable_data());
  }
  if (!all_inside) return py::none();
  return std::move(out);
}

}  // namespace

void bind_buffers(py::module_& m) {
  m.def(
      "range_tags", &range_tags, py::arg("starts"), py::arg("ends"), py::arg("tags"), py::arg("addrs"),
      py::arg("lengths"),
      "Per piece (addrs[i], lengths[i]) the tag of the range [starts[k], ends[k]) holding it whole, or None "
      "when a piece is empty or outside every range. `starts` ascending, the ranges disjoint.");
  m.def(
      "buffer_spans",
      [](const py::sequence& objects, bool writable) -> py::object {
        const auto n = static_cast<size_t>(py::len(objects));
        py::list addrs(n);
        py::list lengths(n);
        const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
        for (size_t i = 0; i < n; ++i) {
          py::object obj = objects[i];
          Py_buffer view;
          if (PyObject_GetBuffer(obj.ptr(), &view, flags) != 0) {
            PyErr_Clear();
            return py::none();  // (not contiguous host memory, or read-only: the caller's slow path says why)
          }
          const auto addr = reinterpret_cast<uintptr_t>(view.buf);
          const auto length = static_cast<uint64_t>(view.len);
          PyBuffer_Release(&view);
          addrs[i] = py::int_(static_cast<uint64_t>(addr));
          lengths[i] = py::int_(length);
        }
        return py::make_tuple(addrs, lengths);
      },
      py::arg("objects"), py::arg("writable"),
      "(addresses, lengths) of objects that export C-contiguous memory through the buffer protocol "
      "(writable memory when `writable`), or None when one does not. The addresses are valid while the "
      "objects live and are not resized.");
}

}  // namespace kvs::bind
