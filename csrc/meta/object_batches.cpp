#include "meta/object_batches.h"

#include <algorithm>
#include <stdexcept>

namespace kvs::meta {

Row add_object(ObjectTable& t, const NewObject& o) {
  const Row row = t.insert(o.key);
  if (row == kNoRow) return kNoRow;
  Object& f = t.at(row);
  f.size = o.fields.size;
  f.checksum = o.fields.checksum;
  f.writer = o.fields.writer;
  f.complete = o.fields.complete;
  f.pinned = o.fields.pinned;
  f.last_access = o.fields.last_access;
  f.base_replicas = o.fields.base_replicas;
  f.hold_seq = o.fields.hold_seq;
  f.disk_segment = o.fields.disk_segment;
  f.disk_offset = o.fields.disk_offset;
  for (const MemoryCopy& c : o.copies) t.add_copy(row, c);
  return row;
}

void add_objects(ObjectTable& t, const std::vector<NewObject>& objects) {
  for (const NewObject& o : objects) {
    if (add_object(t, o) == kNoRow) throw std::logic_error("a new object's key was not admitted");
  }
}

uint64_t adopt(ObjectTable& t, uint32_t segment, const std::vector<NamedBack>& records, uint32_t writer,
               double last_access, uint8_t most_replicas) {
  uint64_t added = 0;
  for (const NamedBack& r : records) {
    const Row row = t.insert(r.key);
    if (row == kNoRow) throw std::logic_error("a named-back object's key was not admitted");
    Object& o = t.at(row);
    o.size = r.size;
    o.checksum = r.checksum;
    o.writer = writer;
    o.complete = true;
    o.pinned = r.pinned;
    o.last_access = last_access;
    o.base_replicas = static_cast<uint8_t>(std::min<uint64_t>(r.replicas, most_replicas));
    t.add_copy(row, MemoryCopy{segment, r.slot, r.offset, r.gen});
    added += r.size;
  }
  return added;
}

FoundRows find_all(const ObjectTable& t, const std::vector<std::string_view>& keys) {
  FoundRows found;
  found.rows.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const Row row = t.find(keys[i]);
    if (row == kNoRow) {
      found.missing = i;
      break;
    }
    found.rows.push_back(row);
  }
  return found;
}

uint64_t commit_rows(ObjectTable& t, const std::vector<Row>& rows) {
  uint64_t added = 0;
  for (const Row row : rows) {
    Object& o = t.at(row);
    if (!o.complete) added += o.size;
    o.complete = true;
    t.end_put(row);
  }
  return added;
}

int64_t erase_key(ObjectTable& t, std::string_view key) {
  const Row row = t.find(key);
  if (row == kNoRow) return -1;
  const Object& o = t.at(row);
  const int64_t freed = o.complete ? static_cast<int64_t>(o.size) : 0;
  t.erase(row);
  return freed;
}

uint64_t erase_keys(ObjectTable& t, const std::vector<std::string_view>& keys) {
  uint64_t freed = 0;
  for (const std::string_view key : keys) {
    const int64_t f = erase_key(t, key);
    if (f > 0) freed += static_cast<uint64_t>(f);
  }
  return freed;
}

SegmentLoss drop_copies_on(ObjectTable& t, uint32_t segment, const std::vector<std::string_view>& keys,
                           bool tell) {
  SegmentLoss loss;
  std::vector<MemoryCopy> on_it;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Row row = t.find(keys[i]);
    if (row == kNoRow) continue;
    on_it.clear();
    for (size_t c = 0; c < t.copy_count(row); ++c) {
      if (t.copy(row, c).segment == segment) on_it.push_back(t.copy(row, c));
    }
    if (on_it.empty()) continue;
    const auto index = static_cast<uint32_t>(i);
    for (const MemoryCopy& c : on_it) {
      t.drop_copy(row, c);
      if (tell) loss.dropped.push_back({index, c});
    }
    if (t.copy_count(row) == 0) (t.at(row).disk_segment == 0 ? loss.bare : loss.disk_only).push_back(index);
  }
  return loss;
}

}  // namespace kvs::meta
