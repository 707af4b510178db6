// A batch of puts started and ended in the object table, each in one call with no object per key: the
// start makes each put's uncommitted row (its copies as placement carved them) and charges its writer
// (meta/puts_in_progress.h); the end commits the writer's puts and says what the master needs next (which
// keys it had no put of, the hold each node must acknowledge, the objects short of copies).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "meta/object_table.h"

namespace kvs::meta {

// Puts started by one writer in one call: per key its size, checksum and (if known, else none) the number
// of the last hold its nodes were sent; every key has `count` copies, copies[i * count, (i + 1) * count)
// being key i's.
struct StartedPuts {
  std::vector<std::string_view> keys;
  std::vector<uint64_t> sizes;
  std::vector<uint64_t> checksums;
  std::vector<uint64_t> hold_seqs;
  std::vector<MemoryCopy> copies;
  uint32_t count = 1;
  uint32_t writer = 0;
  bool pinned = false;
  uint8_t base_replicas = 1;  // the replicas the put asked for
  double started = 0;         // the objects' last access
  double deadline = 0;        // when the puts expire unless ended
};

// Makes every put's row, uncommitted, and charges its writer; returns the rows in key order. All or
// nothing: std::invalid_argument (the table unchanged) when the columns' lengths disagree, `count` is 0 or
// past 255, or a key is in the table already or twice in the batch. No hold numbers: each row's is 0.
std::vector<Row> start_puts(ObjectTable& t, const StartedPuts& puts);

// What put_end of a batch did.
struct EndedPuts {
  std::vector<uint32_t> missing;          // indexes of the keys with no put in progress by the writer
  std::vector<uint32_t> ended;            // indexes of the keys committed, in order
  std::vector<uint32_t> short_of_copies;  // of those, the ones with fewer copies than their put asked for
  std::vector<uint32_t> sampled;          // of those, the ones in the eviction policy's sample (end_puts)
  uint64_t bytes = 0;                     // of the objects committed
  // Per memory segment of their copies, the highest hold number of a put placed there.
  std::unordered_map<uint32_t, uint64_t> marks;
};

// Commits `writer`'s puts of `keys`; a key with no put of it in progress by `writer` (absent, committed,
// another's, or named twice: the second) is missing and unchanged. With `link`, each object committed
// goes last in that order (the eviction policy's plain insertion, done in the same walk of the rows); with
// `sample` above 0, those committed whose key's CRC-32 is divisible by it are named (the policy's sample).
EndedPuts end_puts(ObjectTable& t, const std::vector<std::string_view>& keys, uint32_t writer,
                   std::optional<Order> link = std::nullopt, uint32_t sample = 0);

// The rows of the puts in progress whose deadline passed at `now`, oldest first (reads no further than the
// first that has not); ended entries met at the front are dropped.
std::vector<Row> expired_puts(ObjectTable& t, double now);

// The rows of the puts in progress, oldest first: every writer's (`writer` 0), or one writer's.
std::vector<Row> puts_of(ObjectTable& t, uint32_t writer);

}  // namespace kvs::meta
