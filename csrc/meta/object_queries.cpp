#include "meta/object_queries.h"

#include "meta/object_groups.h"

namespace kvs::meta {
namespace {

// The indexes of the keys found in the table whose row passes `test`.
template <typename Test>
std::vector<uint32_t> indexes_where(const ObjectTable& t, const std::vector<std::string_view>& keys,
                                    Test test) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Row row = t.find(keys[i]);
    if (row != kNoRow && test(row)) out.push_back(static_cast<uint32_t>(i));
  }
  return out;
}

}  // namespace

VictimState victim_state(const ObjectTable& t, std::string_view key, double now, bool disk_backed) {
  const Row row = t.find(key);
  if (row == kNoRow) return VictimState::kNo;
  const Object& o = t.at(row);
  if (!o.complete || o.pinned) return VictimState::kNo;
  if (disk_backed && (o.disk_segment == 0 || t.copy_count(row) == 0)) return VictimState::kNo;
  return o.lease_until <= now ? VictimState::kYes : VictimState::kHeld;
}

FirstVictims first_victims(const ObjectTable& t, Order order, double now) {
  FirstVictims found;
  for (Row row = t.first(order); row != kNoRow; row = t.next(order, row)) {
    const Object& o = t.at(row);
    if (!o.complete || o.pinned) continue;
    if (o.lease_until <= now) {
      found.free = row;
      break;
    }
    if (found.held == kNoRow) found.held = row;
  }
  return found;
}

std::vector<Row> rows_on(const ObjectTable& t, uint32_t segment, bool disk) {
  std::vector<Row> out;
  for (Row row = 0; row < t.row_limit(); ++row) {
    if (!t.live(row)) continue;
    bool on = false;
    if (disk) {
      on = t.at(row).disk_segment == segment;
    } else {
      for (size_t c = 0; c < t.copy_count(row) && !on; ++c) on = t.copy(row, c).segment == segment;
    }
    if (on) out.push_back(row);
  }
  return out;
}

std::vector<Row> walk(const ObjectTable& t, Order order, Row after, size_t limit) {
  std::vector<Row> out;
  for (Row row = after == kNoRow ? t.first(order) : t.next(order, after); row != kNoRow && out.size() < limit;
       row = t.next(order, row)) {
    out.push_back(row);
  }
  return out;
}

std::vector<Row> scan(const ObjectTable& t, Row start, size_t limit, Row* next) {
  std::vector<Row> out;
  Row row = start;
  for (; row < t.row_limit() && out.size() < limit; ++row) {
    if (t.live(row)) out.push_back(row);
  }
  *next = row < t.row_limit() ? row : kNoRow;
  return out;
}

std::vector<bool> visible_mask(const ObjectTable& t, const std::vector<std::string_view>& keys) {
  std::vector<bool> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const Row row = t.find(keys[i]);
    out[i] = row != kNoRow && visible(t.at(row));
  }
  return out;
}

std::vector<uint32_t> in_memory(const ObjectTable& t, const std::vector<std::string_view>& keys) {
  return indexes_where(t, keys, [&t](Row row) { return t.at(row).complete && t.copy_count(row) > 0; });
}

std::vector<uint32_t> short_of_copies(const ObjectTable& t, const std::vector<std::string_view>& keys) {
  return indexes_where(t, keys, [&t](Row row) { return t.copy_count(row) < t.at(row).base_replicas; });
}

size_t first_present(const ObjectTable& t, const std::vector<std::string_view>& keys) {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (t.find(keys[i]) != kNoRow) return i;
  }
  return keys.size();
}

}  // namespace kvs::meta
