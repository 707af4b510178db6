#include <pybind11/pybind11.h>

#include "bind/status_error.h"
#include "tools/baseline.h"
#include "tools/ucx_baseline.h"

namespace py = pybind11;

namespace kvs::tools {
using bind::throw_if_error;
using bind::value_or_throw;
namespace {

py::dict to_dict(const bench::Throughput& t) {
  py::dict d;
  d["bytes"] = t.bytes;
  d["seconds"] = t.seconds;
  d["gbps"] = t.seconds > 0 ? static_cast<double>(t.bytes) / t.seconds / 1e9 : 0.0;
  return d;
}

}  // namespace

void bind_baseline(py::module_& m) {
  m.def(
      "memcpy_baseline",
      [](uint64_t block_size, uint64_t working_set, double duration_s, int threads) {
        StatusOr<bench::Throughput> r = Status();
        {
          py::gil_scoped_release release;
          r = bench::memcpy_baseline(block_size, working_set, duration_s, threads);
        }
        return to_dict(value_or_throw(std::move(r)));
      },
      py::arg("block_size"), py::arg("working_set"), py::arg("duration_s"), py::arg("threads") = 1,
      "memcpy bandwidth over a working set; returns {bytes, seconds, gbps}.");
  m.def(
      "tcp_stream_baseline",
      [](const std::string& host, int connections, uint64_t block_size, uint64_t working_set,
         double duration_s, int socket_buffer) {
        StatusOr<bench::Throughput> r = Status();
        {
          py::gil_scoped_release release;
          r = bench::tcp_stream_baseline(host.c_str(), connections, block_size, working_set, duration_s,
                                         socket_buffer);
        }
        return to_dict(value_or_throw(std::move(r)));
      },
      py::arg("host"), py::arg("connections"), py::arg("block_size"), py::arg("working_set"),
      py::arg("duration_s"), py::arg("socket_buffer") = 4 << 20,
      "Raw socket stream over loopback cycling a working set on each side; returns {bytes, seconds, gbps}.");
  m.def(
      "ucx_rma_baseline",
      [](bool write, uint64_t block_size, int batch, uint64_t working_set, double duration_s,
         py::bytes target) {
        const std::string blob = target;
        StatusOr<bench::Throughput> r = Status();
        {
          py::gil_scoped_release release;
          r = bench::ucx_rma_baseline(write, block_size, batch, working_set, duration_s, blob);
        }
        return to_dict(value_or_throw(std::move(r)));
      },
      py::arg("write"), py::arg("block_size"), py::arg("batch"), py::arg("working_set"),
      py::arg("duration_s"), py::arg("target") = py::bytes(),
      "A raw UCP get (or put + flush) loop over a working set, to the target ucx_rma_serve runs in another "
      "process (its blob), or to a second worker of this process (no blob); returns {bytes, seconds, gbps}.");
  m.def(
      "ucx_rma_serve",
      [](uint64_t working_set, int out_fd, int in_fd) {
        Status st;
        {
          py::gil_scoped_release release;
          st = bench::ucx_rma_serve(working_set, out_fd, in_fd);
        }
        throw_if_error(st);
      },
      py::arg("working_set"), py::arg("out_fd"), py::arg("in_fd"),
      "The raw UCP loop's target: maps working_set bytes, writes its blob (u32 length + bytes) to out_fd, "
      "serves until in_fd reads end of file.");
}

}  // namespace kvs::tools
