// Allocation fences. The master carves a storage region into allocations and names each by a slot of
// this table and a generation (unique, increasing). Every transfer into such a region names its
// allocation; once the owner kills (slot, generation), no transfer for it touches the memory again, so
// a late writer cannot overwrite space given to another object and a reader holding an old location
// cannot read a freed object's bytes.
//
// A peer's request is admitted only for the allocation its owner announced in that slot, exactly: the
// same generation, and bytes inside the allocation's range. A member of the cluster can name any slot and
// generation, so "not killed yet" is not enough: (slot 0, generation 2^63) would pass that, and so would
// a live allocation of its own with another object's offset. The owner announces each allocation when the
// master tells it of the replica (kvstore's holds), which the master sends as it places it; a request
// that arrives first waits for that announcement a bounded time (kAnnounceWaitMs), only while the slot
// holds no live allocation. An allocation is written once: peers' writes are admitted for `size` bytes in
// all, so a reader who learnt (slot, generation) cannot overwrite the object it reads; the session that
// wrote first may write its bytes again (a resend after a lost acknowledgement or a path that failed), and
// a write that fails before its bytes are in gives its count back.
//
// A request that waits for its announcement sleeps on a futex in the table's memfd (any process that maps
// it) that announcements and kills bump, and only while someone waits: the owner's common path pays one
// load. The waiter may give up early (`abandon`: its connection was cut).
//
// The table lives in a memfd that same-host peers map, because their copies bypass the owner:
//   header: floor (every generation <= floor is dead), the waiters' futex; then per slot {killed
//   generation, active copies, announced generation and range, bytes written, its first writer}.
//   entrant: active += 1; admitted iff gen > floor, killed < gen, announced == gen, range inside (and, to
//            write, as many bytes still unwritten); copy; active -= 1
//   owner:   killed = max(killed, gen); wait until active == 0.
// With sequentially consistent atomics every copy either sees the kill or is counted and waited for. The
// master reuses a slot only after its kill was confirmed, so the wait is only ever for late copies.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kvs {

struct FenceHeader {
  std::atomic<uint64_t> floor;
  uint64_t slots;
  uint64_t reserved[6];
  // (a cache line of their own: entrants read `floor` on every copy, waiters are rare)
  std::atomic<uint32_t> bumps;    // the futex waiters sleep on: bumped by announcements and kills ...
  std::atomic<uint32_t> waiters;  // ... while this is not 0
  uint64_t reserved2[7];
};
static_assert(sizeof(FenceHeader) == 128, "FenceHeader is shared across processes");
static_assert(sizeof(std::atomic<uint32_t>) == 4, "a futex word");

struct FenceSlot {
  std::atomic<uint64_t> killed;     // every generation <= this is dead in this slot
  std::atomic<int64_t> active;      // copies admitted and not ended
  std::atomic<uint64_t> announced;  // the generation of the slot's allocation (0: none yet)
  std::atomic<uint64_t> start;      // ... and its bytes, [start, start + size) of the region
  std::atomic<uint64_t> size;
  std::atomic<uint64_t> written;  // bytes peers' writes were admitted for: at `size`, it is sealed
  std::atomic<uint64_t> writer;   // the session whose write was admitted first (0: none yet)
};
static_assert(sizeof(FenceSlot) == 56, "FenceSlot is shared across processes");

// How long a request naming an allocation its owner has not announced yet waits for it (the master
// tells the owner as it tells the writer: usually microseconds apart).
constexpr int kAnnounceWaitMs = 3000;

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
  // Kills every generation <= floor in every slot but the kept ones, and in a kept (slot, generation)'s
  // slot every generation below the kept one: a storage node that mounts again with objects it still
  // holds. `kept` ascending by slot, each slot once, generations >= 1 (others are not kept: killed to the
  // floor). One pass over the table; same waiting rule as kill, over every slot.
  bool kill_all_but(uint64_t floor, const std::vector<std::pair<uint32_t, uint64_t>>& kept, int timeout_ms);

  // Owner side: the allocation the master handed out in `slot` is (gen, [start, start + size)). An
  // announcement older than the slot's last one or its kill is ignored. Thread-safe.
  void announce(uint32_t slot, uint64_t gen, uint64_t start, uint64_t size);

  // Entrant side (a peer's request): true when (slot, gen) is the slot's announced, live allocation and
  // [offset, offset + length) lies inside it, and for a write, when `length` bytes of the allocation are
  // still unwritten (they count as written then: *took) or `writer` (not 0) is the session that wrote it
  // first; waits up to wait_ms for an announcement while the slot holds no live one, unless `abandon`
  // says to give up. The caller then calls leave(slot) after its copy.
  bool enter(uint32_t slot, uint64_t gen, uint64_t offset, uint64_t length, bool write,
             int wait_ms = kAnnounceWaitMs, uint64_t writer = 0, const std::function<bool()>& abandon = {},
             uint64_t* took = nullptr);
  // A write admitted for `length` unwritten bytes that failed before they were in gives them back (its
  // resend, on this path or another, is admitted again). Call before leave(slot).
  void unwrite(uint32_t slot, uint64_t gen, uint64_t length);
  // The owner's own access (it trusts itself): true when (slot, gen) is not killed, announced or not.
  bool enter_owned(uint32_t slot, uint64_t gen);
  void leave(uint32_t slot) { entries()[slot].active.fetch_sub(1); }

 private:
  FenceTable(int fd, FenceHeader* header, size_t bytes) : fd_(fd), header_(header), bytes_(bytes) {}
  FenceSlot* entries() { return reinterpret_cast<FenceSlot*>(header_ + 1); }
  bool alive(const FenceSlot& e, uint64_t gen) const {
    return gen > header_->floor.load() && e.killed.load() < gen;
  }
  // Whether (gen, range) is the slot's announced allocation, checked so that a concurrent announcement of
  // the slot's next allocation is never mixed with this one's range.
  bool matches(const FenceSlot& e, uint64_t gen, uint64_t offset, uint64_t length) const;
  bool wait_announced(const FenceSlot& e, uint64_t gen, int wait_ms, const std::function<bool()>& abandon);
  // killed = max(killed, gen): every generation <= gen of the slot is dead.
  static void kill_up_to(FenceSlot& e, uint64_t gen);
  // Wakes the requests waiting for an announcement (they check theirs again), if any.
  void wake_waiters();
  static bool take_unwritten(FenceSlot& e, uint64_t length);
  static bool admit_write(FenceSlot& e, uint64_t length, uint64_t writer, uint64_t* took);

  int fd_;
  FenceHeader* header_;
  size_t bytes_;
  std::mutex announcing_;  // the owner's announcements of one slot never interleave
};

// Admission of one peer's copy of [offset, offset + length) (a write when `write`): held while the copy
// runs. A request with generation 0 names no allocation: it is admitted only into a region without fences.
// `writer` and `abandon`: as FenceTable::enter.
class FenceEntry {
 public:
  FenceEntry(FenceTable* table, uint32_t slot, uint64_t gen, uint64_t offset, uint64_t length, bool write,
             int wait_ms = kAnnounceWaitMs, uint64_t writer = 0, const std::function<bool()>& abandon = {});
  ~FenceEntry() {
    if (admitted_) table_->leave(slot_);
  }
  // The write failed before its bytes were in: what it took of the allocation is given back.
  void failed() {
    if (admitted_ && took_ > 0) table_->unwrite(slot_, gen_, took_);
    took_ = 0;
  }
  FenceEntry(const FenceEntry&) = delete;
  FenceEntry& operator=(const FenceEntry&) = delete;
  const Status& status() const { return status_; }

 private:
  FenceTable* table_;
  uint32_t slot_;
  uint64_t gen_;
  uint64_t took_ = 0;
  bool admitted_ = false;
  Status status_;
};

}  // namespace kvs
