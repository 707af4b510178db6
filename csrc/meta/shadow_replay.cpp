#include "meta/shadow_replay.h"

#include <algorithm>

namespace kvs::meta {

double replay_shadow(HashOrder& order, HashOrder& ghost, const std::vector<uint64_t>& hashes, size_t capacity,
                     bool bimodal, double decay, double hits) {
  const size_t ghost_capacity = 4 * std::max<size_t>(capacity, 1);
  for (const uint64_t h : hashes) {
    hits *= decay;
    if (order.touch(h)) {
      hits += 1;
      continue;
    }
    // (bimodal insertion puts a key first unless the ghost remembers it: then it is admitted, last)
    order.add(h, bimodal && !ghost.discard(h));
    while (order.size() > capacity) {
      ghost.add(*order.pop_first(), false);
      while (ghost.size() > ghost_capacity) (void)ghost.pop_first();
    }
  }
  return hits;
}

}  // namespace kvs::meta
