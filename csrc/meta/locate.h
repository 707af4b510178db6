// A reader's lookup of a batch of keys in the object table (the master's get_replicas of a batch): every
// hit is a use (object_use.h: lease, access, heat; a hit on a group member leases its whole group), and the
// reply is encoded here, msgpack, as the client decodes it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meta/object_table.h"
#include "meta/object_use.h"

namespace kvs::meta {

// Where a segment lives: a memory copy's first four fields in the reply.
struct Place {
  uint64_t tier = 0;
  std::string_view host;
  std::string_view engine;
  uint64_t region = 0;
};

// A segment's place; nullopt when the caller knows none (then locate_many throws std::logic_error).
using PlaceOf = std::function<std::optional<Place>(uint32_t segment)>;

// A hit the caller must look at: with no copy in memory, on a disk (with `transient`, every one in memory
// too), or needing replication's attention.
struct LocateNote {
  uint32_t index = 0;  // in the batch
  bool in_memory = false;
  uint32_t disk_segment = 0;
  bool attention = false;
};

// What a lookup does in the same pass for the memory tier's eviction policy, whose order is the table's
// (kvstore.master.planners.eviction read_touch): each hit linked in `order` moves last, and those whose
// key's CRC-32 (crc32.h) is divisible by `sample` are named back, the references the policy samples. With
// no order nothing moves and the sample is of every hit (sample 1: all of them, as the caller's own
// policy needs); sample 0 names none.
struct ReadTouch {
  std::optional<Order> order;
  uint32_t sample = 1;
};

struct Located {
  // Per key nil (a miss; with `prefix`, every key after the first miss too; also a hit with no copy in
  // memory, which the caller fills) or [size, checksum, [[tier, host, engine, region, offset, slot, gen,
  // ""], ...]].
  std::string reply;
  std::vector<uint32_t> hits;     // the indexes of the keys found, in order
  std::vector<uint32_t> sampled;  // the indexes of the hits ReadTouch names, in order
  std::vector<LocateNote> notes;
};

// The lookup of `keys` under `rule` (std::invalid_argument unless rule.half_life > 0).
Located locate_many(ObjectTable& t, const std::vector<std::string_view>& keys, bool prefix,
                    const UseRule& rule, bool transient, const PlaceOf& place_of,
                    const ReadTouch& touch = {});

}  // namespace kvs::meta
