// The master's object table: every object's metadata in flat rows, found by key through an open-addressing
// index, with the two orders the master walks kept inside the rows as links (the eviction orders of its
// memory replicas and of its disk records). About 250 bytes an object with a 64-byte key, against ~1,200 for
// the Python objects it replaces; no operation walks the table, and it never moves rows: growth adds a chunk,
// and the index grows by migrating a bounded number of slots per call (no stall at 10M objects).
//
// Rows are named by (row, incarnation): a row is reused after its object is erased, with a new
// incarnation, so a stale name is refused instead of reading another object. Not thread-safe: the master's
// one loop owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "meta/puts_in_progress.h"

namespace kvs::meta {

using Row = uint32_t;
inline constexpr Row kNoRow = UINT32_MAX;

// A copy of an object in a memory segment: an allocation, fenced by (slot, gen).
struct MemoryCopy {
  uint32_t segment = 0;
  uint32_t slot = 0;
  uint64_t offset = 0;
  uint64_t gen = 0;
  bool operator==(const MemoryCopy& o) const {
    return segment == o.segment && slot == o.slot && offset == o.offset && gen == o.gen;
  }
};

// The scalar metadata of one object (its key, copies and links live beside it in the row).
struct Object {
  uint64_t size = 0;
  uint64_t checksum = 0;
  uint64_t hold_seq = 0;  // the last hold its put sent its nodes
  double lease_until = 0;
  double last_access = 0;
  double heat = 0;
  double heat_time = 0;
  double loaded_at = 0;
  uint64_t disk_offset = 0;
  uint32_t disk_segment = 0;  // 0: no record on a disk
  uint32_t writer = 0;        // the caller's number for the client that put it
  uint32_t access_count = 0;
  uint8_t base_replicas = 1;
  uint8_t target_replicas = 0;
  bool complete = false;
  bool pinned = false;
  uint8_t group = 0;  // kNotMember, kShown or kHidden (the master's groups index sets it)
  // While its put is in progress: the copies it was placed with, charged to its writer (meta/puts.h); 0 once
  // committed, and for an object that was never a put in progress (restored, adopted).
  uint8_t put_copies = 0;
};

// A row's part in a store group (`<group>#<i>of<n>`, kvstore/master/groups.py): readers see a member only
// while its whole group is stored, and a lease on one member is a lease on all.
inline constexpr uint8_t kNotMember = 0;
inline constexpr uint8_t kShown = 1;   // a member of a group stored whole
inline constexpr uint8_t kHidden = 2;  // a member of a group missing some member: absent to readers

// An intrusive doubly linked list through the rows (one per order a row can be in).
struct Links {
  Row prev = kNoRow;
  Row next = kNoRow;
};

enum class Order : int { kMemory = 0, kDisk = 1 };
inline constexpr int kOrders = 2;

class ObjectTable {
 public:
  explicit ObjectTable(uint64_t seed = 0);
  ~ObjectTable();
  ObjectTable(const ObjectTable&) = delete;
  ObjectTable& operator=(const ObjectTable&) = delete;

  // -- keys -------------------------------------------------------------------------------------------
  Row find(std::string_view key) const;
  // A new row for `key`, all fields zero but base_replicas 1; kNoRow if the key is present.
  Row insert(std::string_view key);
  // Forgets the row (its links and copies go with it); the row is reused with a new incarnation.
  void erase(Row row);
  std::string_view key(Row row) const;
  uint32_t incarnation(Row row) const;
  // True when `row` holds an object whose incarnation is `inc`.
  bool alive(Row row, uint32_t inc) const;
  // True when `row` holds an object (of any incarnation).
  bool live(Row row) const;
  size_t size() const { return count_; }
  // Rows below this were handed out (each live or free): a scan of every object walks them.
  Row row_limit() const { return rows_; }

  Object& at(Row row) { return slot(row).object; }
  const Object& at(Row row) const { return slot(row).object; }

  // -- memory copies ----------------------------------------------------------------------------------
  size_t copy_count(Row row) const { return slot(row).copies; }
  const MemoryCopy& copy(Row row, size_t i) const;
  void add_copy(Row row, const MemoryCopy& c);
  // Removes the first copy equal to `c`, keeping the order of the rest; false if there is none.
  bool drop_copy(Row row, const MemoryCopy& c);
  void clear_copies(Row row);

  // -- orders: memory and disk eviction (first = first to go) -------------------------------------------
  bool linked(Order o, Row row) const;
  void push_back(Order o, Row row);   // unlinks first if linked
  void push_front(Order o, Row row);  // likewise
  void unlink(Order o, Row row);      // no-op when not linked
  Row first(Order o) const { return heads_[static_cast<int>(o)].next; }
  Row next(Order o, Row row) const;
  size_t length(Order o) const { return lengths_[static_cast<int>(o)]; }

  // Bytes this table holds (rows, index, keys, spare copies): for stats and the bench's per-object figure.
  size_t memory_bytes() const;

  // -- puts in progress (meta/puts.h starts and ends them; erasing a row ends its put) --------------------
  PutsInProgress& puts() { return puts_; }
  const PutsInProgress& puts() const { return puts_; }
  // Ends the put in progress of `row`, if it has one (its writer's hold shrinks).
  void end_put(Row row);

 private:
  struct Slot {
    const char* key = nullptr;  // owned: key_len bytes, malloc'd
    uint32_t key_len = 0;
    uint32_t incarnation = 0;  // odd while alive
    uint64_t hash = 0;
    Object object;
    MemoryCopy first_copy;  // the common case: one copy, inline; more go to extra_copies_
    uint8_t copies = 0;
    Links links[kOrders];
  };
  static constexpr uint32_t kChunkShift = 12;  // rows per chunk: 4096
  static constexpr uint32_t kChunkRows = 1u << kChunkShift;

  Slot& slot(Row row) { return chunks_[row >> kChunkShift][row & (kChunkRows - 1)]; }
  const Slot& slot(Row row) const { return chunks_[row >> kChunkShift][row & (kChunkRows - 1)]; }
  uint64_t hash(std::string_view key) const;
  Links& links(Order o, Row row);
  const Links& links(Order o, Row row) const;

  // The index: a power-of-two array of rows (kNoRow: empty), linear probing, deletion by backward shift.
  // Beside each entry, 8 bits of its key's hash: a probe reads a row only when they match (a probe that
  // read every row it passed took a cache miss a step: most of an insert's time). While it grows, `old_`
  // still holds entries not yet moved: lookups look in both; every insert moves a bounded number of them.
  struct Index {
    std::vector<Row> slots;
    std::vector<uint8_t> tags;
    size_t used = 0;
    size_t mask() const { return slots.size() - 1; }
    void reset(size_t n) {
      slots.assign(n, kNoRow);
      tags.assign(n, 0);
      used = 0;
    }
  };
  static uint8_t tag_of(uint64_t h) { return static_cast<uint8_t>(h >> 56); }  // (positions use low bits)
  Row lookup(const Index& ix, std::string_view key, uint64_t h, size_t* where) const;
  void place(Index& ix, Row row);
  void remove_at(Index& ix, size_t where);
  void migrate(size_t budget);

  uint64_t seed_;
  std::vector<std::unique_ptr<Slot[]>> chunks_;
  uint32_t rows_ = 0;  // rows ever handed out (below: alive or on the free list)
  std::vector<Row> free_rows_;
  size_t count_ = 0;
  size_t key_bytes_ = 0;
  Index index_;
  Index old_;
  size_t old_cursor_ = 0;
  std::unordered_map<Row, std::vector<MemoryCopy>> extra_copies_;  // copies beyond the first
  Links heads_[kOrders];                                           // heads_[o].next: first, .prev: last
  size_t lengths_[kOrders] = {0, 0};
  PutsInProgress puts_;
};

}  // namespace kvs::meta
