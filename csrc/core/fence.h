// Allocation fences. The master carves a storage region into allocations and names each by a slot of
// this table and a generation (unique, increasing). Every transfer into such a region names its
// allocation; once the owner kills (slot, generation), no transfer for it touches the memory again, so
// a late writer cannot overwrite space given to another object and a reader holding an old location
// cannot read a freed object's bytes.
//
// The table lives in a memfd that same-host peers map, because their copies bypass the owner:
//   header: floor (every generation <= floor is dead); then per slot {killed generation, active copies}.
//   entrant: active += 1; admitted iff gen > floor and killed < gen; copy; active -= 1
//   owner:   killed = max(killed, gen); wait until active == 0.
// With sequentially consistent atomics every copy either sees the kill or is counted and waited for. The
// master reuses a slot only after its kill was confirmed, so the wait is only ever for late copies.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"

namespace kvs {

struct FenceHeader {
  std::atomic<uint64_t> floor;
  uint64_t slots;
  uint64_t reserved[6];
};
static_assert(sizeof(FenceHeader) == 64, "FenceHeader is shared across processes");

struct FenceSlot {
  std::atomic<uint64_t> killed;  // every generation <= this is dead in this slot
  std::atomic<int64_t> active;   // copies admitted and not ended
};
static_assert(sizeof(FenceSlot) == 16, "FenceSlot is shared across processes");

class FenceTable {
 public:
  // The owner's table: a new memfd of `slots` entries, all alive.
  static StatusOr<std::shared_ptr<FenceTable>> create(uint32_t slots);
  // A peer's table, from the memfd it handed over (the fd is taken over).
  static StatusOr<std::shared_ptr<FenceTable>> map(int fd);
  ~FenceTable();
  FenceTable(const FenceTable&) = delete;
  FenceTable& operator=(const FenceTable&) = delete;

  int fd() const { return fd_; }
  uint32_t slots() const { return static_cast<uint32_t>(header_->slots); }

  // Owner side. Kills every (slot, gen) and waits up to timeout_ms for the copies admitted before; false
  // when one did not end in time (a stopped peer): the kills stand, but the memory must not be reused
  // yet (call again later).
  bool kill(const std::vector<uint32_t>& slots, const std::vector<uint64_t>& gens, int timeout_ms);
  // Kills every generation <= floor (a storage node that (re)joins: whatever was handed out before is
  // dead). Same waiting rule as kill, over every slot.
  bool raise_floor(uint64_t floor, int timeout_ms);

  // Entrant side: true when (slot, gen) is alive; the caller then calls leave(slot) after its copy.
  bool enter(uint32_t slot, uint64_t gen);
  void leave(uint32_t slot) { entries()[slot].active.fetch_sub(1); }

 private:
  FenceTable(int fd, FenceHeader* header, size_t bytes) : fd_(fd), header_(header), bytes_(bytes) {}
  FenceSlot* entries() { return reinterpret_cast<FenceSlot*>(header_ + 1); }

  int fd_;
  FenceHeader* header_;
  size_t bytes_;
};

// Admission of one copy: held while the copy runs. A request with generation 0 names no allocation:
// it is admitted only into a region without fences.
class FenceEntry {
 public:
  FenceEntry(FenceTable* table, uint32_t slot, uint64_t gen);
  ~FenceEntry() {
    if (admitted_) table_->leave(slot_);
  }
  FenceEntry(const FenceEntry&) = delete;
  FenceEntry& operator=(const FenceEntry&) = delete;
  const Status& status() const { return status_; }

 private:
  FenceTable* table_;
  uint32_t slot_;
  bool admitted_ = false;
  Status status_;
};

}  // namespace kvs
