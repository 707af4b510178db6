// What the run-time-loaded CUDA driver can do here (nothing CUDA is linked): one crossing per batch of
// copies, made without the interpreter lock.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <vector>

#include "bind/status_error.h"
#include "cuda/driver.h"

namespace py = pybind11;

namespace kvs::bind {

using U64Array = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;

void bind_cuda(py::module_& m) {
  m.def(
      "cuda_require", [] { throw_if_error(cuda::available()); },
      "Raises NotSupportedError saying why unless a CUDA driver and a GPU are usable here.");
  m.def("cuda_device_count", &cuda::device_count);
  m.def(
      "cuda_device_range",
      [](uint64_t ptr) {
        auto range = cuda::device_range(ptr);
        throw_if_error(range.status());
        return py::make_tuple(range.value().base, range.value().length, range.value().device);
      },
      py::arg("ptr"), "(base, length, device) of the device allocation holding ptr.");
  m.def(
      "cuda_alloc",
      [](int device, uint64_t length) {
        auto ptr = cuda::device_alloc(device, length);
        throw_if_error(ptr.status());
        return ptr.value();
      },
      py::arg("device"), py::arg("length"));
  m.def(
      "cuda_free", [](int device, uint64_t ptr) { throw_if_error(cuda::device_free(device, ptr)); },
      py::arg("device"), py::arg("ptr"));
  m.def(
      "cuda_synchronize",
      [](int device, uint64_t stream) {
        Status st;
        {
          py::gil_scoped_release release;
          st = cuda::synchronize(device, stream);
        }
        throw_if_error(st);
      },
      py::arg("device"), py::arg("stream"));
  m.def(
      "cuda_copy",
      [](int device, const U64Array& dsts, const U64Array& srcs, const U64Array& lengths) {
        if (dsts.ndim() != 1 || srcs.ndim() != 1 || lengths.ndim() != 1 || dsts.size() != srcs.size() ||
            dsts.size() != lengths.size()) {
          throw_if_error(Status(Code::kInvalidArgument, "copy columns must be flat and of one length"));
        }
        std::vector<cuda::Copy> copies(static_cast<size_t>(lengths.size()));
        for (size_t i = 0; i < copies.size(); ++i) {
          copies[i] = {dsts.data()[i], srcs.data()[i], lengths.data()[i]};
        }
        Status st;
        {
          py::gil_scoped_release release;
          st = cuda::copy(device, copies.data(), copies.size());
        }
        throw_if_error(st);
      },
      py::arg("device"), py::arg("dsts"), py::arg("srcs"), py::arg("lengths"),
      "Copies each (dst, src, length) between any memory the driver addresses (device, host), all queued "
      "on one stream of the GPU, then waits once. The caller vouches for every range (transfer_engine.cuda "
      "checks them).");
}

}  // namespace kvs::bind
