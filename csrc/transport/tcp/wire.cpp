#include "transport/tcp/wire.h"

#include "common/bytes.h"

namespace kvs::tcp {

bool carries_payload(Opcode opcode) {
  return opcode == Opcode::kHello || opcode == Opcode::kHelloAck || opcode == Opcode::kProof ||
         opcode == Opcode::kWrite || opcode == Opcode::kReadData;
}

namespace {

// The payload size of a handshake frame; 0 for the others.
uint64_t handshake_payload(Opcode opcode) {
  switch (opcode) {
    case Opcode::kHello: return kHelloPayload;
    case Opcode::kHelloAck: return kHelloAckPayload;
    case Opcode::kProof: return kProofPayload;
    default: return 0;
  }
}

}  // namespace

void encode_header(const FrameHeader& h, char out[kHeaderSize]) {
  ByteWriter w;
  w.put<uint32_t>(kMagic);
  w.put<uint8_t>(kVersion);
  w.put<uint8_t>(static_cast<uint8_t>(h.opcode));
  w.put<uint16_t>(0);  // flags, reserved
  w.put<int32_t>(h.status);
  w.put<uint32_t>(h.fence_slot);
  w.put<uint64_t>(h.request_id);
  w.put<uint64_t>(h.region_id);
  w.put<uint64_t>(h.key);
  w.put<uint64_t>(h.offset);
  w.put<uint64_t>(h.length);
  w.put<uint64_t>(h.fence_gen);
  std::memcpy(out, w.bytes().data(), kHeaderSize);
}

StatusOr<FrameHeader> decode_header(const char* data, size_t size, uint64_t max_payload) {
  if (size != kHeaderSize) return Status(Code::kProtocolError, "short frame header");
  ByteReader r(data, size);
  if (r.get<uint32_t>() != kMagic) return Status(Code::kProtocolError, "bad frame magic");
  if (r.get<uint8_t>() != kVersion) return Status(Code::kProtocolError, "unsupported protocol version");
  const auto opcode = r.get<uint8_t>();
  if (opcode < static_cast<uint8_t>(Opcode::kHello) || opcode > static_cast<uint8_t>(Opcode::kProofAck)) {
    return Status(Code::kProtocolError, "unknown opcode " + std::to_string(opcode));
  }
  if (r.get<uint16_t>() != 0) return Status(Code::kProtocolError, "unknown frame flags");
  FrameHeader h;
  h.opcode = static_cast<Opcode>(opcode);
  h.status = r.get<int32_t>();
  h.fence_slot = r.get<uint32_t>();
  h.request_id = r.get<uint64_t>();
  h.region_id = r.get<uint64_t>();
  h.key = r.get<uint64_t>();
  h.offset = r.get<uint64_t>();
  h.length = r.get<uint64_t>();
  h.fence_gen = r.get<uint64_t>();
  if (!r.ok()) return Status(Code::kProtocolError, "truncated frame header");
  if (h.opcode == Opcode::kRead && (h.length == 0 || h.length > max_payload)) {
    return Status(Code::kProtocolError, "read length out of range");
  }
  if (carries_payload(h.opcode) && h.length > max_payload) {
    return Status(Code::kProtocolError, "payload larger than the frame limit");
  }
  if (h.opcode == Opcode::kWrite && h.length == 0) return Status(Code::kProtocolError, "empty write");
  const uint64_t handshake = handshake_payload(h.opcode);
  if (handshake != 0 && h.length != handshake) {
    return Status(Code::kProtocolError, "handshake frame of the wrong size");
  }
  if (!carries_payload(h.opcode) && h.opcode != Opcode::kRead && h.length != 0) {
    return Status(Code::kProtocolError, "length on a frame without payload");
  }
  return h;
}

}  // namespace kvs::tcp
