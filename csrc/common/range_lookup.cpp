#include "common/range_lookup.h"

#include <algorithm>
#include <limits>

namespace kvs {

bool range_tags(const int64_t* starts, const int64_t* ends, const int64_t* tags, size_t ranges,
                const uint64_t* addrs, const uint64_t* lengths, size_t n, int64_t* found) {
  auto holds = [&](size_t k, uint64_t addr, uint64_t length) {
    const auto end = static_cast<uint64_t>(ends[k]);
    return addr >= static_cast<uint64_t>(starts[k]) && addr <= end && length <= end - addr;
  };
  constexpr auto kTop = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  size_t last = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t addr = addrs[i];
    const uint64_t length = lengths[i];
    if (length == 0 || ranges == 0) return false;
    size_t k = last;
    if (!holds(k, addr, length)) {
      k = last + 1 < ranges ? last + 1 : 0;
      if (!holds(k, addr, length) && last > 0) k = last - 1;  // (mappings are often made downwards)
      if (!holds(k, addr, length)) {
        // the last range starting at or before addr
        const int64_t* at =
            std::upper_bound(starts, starts + ranges, static_cast<int64_t>(std::min(addr, kTop)));
        if (at == starts) return false;
        k = static_cast<size_t>(at - starts) - 1;
        if (!holds(k, addr, length)) return false;
      }
    }
    last = k;
    found[i] = tags[k];
  }
  return true;
}

}  // namespace kvs
