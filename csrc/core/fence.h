// Allocation fences. The master carves a storage region into allocations and names each by a slot of
// this table and a generation (unique, increasing). Every transfer into such a region names its
// allocation; once the owner kills (slot, generation), no transfer for it touches the memory again, so
// a late writer cannot overwrite space given to another object and a reader holding an old location
// cannot read a freed object's bytes.
//
// The table lives in a memfd that same-host peers map, because their copies bypass the owner:
//   header: floor (every generation <= floor is dead), epoch, active[2]; then u64 killed[slots].
//   entrant: e = epoch; active[e&1] += 1; (epoch moved? undo, retry); admitted iff gen > floor and
//            killed[slot] < gen; copy; active[e&1] -= 1
//   owner:   wait active[(e+1)&1] == 0 (the last grace period); store the kills; epoch = e+1;
//            wait active[e&1] == 0.
// With sequentially consistent atomics every copy either sees the kill or has ended before kill returns.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"

namespace kvs {

struct FenceHeader {
  std::atomic<uint64_t> floor;
  std::atomic<uint64_t> epoch;
  std::atomic<int64_t> active[2];
  uint64_t slots;
  uint64_t reserved[3];
};
static_assert(sizeof(FenceHeader) == 64, "FenceHeader is shared across processes");

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

  // Owner side, serialised. Kills every (slot, gen) and waits up to timeout_ms for copies that may
  // have been admitted before; false when one did not end in time (a stopped peer): the kills stand,
  // but the memory must not be reused yet (call again later).
  bool kill(const std::vector<uint32_t>& slots, const std::vector<uint64_t>& gens, int timeout_ms);
  // Kills every generation <= floor (a storage node that rejoined: whatever was handed out before is
  // dead). Same waiting rule as kill.
  bool raise_floor(uint64_t floor, int timeout_ms);

  // Entrant side. Returns the epoch parity to leave with, or -1 when (slot, gen) is dead or unknown.
  int enter(uint32_t slot, uint64_t gen);
  void leave(int parity) { header_->active[parity].fetch_sub(1); }

 private:
  FenceTable(int fd, FenceHeader* header, size_t bytes) : fd_(fd), header_(header), bytes_(bytes) {}
  std::atomic<uint64_t>* killed() { return reinterpret_cast<std::atomic<uint64_t>*>(header_ + 1); }
  bool drain(int timeout_ms);  // the grace period, with mu_ held

  int fd_;
  FenceHeader* header_;
  size_t bytes_;
  std::mutex mu_;
};

// Admission of one copy: held while the copy runs. A request with generation 0 names no allocation:
// it is admitted only into a region without fences.
class FenceEntry {
 public:
  FenceEntry(FenceTable* table, uint32_t slot, uint64_t gen);
  ~FenceEntry() {
    if (parity_ >= 0) table_->leave(parity_);
  }
  FenceEntry(const FenceEntry&) = delete;
  FenceEntry& operator=(const FenceEntry&) = delete;
  const Status& status() const { return status_; }

 private:
  FenceTable* table_;
  int parity_ = -1;
  Status status_;
};

}  // namespace kvs
