// A disk file with its I/O queue: a batch crosses as four flat arrays; the I/O runs without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "bind/status_error.h"
#include "core/disk_file.h"
#include "core/io_queue.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

template <typename T>
using Flat = py::array_t<T, py::array::c_style | py::array::forcecast>;

struct Disk {
  // Shared with calls in flight: close() during a run leaves the file open until that run ends.
  std::shared_ptr<DiskFile> file;
  std::shared_ptr<IoQueue> queue;

  std::shared_ptr<DiskFile> open_file() const {
    if (!file) throw_if_error(Status(Code::kClosed, "disk file is closed"));
    return file;
  }
};

// Per request 0 or a status code; requests that break the file's bounds or alignment are not issued.
py::array_t<int32_t> run(Disk& d, const Flat<uint8_t>& ops, const Flat<uint64_t>& addrs,
                         const Flat<uint64_t>& offsets, const Flat<uint64_t>& lengths) {
  const std::shared_ptr<DiskFile> file = d.open_file();
  const std::shared_ptr<IoQueue> queue = d.queue;
  const DiskFile& f = *file;
  const py::ssize_t n = ops.size();
  if (addrs.size() != n || offsets.size() != n || lengths.size() != n) {
    throw_if_error(Status(Code::kInvalidArgument, "batch columns differ in length"));
  }
  py::array_t<int32_t> out(n);
  int32_t* codes = out.mutable_data();
  std::vector<IoRequest> batch;
  std::vector<py::ssize_t> index;
  for (py::ssize_t i = 0; i < n; ++i) {
    char* buffer = reinterpret_cast<char*>(addrs.data()[i]);
    Status st = ops.data()[i] > 1 ? Status(Code::kInvalidArgument, "op is 0 (read) or 1 (write)")
                                  : f.check(offsets.data()[i], lengths.data()[i], buffer, ops.data()[i] == 1);
    codes[i] = static_cast<int32_t>(st.code());
    if (!st.ok()) continue;
    batch.push_back(IoRequest{ops.data()[i] == 1, f.fd(), offsets.data()[i], buffer, lengths.data()[i]});
    index.push_back(i);
  }
  std::vector<Status> results;
  {
    py::gil_scoped_release release;
    queue->run(batch, results);
  }
  for (size_t j = 0; j < results.size(); ++j) codes[index[j]] = static_cast<int32_t>(results[j].code());
  return out;
}

// One request; raises with the whole message on failure.
void run_one(Disk& d, bool write, uint64_t addr, uint64_t offset, uint64_t length) {
  const std::shared_ptr<DiskFile> file = d.open_file();
  const std::shared_ptr<IoQueue> queue = d.queue;
  char* buffer = reinterpret_cast<char*>(addr);
  throw_if_error(file->check(offset, length, buffer, write));
  std::vector<Status> results;
  {
    py::gil_scoped_release release;
    queue->run({IoRequest{write, file->fd(), offset, buffer, length}}, results);
  }
  throw_if_error(results[0]);
}

}  // namespace

void bind_disk(py::module_& m) {
  py::class_<Disk>(m, "DiskFile", "A file or block device for direct I/O, with its I/O queue.")
      .def(py::init([](const std::string& path, uint64_t size, const std::string& backend, unsigned depth,
                       bool read_only) {
             auto queue = make_io_queue(backend, depth);
             throw_if_error(queue.status());
             auto file = DiskFile::open(path, size, read_only);
             throw_if_error(file.status());
             return Disk{std::move(file.value()), std::move(queue.value())};
           }),
           py::arg("path"), py::arg("size"), py::arg("backend") = "auto", py::arg("depth") = 32,
           py::arg("read_only") = false)
      .def_property_readonly("path", [](Disk& d) { return d.open_file()->path(); })
      .def_property_readonly("size", [](Disk& d) { return d.open_file()->size(); })
      .def_property_readonly("alignment", [](Disk& d) { return d.open_file()->alignment(); })
      .def_property_readonly("block_device", [](Disk& d) { return d.open_file()->block_device(); })
      .def_property_readonly("backend", [](Disk& d) { return std::string(d.queue->name()); })
      .def_property_readonly("read_only", [](Disk& d) { return d.open_file()->read_only(); })
      .def("run", &run, py::arg("ops"), py::arg("addrs"), py::arg("offsets"), py::arg("lengths"))
      .def("run_one", &run_one, py::arg("write"), py::arg("addr"), py::arg("offset"), py::arg("length"))
      .def("close", [](Disk& d) { d.file.reset(); });
}

}  // namespace kvs::bind
