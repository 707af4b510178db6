// Questions the master asks the object table of many objects at once (eviction's candidates, a segment's
// objects, which of a batch are stored), each answered in one call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "meta/object_table.h"

namespace kvs::meta {

// Whether an object may be evicted (values are part of the Python API: kvstore.master.victims).
enum class VictimState : int {
  kNo = 0,    // absent, a put in progress, pinned; disk-backed eviction: without a disk record or a copy
  kYes = 1,   // evictable now
  kHeld = 2,  // evictable, but a reader holds it until its lease ends
};
VictimState victim_state(const ObjectTable& t, std::string_view key, double now, bool disk_backed);

// The first object of the order that may be evicted (committed, not pinned) and no reader holds, and the
// first such one a reader holds (kNoRow where there is none; the second is kNoRow once a free one is found
// first).
struct FirstVictims {
  Row free = kNoRow;
  Row held = kNoRow;
};
FirstVictims first_victims(const ObjectTable& t, Order order, double now);

// The rows with a memory copy (or, with `disk`, their record) on the segment: a walk of the whole table.
std::vector<Row> rows_on(const ObjectTable& t, uint32_t segment, bool disk);

// Up to `limit` rows of the order after `after` (kNoRow: from the first).
std::vector<Row> walk(const ObjectTable& t, Order order, Row after, size_t limit);
// Up to `limit` live rows in table order from row `start`; *next is where to go on (kNoRow once done).
std::vector<Row> scan(const ObjectTable& t, Row start, size_t limit, Row* next);

// Per key: stored, committed and shown (not a member of a group missing some).
std::vector<bool> visible_mask(const ObjectTable& t, const std::vector<std::string_view>& keys);
// The indexes of the keys of committed objects with a copy in memory.
std::vector<uint32_t> in_memory(const ObjectTable& t, const std::vector<std::string_view>& keys);
// The indexes of the keys (in the table) with fewer memory copies than their put asked for.
std::vector<uint32_t> short_of_copies(const ObjectTable& t, const std::vector<std::string_view>& keys);
// The index of the first key in the table (committed or not), else keys.size().
size_t first_present(const ObjectTable& t, const std::vector<std::string_view>& keys);

}  // namespace kvs::meta
