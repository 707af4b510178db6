// The lease and heat rule of a read, as the table applies it to a batch (locate.h). The master's Python
// applies the same rule to a single read (kvstore/master/access.py get_replicas: the lease;
// kvstore/master/replication.py Replicator.note_access / _decayed: the heat and the attention test);
// tests/unit/kvstore/test_lease_heat_rule_agrees.py checks that the two agree.
#pragma once

#include <cstddef>

#include "meta/object_table.h"

namespace kvs::meta {

struct UseRule {
  double now = 0;
  double lease_until = 0;  // a read's lease reaches at least this (now + the lease's length)
  double half_life = 1;    // seconds for heat to halve; positive
  double hot_heat = 0;     // the heat at which an object is hot
};

// The object's heat at `now`: what it had at heat_time, halved every half_life seconds since.
double decayed_heat(const Object& o, double now, double half_life);

// One read of the object: its lease reaches rule.lease_until, last_access is now, the access counts, and
// its heat (decayed to now) grows by one.
void record_use(Object& o, const UseRule& rule);

// Whether replication must look at the object after a read: hot, below the copies its put asked for, or
// with a count set by change_replica. `copies`: its memory copies.
bool needs_attention(const Object& o, size_t copies, double hot_heat);

}  // namespace kvs::meta
