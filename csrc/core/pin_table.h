// Cross-process pins for same-host peers. Shared-memory and CMA copies bypass the target's request
// path, so the target publishes, per exported region, a slot in a memfd table that peers map:
//   peer:   pins += 1; if live_id == region id: copy; pins -= 1
//   target: live_id = 0; wait for pins == 0; only then unmap or free the memory.
// With sequentially consistent atomics either the peer sees the revocation or the target sees the pin.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common/status.h"

namespace kvs {

struct PinSlot {
  std::atomic<uint64_t> live_id;  // region id while exported, 0 once revoked
  std::atomic<int64_t> pins;      // copies running in peer processes
};
static_assert(sizeof(PinSlot) == 16, "PinSlot is shared across processes");

constexpr uint32_t kNoSlot = UINT32_MAX;

class PinTable {
 public:
  static constexpr uint32_t kSlots = 1u << 16;

  PinTable();
  ~PinTable();
  PinTable(const PinTable&) = delete;
  PinTable& operator=(const PinTable&) = delete;

  bool ok() const { return slots_ != nullptr; }
  int fd() const { return fd_; }
  // A free slot, now publishing region_id; kNoSlot when none is free (the region is then not
  // reachable by shared memory, only through the target's own request path).
  uint32_t publish(uint64_t region_id);
  // Revokes and waits up to timeout_ms for peer copies to end. A slot whose pins never drain (a peer
  // died mid-copy) is not reused.
  void revoke(uint32_t slot, int timeout_ms);

  // Peer side, on a mapped table.
  static bool pin(PinSlot* table, uint32_t slot, uint64_t region_id);
  static void unpin(PinSlot* table, uint32_t slot);

 private:
  int fd_ = -1;
  PinSlot* slots_ = nullptr;
  std::mutex mu_;
  std::vector<uint32_t> free_;
};

}  // namespace kvs
