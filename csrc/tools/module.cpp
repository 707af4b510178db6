// transfer_engine._tools: what benches and tests need besides the data plane: the machine's baselines
// (memcpy, raw TCP stream) and the peer-input decoders exposed for fuzzing.
#include <pybind11/pybind11.h>

#include "bind/status_error.h"

namespace py = pybind11;

namespace kvs::tools {
void bind_baseline(py::module_& m);
void bind_wire(py::module_& m);
}  // namespace kvs::tools

PYBIND11_MODULE(_tools, m) {
  m.doc() = "kvstore bench and test tools: machine baselines and wire decoders";
  kvs::bind::register_status_translator();
  kvs::tools::bind_baseline(m);
  kvs::tools::bind_wire(m);
}
