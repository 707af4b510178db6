// What each storage node is told it holds (kvstore/master/ledger/holds.py): per node, the replicas on its
// segments numbered in the order they were queued, sent on its work channel until it acknowledges them
// through a number. A hold names its object by a table reference and its copy by (segment, region, offset,
// slot, gen); what the node is told (key, size, checksum, pin, replica counts) is read from the object's
// row when the hold is sent, and the holds are encoded there as the wire carries them (msgpack, as
// msgpack-python writes kvstore.rpc.records.HeldReplica's tuples). A hold whose object or copy is gone
// when it is sent is dropped, never sent: a node is never told another object's key for a slot.
//
// Held again, a (region, slot) keeps its earlier hold queued (a put may wait on its number): a hold not
// sent yet naming the same copy is reused, else a new one goes to the end and both are sent (the node's
// catalog keeps one record per slot). A node acknowledges at most the highest number it was sent.
// Not thread-safe: the master's one loop owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "meta/msgpack_writer.h"
#include "meta/object_refs.h"
#include "meta/object_table.h"

namespace kvs::meta {

// A copy of an object as its node knows it: its segment (the table's number), that segment's region on
// the node, and the allocation.
struct HeldCopy {
  uint32_t segment = 0;
  uint64_t region = 0;
  uint64_t offset = 0;
  uint32_t slot = 0;
  uint64_t gen = 0;
  bool operator==(const HeldCopy& o) const {
    return segment == o.segment && region == o.region && offset == o.offset && slot == o.slot && gen == o.gen;
  }
};

// What hold_rows found wrong (nothing is held then).
struct HoldRowsCheck {
  size_t stale = SIZE_MAX;       // the position of a reference whose object is gone
  uint32_t unknown_segment = 0;  // a copy's segment not added (add_segment) yet
  bool ok() const { return stale == SIZE_MAX && unknown_segment == 0; }
};

// What one take sent.
struct Taken {
  size_t sent = 0;
  size_t dropped = 0;  // holds whose object or copy was gone: never sent, forgotten
};

// Where a segment's copies are held: the caller's number for its node, and the segment's region there.
struct SegmentPlace {
  uint32_t node = 0;
  uint64_t region = 0;
};

class HoldBook {
 public:
  explicit HoldBook(ObjectTable& table) : table_(table) {}

  void add_segment(uint32_t segment, uint32_t node, uint64_t region);
  // The segment's place; nullptr when it was not added.
  const SegmentPlace* place(uint32_t segment) const;

  // Holds one copy of the object `ref` on `node`; returns the hold's number (an earlier one's, not sent
  // yet, of the same copy).
  uint64_t hold(uint32_t node, Ref ref, const HeldCopy& c);
  // Holds every copy of each object of `refs` in turn (its node and region by its segment) and sets each
  // row's hold_seq to the highest number of its holds. Appends each node held on to `nodes` once. Nothing is
  // held when the check fails.
  [[nodiscard]] HoldRowsCheck hold_rows(const std::vector<Ref>& refs, std::vector<uint32_t>& nodes);

  // The copy in (region, slot) of generation `gen` was freed: its hold is not sent again. False: none.
  bool cancel(uint32_t node, uint64_t region, uint32_t slot, uint64_t gen);
  // The node has every hold numbered up to `through` (at most the highest number it was sent).
  void acknowledge(uint32_t node, uint64_t through);
  void drop_node(uint32_t node);
  void drop_region(uint32_t node, uint64_t region);

  // The lowest number the node has not acknowledged; 0 when nothing is outstanding.
  uint64_t lowest(uint32_t node) const;
  // At most `limit` of the node's holds, oldest first, appended to `out` as a msgpack array of
  // [seq, region, offset, slot, gen, key, size, checksum, pinned, base replicas, target replicas].
  Taken take(uint32_t node, size_t limit, std::string& out);

  uint64_t last_seq() const { return seq_; }
  uint64_t sent() const { return sent_; }
  size_t outstanding() const;

 private:
  struct Hold {
    uint64_t seq = 0;  // 0: cancelled, dropped or its region gone (a gap, skipped)
    Ref ref = 0;
    HeldCopy copy;
  };
  struct Where {
    uint64_t region;
    uint32_t slot;
    bool operator==(const Where& o) const { return region == o.region && slot == o.slot; }
  };
  struct WhereHash {
    size_t operator()(const Where& w) const { return (w.region * 0x9E3779B97F4A7C15ull) ^ w.slot; }
  };
  struct Queue {
    std::deque<Hold> holds;  // in number order; the front is never a gap
    uint64_t base = 0;       // the position of holds.front() since the queue began
    // a live hold of each (region, slot) queued, the newest as held (cancel and push look here); an
    // earlier one not named is sent as it is, or dropped when taken once its copy is gone
    std::unordered_map<Where, uint64_t, WhereHash> position;
    size_t gaps = 0;
    uint64_t taken = 0;  // the highest number sent
  };

  Queue& queue(uint32_t node);
  uint64_t push(uint32_t node, Ref ref, const HeldCopy& c);
  void forget(Queue& q, size_t index);  // out of position, if named there
  void kill(Queue& q, size_t index);
  void settle(Queue& q);              // drops gaps from the front; compacts a queue mostly gaps
  bool current(const Hold& h) const;  // its object is alive and still has the copy
  bool row_has(Row row, const HeldCopy& c) const;
  void encode(const Hold& h, MsgpackWriter& w) const;

  ObjectTable& table_;
  std::vector<Queue> queues_;  // by node number
  std::unordered_map<uint32_t, SegmentPlace> segments_;
  uint64_t seq_ = 0;
  uint64_t sent_ = 0;
};

}  // namespace kvs::meta
