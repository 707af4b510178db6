#include "meta/object_use.h"

#include <cmath>
#include <stdexcept>

#include "meta/object_groups.h"

namespace kvs::meta {
namespace {

void check_half_life(double half_life) {
  if (!(half_life > 0)) throw std::invalid_argument("half_life must be positive");
}

}  // namespace

double decayed_heat(const Object& o, double now, double half_life) {
  const double idle = now > o.heat_time ? now - o.heat_time : 0.0;
  return o.heat * std::exp2(-idle / half_life);
}

void record_use(Object& o, const UseRule& rule) {
  if (o.lease_until < rule.lease_until) o.lease_until = rule.lease_until;
  o.last_access = rule.now;
  if (rule.count_access) ++o.access_count;
  o.heat = decayed_heat(o, rule.now, rule.half_life) + 1.0;
  o.heat_time = rule.now;
}

bool needs_attention(const Object& o, size_t copies, double hot_heat) {
  return o.heat >= hot_heat || copies < o.base_replicas || o.target_replicas != 0;
}

bool use_object(ObjectTable& t, Row row, std::string_view key, const UseRule& rule, LeasedGroups& leased) {
  if (rule.lease_until > 0 && t.at(row).group == kShown && leased.insert(group_of(key).group).second)
    lease_group(t, key, rule.lease_until);
  Object& o = t.at(row);
  record_use(o, rule);
  return needs_attention(o, t.copy_count(row), rule.hot_heat);
}

std::vector<uint8_t> use_many(ObjectTable& t, const std::vector<std::string_view>& keys,
                              const UseRule& rule) {
  check_half_life(rule.half_life);
  std::vector<uint8_t> found(keys.size(), 0);
  LeasedGroups leased;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Row row = t.find(keys[i]);
    if (row == kNoRow || !t.at(row).complete) continue;
    uint8_t bits = kUsed;
    if (use_object(t, row, keys[i], rule, leased)) bits |= kAttention;
    if (t.copy_count(row) > 0) bits |= kInMemory;
    if (t.at(row).disk_segment != 0) bits |= kOnDisk;
    found[i] = bits;
  }
  return found;
}

double heat_at(const ObjectTable& t, Row row, double now, double half_life) {
  check_half_life(half_life);
  return decayed_heat(t.at(row), now, half_life);
}

}  // namespace kvs::meta
