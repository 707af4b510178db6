// OffsetAllocator: best-fit extents inside one segment, exact reservations, coalescing frees.
#include "meta/offset_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <vector>

namespace kvs {
namespace {

TEST(OffsetAllocator, AllocationsAreAlignedDisjointAndCounted) {
  OffsetAllocator a(4096, 64);
  const auto first = a.allocate(1);
  const auto second = a.allocate(100);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(*first % 64, 0u);
  EXPECT_EQ(*second % 64, 0u);
  EXPECT_EQ(a.block_size(*first), 64u);
  EXPECT_EQ(a.block_size(*second), 128u);
  EXPECT_TRUE(*first + 64 <= *second || *second + 128 <= *first);
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.used, 192u);
  EXPECT_EQ(s.free, 4096u - 192u);
  EXPECT_EQ(s.allocations, 2u);
}

TEST(OffsetAllocator, RefusesZeroOversizedAndOverflowingSizes) {
  OffsetAllocator a(4096, 64);
  EXPECT_FALSE(a.allocate(0));
  EXPECT_FALSE(a.allocate(4097));
  EXPECT_FALSE(a.allocate(std::numeric_limits<uint64_t>::max()));
  OffsetAllocator whole(std::numeric_limits<uint64_t>::max(), 64);
  EXPECT_FALSE(whole.allocate(std::numeric_limits<uint64_t>::max() - 1));  // rounding up wraps
  EXPECT_EQ(a.stats().allocations, 0u);
}

TEST(OffsetAllocator, BestFitTakesTheSmallestHole) {
  OffsetAllocator a(1000, 1);
  const uint64_t x = *a.allocate(100);  // [0, 100)
  ASSERT_TRUE(a.allocate(10));          // [100, 110)
  const uint64_t y = *a.allocate(30);   // [110, 140)
  ASSERT_TRUE(a.allocate(10));          // [140, 150)
  ASSERT_TRUE(a.free(x));
  ASSERT_TRUE(a.free(y));
  EXPECT_EQ(*a.allocate(25), y);  // the 30-byte hole, not the 100-byte one nor the tail
}

TEST(OffsetAllocator, FreeCoalescesBothNeighbours) {
  OffsetAllocator a(300, 1);
  const uint64_t x = *a.allocate(100);
  const uint64_t y = *a.allocate(100);
  const uint64_t z = *a.allocate(100);
  EXPECT_EQ(a.largest_free(), 0u);
  ASSERT_TRUE(a.free(x));
  ASSERT_TRUE(a.free(z));
  EXPECT_EQ(a.stats().free_extents, 2u);
  ASSERT_TRUE(a.free(y));
  EXPECT_EQ(a.stats().free_extents, 1u);
  EXPECT_EQ(a.largest_free(), 300u);
  EXPECT_DOUBLE_EQ(a.stats().fragmentation(), 0.0);
}

TEST(OffsetAllocator, FreeOfAnUnknownOffsetChangesNothing) {
  OffsetAllocator a(1024, 64);
  const uint64_t x = *a.allocate(128);
  EXPECT_FALSE(a.free(x + 64));  // inside a block, not its start
  EXPECT_FALSE(a.free(512));     // free space
  EXPECT_TRUE(a.free(x));
  EXPECT_FALSE(a.free(x));  // twice
  EXPECT_EQ(a.stats().used, 0u);
}

TEST(OffsetAllocator, ReserveTakesExactlyTheRangeOrNothing) {
  OffsetAllocator a(1024, 64);
  EXPECT_TRUE(a.reserve(256, 100));  // [256, 384)
  EXPECT_EQ(a.block_size(256), 128u);
  EXPECT_FALSE(a.reserve(320, 64));   // overlaps it
  EXPECT_FALSE(a.reserve(200, 64));   // misaligned
  EXPECT_FALSE(a.reserve(960, 128));  // past the end
  EXPECT_FALSE(a.reserve(std::numeric_limits<uint64_t>::max() - 63, 64));
  EXPECT_FALSE(a.reserve(0, 0));
  EXPECT_EQ(a.stats().allocations, 1u);
  EXPECT_TRUE(a.reserve(0, 256));    // the hole before it, whole
  EXPECT_TRUE(a.reserve(384, 640));  // and the one after
  EXPECT_EQ(a.stats().free, 0u);
  EXPECT_FALSE(a.allocate(1));
}

TEST(OffsetAllocator, RandomWorkloadKeepsBlocksDisjointAndTheBooksBalanced) {
  constexpr uint64_t kCapacity = 1 << 20;
  OffsetAllocator a(kCapacity, 256);
  std::map<uint64_t, uint64_t> live;  // offset -> size, as the allocator reports it
  uint64_t seed = 99;
  for (int step = 0; step < 20000; ++step) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    if (live.empty() || (seed >> 62) != 0) {
      const uint64_t size = 1 + (seed >> 20) % 20000;
      const auto at = a.allocate(size);
      if (!at) {
        EXPECT_LT(a.largest_free(), (size + 255) / 256 * 256);
        continue;
      }
      const uint64_t rounded = a.block_size(*at);
      ASSERT_GE(rounded, size);
      ASSERT_LE(*at + rounded, kCapacity);
      auto next = live.lower_bound(*at);
      if (next != live.end()) {
        ASSERT_LE(*at + rounded, next->first);
      }
      if (next != live.begin()) {
        ASSERT_LE(std::prev(next)->first + std::prev(next)->second, *at);
      }
      live[*at] = rounded;
    } else {
      auto victim = live.begin();
      std::advance(victim, static_cast<long>((seed >> 8) % live.size()));
      ASSERT_TRUE(a.free(victim->first));
      live.erase(victim);
    }
  }
  uint64_t used = 0;
  for (const auto& [offset, size] : live) used += size;
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.used, used);
  EXPECT_EQ(s.allocations, live.size());
  for (const auto& [offset, size] : live) ASSERT_TRUE(a.free(offset));
  EXPECT_EQ(a.stats().free_extents, 1u);
  EXPECT_EQ(a.largest_free(), kCapacity);
}

}  // namespace
}  // namespace kvs
