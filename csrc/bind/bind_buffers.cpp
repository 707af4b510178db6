// Where Python buffers' bytes are: one crossing for a batch of them (a Python step per buffer cost more
// than the rest of a small-object batch).
#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace kvs::bind {

void bind_buffers(py::module_& m) {
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
