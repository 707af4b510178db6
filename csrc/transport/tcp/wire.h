// The TCP transport's framing. Every frame starts with a fixed 64-byte header; a payload of `length` bytes
// follows for HELLO, HELLO_ACK and PROOF (fixed sizes), WRITE and READ_DATA frames.
//
// A connection opens with the session's challenge-response (core/session.h): HELLO names the session and
// carries the initiator's nonce; HELLO_ACK the engine id, the target's nonce and its proof; PROOF the
// initiator's; PROOF_ACK admits it (a wrong one gets ERROR PERMISSION_DENIED and the connection closes).
// Only then are requests read, and their keys checked against that session.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "core/session.h"

namespace kvs::tcp {

constexpr uint32_t kMagic = 0x5453564b;  // "KVST" on the wire
constexpr uint8_t kVersion = 4;          // 3: requests name their fenced allocation; 4: sessions
constexpr size_t kHeaderSize = 64;
constexpr size_t kHelloPayload = kSessionIdSize + kNonceSize;         // session id, initiator nonce
constexpr size_t kHelloAckPayload = 8 + kNonceSize + sizeof(Digest);  // engine id, target nonce, its proof
constexpr size_t kProofPayload = sizeof(Digest);

enum class Opcode : uint8_t {
  kHello = 1,     // initiator -> target, payload = session id, nonce
  kHelloAck = 2,  // target -> initiator, payload = u64 engine id (a restarted peer has another), nonce, proof
  kRead = 3,      // initiator -> target: send me [offset, offset+length) of region
  kReadData = 4,  // target -> initiator: payload = the bytes
  kWrite = 5,     // initiator -> target, payload = bytes for [offset, offset+length)
  kWriteAck = 6,  // target -> initiator
  kError = 7,     // either way: status carries the Code; no payload
  kProof = 8,     // initiator -> target, payload = its proof of the session
  kProofAck = 9,  // target -> initiator: requests may follow
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
// Rejects bad magic or version, unknown opcodes, payload lengths over max_payload, handshake frames of
// another size and payload on frames that carry none. A rejected header leaves the stream unusable: close the
// connection.
StatusOr<FrameHeader> decode_header(const char* data, size_t size, uint64_t max_payload);

// True for frames followed by `length` payload bytes.
bool carries_payload(Opcode opcode);

// The target's goodbye on a connection it cuts while idle (ERROR CLOSED for no request): nothing sent on
// it was lost, the initiator opens another when it needs one.
inline bool is_goodbye(const FrameHeader& h) {
  return h.opcode == Opcode::kError && h.request_id == 0 && h.status == static_cast<int32_t>(Code::kClosed);
}

}  // namespace kvs::tcp
