// Batch changes to the object table, one call per batch of the master (a put's new objects, a node's
// objects named back, commits, removals, a segment's loss). The batches that must be all or nothing check
// every key before changing anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "meta/object_table.h"

namespace kvs::meta {

// Admits the keys of a batch of new objects one at a time: a key is admitted when the table does not hold
// it and the batch has not named it before.
class NewKeys {
 public:
  explicit NewKeys(const ObjectTable& t) : table_(t) {}
  bool admit(std::string_view key) { return table_.find(key) == kNoRow && seen_.insert(key).second; }

 private:
  const ObjectTable& table_;
  std::unordered_set<std::string_view> seen_;
};

// A new object with its fields and copies (kvstore.master.objects.NewObject).
struct NewObject {
  std::string_view key;
  Object fields;  // size, checksum, writer, complete, pinned, last_access, base_replicas, hold_seq, disk
  std::vector<MemoryCopy> copies;
};

// Adds one object; kNoRow (nothing added) when the key is present.
Row add_object(ObjectTable& t, const NewObject& o);
// Adds every object; their keys must have been admitted by one NewKeys (std::logic_error otherwise, with
// the objects before that key added).
void add_objects(ObjectTable& t, const std::vector<NewObject>& objects);

// An object a node named back on a segment it restores (RestoreSegment's record).
struct NamedBack {
  uint64_t offset = 0;
  uint32_t slot = 0;
  uint64_t gen = 0;
  std::string_view key;
  uint64_t size = 0;
  uint64_t checksum = 0;
  bool pinned = false;
  uint64_t replicas = 1;  // what its put asked for
};

// Adds each object, committed, with its one copy on `segment`, asking for at most `most_replicas` copies;
// their keys must have been admitted by one NewKeys. Returns the bytes added.
uint64_t adopt(ObjectTable& t, uint32_t segment, const std::vector<NamedBack>& records, uint32_t writer,
               double last_access, uint8_t most_replicas);

// The rows of `keys`, or the index of the first key the table does not hold (rows then incomplete).
struct FoundRows {
  std::vector<Row> rows;
  size_t missing = SIZE_MAX;  // SIZE_MAX: every key found
};
FoundRows find_all(const ObjectTable& t, const std::vector<std::string_view>& keys);

// Marks the rows committed; the bytes of those that were not yet.
uint64_t commit_rows(ObjectTable& t, const std::vector<Row>& rows);

// Forgets the object; the bytes it leaves the stored total (its size if committed, else 0), or -1 when
// there is none.
int64_t erase_key(ObjectTable& t, std::string_view key);
// erase_key of each; the bytes they leave the stored total (absent keys count nothing).
uint64_t erase_keys(ObjectTable& t, const std::vector<std::string_view>& keys);

// What a segment's loss did to the objects of `keys`: (with `tell`) each copy dropped, by the index of its
// key; the indexes of the keys left with no copy and no disk record; and of those left with a disk record
// only.
struct DroppedCopy {
  uint32_t index = 0;
  MemoryCopy copy;
};
struct SegmentLoss {
  std::vector<DroppedCopy> dropped;
  std::vector<uint32_t> bare;
  std::vector<uint32_t> disk_only;
};
SegmentLoss drop_copies_on(ObjectTable& t, uint32_t segment, const std::vector<std::string_view>& keys,
                           bool tell);

}  // namespace kvs::meta
