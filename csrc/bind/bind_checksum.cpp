// Checksums of local memory pieces: one crossing per batch, hashed without the interpreter lock.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "bind/status_error.h"
#include "common/xxh3.h"
#include "common/xxh3_copy.h"

namespace py = pybind11;

namespace kvs::bind {

void bind_checksum(py::module_& m) {
  m.def(
      "xxh3_load", [](const std::string& library) { throw_if_error(xxh3::load(library)); },
      py::arg("library"),
      "Loads XXH3 from a shared object exporting its streaming API (the xxhash package's extension).");
  m.def("xxh3_loaded", &xxh3::loaded);
  m.def("xxh3_fused", &xxh3::fused_enabled,
        "Whether memory copies hash as they copy (AVX2, and the library's digests reproduced at load).");
  m.def(
      "xxh3_pieces",
      [](const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& addrs,
         const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& lengths,
         const py::array_t<uint64_t, py::array::c_style | py::array::forcecast>& counts) {
        if (!xxh3::loaded()) throw_if_error(Status(Code::kNotSupported, "XXH3 is not loaded"));
        if (addrs.ndim() != 1 || lengths.ndim() != 1 || counts.ndim() != 1 ||
            addrs.size() != lengths.size()) {
          throw_if_error(Status(Code::kInvalidArgument, "addrs and lengths must be flat and of one length"));
        }
        uint64_t total = 0;
        for (py::ssize_t i = 0; i < counts.size(); ++i) total += counts.data()[i];
        if (total != static_cast<uint64_t>(addrs.size())) {
          throw_if_error(Status(Code::kInvalidArgument, "piece counts do not add up to the pieces given"));
        }
        py::array_t<uint64_t> out(counts.size());
        uint64_t* digests = out.mutable_data();
        const uint64_t* a = addrs.data();
        const uint64_t* n = lengths.data();
        const uint64_t* c = counts.data();
        const size_t values = static_cast<size_t>(counts.size());
        {
          py::gil_scoped_release release;
          xxh3::hash_values(a, n, c, values, digests);
        }
        return out;
      },
      py::arg("addrs"), py::arg("lengths"), py::arg("counts"),
      "Per value, XXH3-64 of its pieces' bytes in order: value v has counts[v] consecutive (addr, length) "
      "pieces. The caller vouches that the memory is mapped and stays so during the call.");
}

}  // namespace kvs::bind
