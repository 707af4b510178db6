// A shadow cache's replay of sampled references (kvstore.master.planners.eviction: the adaptive policy's
// duel between LRU and bimodal insertion), a batch in one call: the keys of a get batch's sample were
// replayed one Python step per key and shadow, a third of the master's work on a batch lookup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "meta/hash_order.h"

namespace kvs::meta {

// One key-only LRU cache of `capacity` keys and its ghost list (the last 4 x capacity keys it evicted),
// both holding hashes of the same seed, replaying `hashes` in order: each decays `hits` by `decay` and
// then counts a hit (the key moves last) or inserts it (last, or first under bimodal insertion unless the
// ghost remembers it), evicting the first keys into the ghost past `capacity`. Returns the hits after.
[[nodiscard]] double replay_shadow(HashOrder& order, HashOrder& ghost, const std::vector<uint64_t>& hashes,
                                   size_t capacity, bool bimodal, double decay, double hits);

}  // namespace kvs::meta
