// The TCP transport's framing. Every frame starts with a fixed 64-byte header; a payload of
// `length` bytes follows for HELLO_ACK (8 bytes: the engine id), WRITE and READ_DATA frames.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace kvs::tcp {

constexpr uint32_t kMagic = 0x5453564b;  // "KVST" on the wire
constexpr uint8_t kVersion = 3;          // 3: requests name their fenced allocation
constexpr size_t kHeaderSize = 64;

enum class Opcode : uint8_t {
  kHello = 1,     // initiator -> target, no payload
  kHelloAck = 2,  // target -> initiator, payload = u64 engine id (a restarted peer has another)
  kRead = 3,      // initiator -> target: send me [offset, offset+length) of region
  kReadData = 4,  // target -> initiator: payload = the bytes
  kWrite = 5,     // initiator -> target, payload = bytes for [offset, offset+length)
  kWriteAck = 6,  // target -> initiator
  kError = 7,     // either way: status carries the Code; no payload
};

struct FrameHeader {
  Opcode opcode = Opcode::kHello;
  int32_t status = 0;  // Code, for kError
  uint64_t request_id = 0;
  uint64_t region_id = 0;
  uint64_t key = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t fence_slot = 0;  // READ / WRITE: the allocation they touch (core/fence.h); gen 0: none
  uint64_t fence_gen = 0;
};

void encode_header(const FrameHeader& header, char out[kHeaderSize]);
// Rejects bad magic or version, unknown opcodes, payload lengths over max_payload and payload on
// frames that carry none. A rejected header leaves the stream unusable: close the connection.
StatusOr<FrameHeader> decode_header(const char* data, size_t size, uint64_t max_payload);

// True for frames followed by `length` payload bytes.
bool carries_payload(Opcode opcode);

}  // namespace kvs::tcp
