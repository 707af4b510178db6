#include "meta/object_use.h"

#include <cmath>

namespace kvs::meta {

double decayed_heat(const Object& o, double now, double half_life) {
  const double idle = now > o.heat_time ? now - o.heat_time : 0.0;
  return o.heat * std::exp2(-idle / half_life);
}

void record_use(Object& o, const UseRule& rule) {
  if (o.lease_until < rule.lease_until) o.lease_until = rule.lease_until;
  o.last_access = rule.now;
  ++o.access_count;
  o.heat = decayed_heat(o, rule.now, rule.half_life) + 1.0;
  o.heat_time = rule.now;
}

bool needs_attention(const Object& o, size_t copies, double hot_heat) {
  return o.heat >= hot_heat || copies < o.base_replicas || o.target_replicas != 0;
}

}  // namespace kvs::meta
