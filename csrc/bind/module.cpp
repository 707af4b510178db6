// transfer_engine._core: the data plane (registry, engine, transports). Metadata helpers (the offset
// allocator) and the benches' baselines are separate extensions, so neither pulls in the other.
#include <pybind11/pybind11.h>

#include "bind/status_error.h"

namespace py = pybind11;

namespace kvs::bind {
void bind_engine(py::module_& m);
void bind_transports(py::module_& m);
void bind_checksum(py::module_& m);
void bind_buffers(py::module_& m);
void bind_disk(py::module_& m);
void bind_cuda(py::module_& m);
void bind_topology(py::module_& m);
}  // namespace kvs::bind

PYBIND11_MODULE(_core, m) {
  m.doc() = "kvstore C++ core: transfer engine and transports";
  kvs::bind::register_status_translator();
  for (int c = 0; c <= static_cast<int>(kvs::Code::kInternal); ++c) {
    m.attr(("CODE_" + std::string(kvs::code_name(static_cast<kvs::Code>(c)))).c_str()) = c;
  }
  kvs::bind::bind_engine(m);
  kvs::bind::bind_transports(m);
  kvs::bind::bind_checksum(m);
  kvs::bind::bind_buffers(m);
  kvs::bind::bind_disk(m);
  kvs::bind::bind_cuda(m);
  kvs::bind::bind_topology(m);
}
