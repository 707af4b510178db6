// The lease and heat rule of a read: the one copy of it. Every path of the master that uses an object applies
// it here: a reader's lookup of a batch (locate.h) and use_many below, which the master's single lookup
// (kvstore/master/service/access.py get_replicas), the reads clients served themselves (touch) and prefix
// matches call through the ledger; replication reads the decayed heat back (heat_at).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "meta/object_table.h"

namespace kvs::meta {

struct UseRule {
  double now = 0;
  double lease_until = 0;    // a lookup's lease reaches at least this (now + the lease's length); 0: no lease
  double half_life = 1;      // seconds for heat to halve; positive
  double hot_heat = 0;       // the heat at which an object is hot
  bool count_access = true;  // the use is a read (a lookup, or one a client served itself), not a match
};

// What use_many found of each key: bits the caller completes the use with (eviction orders, the disk tier,
// replication's attention).
enum UseFound : uint8_t {
  kUsed = 1,       // present and committed: the rule was applied
  kAttention = 2,  // replication must look at it (needs_attention)
  kInMemory = 4,   // it has a memory copy
  kOnDisk = 8,     // it has a disk record
};

// The object's heat at `now`: what it had at heat_time, halved every half_life seconds since.
double decayed_heat(const Object& o, double now, double half_life);

// One read of the object: its lease reaches rule.lease_until, last_access is now, the access counts (with
// rule.count_access), and its heat (decayed to now) grows by one.
void record_use(Object& o, const UseRule& rule);

// Whether replication must look at the object after a read: hot, below the copies its put asked for, or
// with a count set by change_replica. `copies`: its memory copies.
bool needs_attention(const Object& o, size_t copies, double hot_heat);

// Group names leased so far in one batch (a batch often reads a group whole: its members are leased once).
using LeasedGroups = std::unordered_set<std::string_view>;

// One use of the object in `row`, named `key`, under `rule`: with a lease, a member of a group stored whole
// leases every member of its group (once per group in `leased`); then record_use. Returns needs_attention.
bool use_object(ObjectTable& t, Row row, std::string_view key, const UseRule& rule, LeasedGroups& leased);

// use_object of each key present and committed (a member of a hidden group too: its reader read it while it
// was whole), in order; per key its UseFound bits (0: absent or a put in progress). std::invalid_argument
// unless rule.half_life > 0.
std::vector<uint8_t> use_many(ObjectTable& t, const std::vector<std::string_view>& keys, const UseRule& rule);

// The heat of the object in `row` at `now` (decayed_heat; std::invalid_argument unless half_life > 0).
double heat_at(const ObjectTable& t, Row row, double now, double half_life);

}  // namespace kvs::meta
