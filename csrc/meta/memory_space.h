// The master's memory tier as placement sees it: every mounted segment's allocator and fence slots, and
// the rule that picks segments for new replicas: distinct segments, distinct hosts first, each replica on
// the roomier of two segments drawn at random among those that fit, in proportion to their capacity (power
// of two choices; roomier: the larger share of its capacity free in one extent). Not "the emptiest first": a
// segment that joins a full cluster would take every write until it filled; drawn in a pair it wins at most
// about 2/n of them, and from empty the draws keep segments within a few objects of each other. A batch of
// puts is placed in one call, and carved as it is placed: the master's loop owns it (not thread-safe), and
// kvstore.master.ledger is its only writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "meta/offset_allocator.h"

namespace kvs::meta {

// A segment's fence slots: one per live allocation, in the node's fence table. A slot given back is reused
// last-in first-out; slots never handed out are taken in order.
class SlotPool {
 public:
  explicit SlotPool(uint32_t capacity) : capacity_(capacity) {}
  bool has_slot() const { return !free_.empty() || next_ < capacity_; }
  std::optional<uint32_t> take();
  // A slot handed out comes back (false, nothing changes, for one never handed out).
  bool give_back(uint32_t slot);
  // After a restore: the slots in `taken` are held, every other one below the highest of them is free.
  void restart(const std::vector<uint32_t>& taken);
  uint32_t capacity() const { return capacity_; }
  uint32_t next() const { return next_; }
  const std::vector<uint32_t>& free_slots() const { return free_; }
  // How many slots are handed out and not given back.
  uint32_t in_use() const { return next_ - static_cast<uint32_t>(free_.size()); }

 private:
  uint32_t capacity_;
  uint32_t next_ = 0;  // slots below it were handed out at least once
  std::vector<uint32_t> free_;
};

// One replica placed: where its bytes go and the fence slot it is known by.
struct Placed {
  uint32_t segment = 0;
  uint32_t slot = 0;
  uint64_t offset = 0;
};

class MemorySpace {
 public:
  void add(uint32_t id, std::string_view host, std::shared_ptr<OffsetAllocator> allocator,
           std::shared_ptr<SlotPool> slots);
  void remove(uint32_t id);
  // New replicas may go to it (usable, not being restored).
  void set_placeable(uint32_t id, bool placeable);
  size_t size() const { return segments_.size(); }

  // Places `count` replicas of each of `sizes` in turn, carving each as it goes; appends them to `out`
  // (count per object) and returns how many objects were placed: fewer than sizes.size() when the next
  // does not fit now (nothing is carved for it: the caller may evict and go on from it).
  size_t place_many(const std::vector<uint64_t>& sizes, uint32_t count, std::vector<Placed>& out);
  // Places `count` replicas of one object on segments not in `exclude`, on hosts not in `spread_from` and
  // each other first; false (nothing carved) when they do not fit now.
  bool place(uint64_t size, uint32_t count, const std::vector<uint32_t>& exclude,
             const std::vector<std::string>& spread_from, std::vector<Placed>& out);
  // Restarts the draws from `seed` (the same seed, mounts and requests: the same placements).
  void seed(uint64_t seed) { random_state_ = seed; }

 private:
  struct Entry {
    uint32_t id;
    uint32_t host;
    bool placeable;
    std::shared_ptr<OffsetAllocator> allocator;
    std::shared_ptr<SlotPool> slots;
  };
  bool fits(const Entry& e, uint64_t size) const;
  void carve(Entry& e, uint64_t size, std::vector<Placed>& out);
  bool place_one(uint64_t size, uint32_t count, const std::vector<uint32_t>& exclude,
                 const std::vector<uint32_t>& avoid_hosts, std::vector<Placed>& out);
  // The roomier of two entries of `among`, each drawn at random in proportion to its capacity (a draw may
  // repeat: then that one is chosen).
  uint32_t pick_of_two(const std::vector<uint32_t>& among);
  bool roomier(const Entry& a, const Entry& b) const;
  uint64_t next_random();
  uint32_t host_number(std::string_view host);

  std::vector<Entry> segments_;  // in mount order
  std::unordered_map<std::string, uint32_t> hosts_;
  uint64_t random_state_ = 0x6b76'7374'6f72'6521;  // fixed: a master's placements are reproducible
  std::vector<uint32_t> fitting_;                  // scratch: entries that can hold one object
  std::vector<uint32_t> open_;                     // scratch: those of them still open to its next replica
  std::vector<uint32_t> chosen_;                   // scratch: entries chosen for one object
  std::vector<uint64_t> cumulative_;               // scratch: running sums of the capacities drawn among
};

}  // namespace kvs::meta
