// The puts in progress of the object table (started, neither committed nor erased): what each writer's hold
// (objects, bytes: the master bounds them per client) and the order they expire in. A put's row exists from
// its start (uncommitted); this keeps beside it only its deadline, in a queue in start order, and per
// writer two counts, so the put path makes no Python object per key to track it.
//
// Deadlines are in start order (each is its start plus the put timeout; a stall credit moves them all), so
// expiry reads only the expired. An entry whose put ended is left in the queue and dropped when it reaches
// the front, or when such entries outnumber the live ones (the queue never grows past twice the puts in
// progress plus a constant).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace kvs::meta {

// What one writer's puts in progress hold.
struct PutsHeld {
  uint64_t objects = 0;
  uint64_t bytes = 0;  // each put's size times the copies it was placed with
};

class PutsInProgress {
 public:
  // A queued put: its row (and the row's incarnation: a row reused by another object is not it) and its
  // deadline less the stall credit at its start.
  struct Entry {
    uint32_t row = 0;
    uint32_t incarnation = 0;
    double due = 0;
  };

  // A put started: `charge` bytes held by `writer` until it ends, expiring at `deadline`.
  void start(uint32_t row, uint32_t incarnation, uint32_t writer, uint64_t charge, double deadline);
  // A put ended (committed or erased): its writer's hold shrinks. Its entry is dropped later.
  void end(uint32_t writer, uint64_t charge);
  // The master did not run for `seconds`: every put in progress has that much longer (O(1)).
  void credit(double seconds) { credit_ += seconds; }

  PutsHeld held(uint32_t writer) const { return writer < held_.size() ? held_[writer] : PutsHeld{}; }
  size_t size() const { return live_; }

  // The queue, oldest first, for the walks of meta/puts.h (which know which entries still live).
  std::deque<Entry>& queue() { return queue_; }
  const std::deque<Entry>& queue() const { return queue_; }
  // Whether the entry's deadline passed at `now`.
  bool due(const Entry& e, double now) const { return e.due + credit_ < now; }
  // True when the ended entries left in the queue are worth a walk to drop them.
  bool worth_compacting() const { return queue_.size() > 2 * live_ + 1024; }

 private:
  std::deque<Entry> queue_;
  std::vector<PutsHeld> held_;  // by writer number
  size_t live_ = 0;
  double credit_ = 0;  // seconds of the master's stalls credited to every put in progress
};

}  // namespace kvs::meta
