// Decoders exposed for tests and fuzzing: the exact code the servers run on peer input.
#include <pybind11/pybind11.h>

#include "bind/status_error.h"
#include "common/hmac.h"
#include "core/descriptor.h"
#include "transport/tcp/wire.h"

namespace py = pybind11;

namespace kvs::tools {
using bind::value_or_throw;

void bind_wire(py::module_& m) {
  m.attr("FRAME_HEADER_SIZE") = tcp::kHeaderSize;
  m.def(
      "hmac_sha256",
      [](py::bytes key, py::bytes message) {
        const Digest d = hmac_sha256(std::string(key), std::string(message));
        return py::bytes(reinterpret_cast<const char*>(d.data()), d.size());
      },
      py::arg("key"), py::arg("message"), "The engines' HMAC-SHA256 (common/hmac.h), for tests.");
  m.def(
      "decode_frame_header",
      [](py::bytes data, uint64_t max_payload) {
        const std::string_view view = data;
        auto h = value_or_throw(tcp::decode_header(view.data(), view.size(), max_payload));
        py::dict d;
        d["opcode"] = static_cast<int>(h.opcode);
        d["status"] = h.status;
        d["request_id"] = h.request_id;
        d["region_id"] = h.region_id;
        d["key"] = h.key;
        d["offset"] = h.offset;
        d["length"] = h.length;
        d["fence_slot"] = h.fence_slot;
        d["fence_gen"] = h.fence_gen;
        return d;
      },
      py::arg("data"), py::arg("max_payload") = 64ull << 20,
      "Decodes one frame header; ProtocolError if malformed.");
  m.def(
      "encode_frame_header",
      [](int opcode, int32_t status, uint64_t request_id, uint64_t region_id, uint64_t key, uint64_t offset,
         uint64_t length, uint32_t fence_slot, uint64_t fence_gen) {
        tcp::FrameHeader h;
        h.opcode = static_cast<tcp::Opcode>(opcode);
        h.status = status;
        h.request_id = request_id;
        h.region_id = region_id;
        h.key = key;
        h.offset = offset;
        h.length = length;
        h.fence_slot = fence_slot;
        h.fence_gen = fence_gen;
        char raw[tcp::kHeaderSize];
        tcp::encode_header(h, raw);
        return py::bytes(raw, tcp::kHeaderSize);
      },
      py::arg("opcode"), py::arg("status") = 0, py::arg("request_id") = 0, py::arg("region_id") = 0,
      py::arg("key") = 0, py::arg("offset") = 0, py::arg("length") = 0, py::arg("fence_slot") = 0,
      py::arg("fence_gen") = 0, "Encodes one frame header.");
  m.def(
      "decode_descriptor",
      [](py::bytes data) {
        const std::string_view view = data;
        auto d = value_or_throw(decode_descriptor(view.data(), view.size()));
        return py::make_tuple(d.name, d.engine_id, d.regions.size());
      },
      py::arg("data"),
      "Decodes an engine descriptor; ProtocolError if malformed. Returns (name, id, regions).");
}

}  // namespace kvs::tools
