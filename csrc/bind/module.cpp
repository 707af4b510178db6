#include <pybind11/pybind11.h>

#include "bind/status_error.h"

namespace py = pybind11;

namespace kvs::bind {
void bind_engine(py::module_& m);
void bind_wire(py::module_& m);
void bind_baseline(py::module_& m);
void bind_storage(py::module_& m);
}  // namespace kvs::bind

PYBIND11_MODULE(_core, m) {
  m.doc() = "kvstore C++ core: transfer engine, transports and baselines";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kvs::bind::StatusError& e) {
      py::object make = py::module_::import("transfer_engine.errors").attr("error_for_code");
      py::object exc = make(static_cast<int>(e.code()), e.what());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });
  for (int c = 0; c <= static_cast<int>(kvs::Code::kInternal); ++c) {
    m.attr(("CODE_" + std::string(kvs::code_name(static_cast<kvs::Code>(c)))).c_str()) = c;
  }
  kvs::bind::bind_engine(m);
  kvs::bind::bind_wire(m);
  kvs::bind::bind_baseline(m);
  kvs::bind::bind_storage(m);
}
