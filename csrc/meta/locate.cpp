#include "meta/locate.h"

#include <stdexcept>
#include <unordered_map>

#include "meta/crc32.h"
#include "meta/msgpack_writer.h"
#include "meta/object_groups.h"

namespace kvs::meta {
namespace {

// Segment id -> its copies' first fields, encoded once per call for the segments the batch meets (the
// caller knows every segment ever mounted: hundreds in a fleet).
class PlaceCache {
 public:
  explicit PlaceCache(const PlaceOf& place_of) : place_of_(place_of) {}

  const std::string& encoded(uint32_t segment) {
    auto it = encoded_.find(segment);
    if (it != encoded_.end()) return it->second;
    const std::optional<Place> p = place_of_(segment);
    if (!p) throw std::logic_error("a copy's segment has no place (tier, host, engine, region)");
    MsgpackWriter w;
    w.uint(p->tier);
    w.str(p->host);
    w.str(p->engine);
    w.uint(p->region);
    return encoded_.emplace(segment, w.data()).first->second;
  }

 private:
  const PlaceOf& place_of_;
  std::unordered_map<uint32_t, std::string> encoded_;
};

void write_copies(MsgpackWriter& reply, const ObjectTable& t, Row row, PlaceCache& places) {
  const Object& o = t.at(row);
  const size_t copies = t.copy_count(row);
  reply.array(3);
  reply.uint(o.size);
  reply.uint(o.checksum);
  reply.array(static_cast<uint32_t>(copies));
  for (size_t c = 0; c < copies; ++c) {
    const MemoryCopy& m = t.copy(row, c);
    reply.array(8);
    reply.raw(places.encoded(m.segment));
    reply.uint(m.offset);
    reply.uint(m.slot);
    reply.uint(m.gen);
    reply.str("");  // a memory copy is read through its engine: no path
  }
}

// A hit's part for the eviction policy (ReadTouch): moved last in its order; whether it is named back.
bool touched_and_sampled(ObjectTable& t, Row row, std::string_view key, const ReadTouch& touch) {
  if (touch.order) {
    if (!t.linked(*touch.order, row)) return false;
    t.push_back(*touch.order, row);
  }
  return touch.sample != 0 && (touch.sample == 1 || crc32(key) % touch.sample == 0);
}

}  // namespace

Located locate_many(ObjectTable& t, const std::vector<std::string_view>& keys, bool prefix,
                    const UseRule& rule, bool transient, const PlaceOf& place_of, const ReadTouch& touch) {
  if (!(rule.half_life > 0)) throw std::invalid_argument("half_life must be positive");
  PlaceCache places(place_of);
  const size_t n = keys.size();
  MsgpackWriter reply;
  reply.reserve(n * 64);
  reply.array(static_cast<uint32_t>(n));
  Located out;
  LeasedGroups leased;
  size_t i = 0;
  for (; i < n; ++i) {
    const Row row = t.find(keys[i]);
    if (row == kNoRow || !visible(t.at(row))) {
      reply.nil();
      if (prefix) break;
      continue;
    }
    const bool attention = use_object(t, row, keys[i], rule, leased);
    const Object& o = t.at(row);
    out.hits.push_back(static_cast<uint32_t>(i));
    if (touched_and_sampled(t, row, keys[i], touch)) out.sampled.push_back(static_cast<uint32_t>(i));
    const size_t copies = t.copy_count(row);
    if (copies == 0) {
      reply.nil();
    } else {
      write_copies(reply, t, row, places);
    }
    if (attention || copies == 0 || o.disk_segment != 0 || transient)
      out.notes.push_back({static_cast<uint32_t>(i), copies > 0, o.disk_segment, attention});
  }
  for (++i; i < n; ++i) reply.nil();  // after a prefix's first miss
  out.reply = reply.take();
  return out;
}

}  // namespace kvs::meta
