// What the run-time-loaded CUDA driver can do here (nothing CUDA is linked).
#include <pybind11/pybind11.h>

#include "bind/status_error.h"
#include "cuda/driver.h"

namespace py = pybind11;

namespace kvs::bind {

void bind_cuda(py::module_& m) {
  m.def(
      "cuda_require", [] { throw_if_error(cuda::available()); },
      "Raises NotSupportedError saying why unless a CUDA driver and a GPU are usable here.");
  m.def("cuda_device_count", &cuda::device_count);
}

}  // namespace kvs::bind
