// region_fences' kill_allocations_but: the kept allocations of a fenced region, by region id, checked before
// anything is killed and taken in any order.
#include <gtest/gtest.h>

#include <vector>

#include "core/fence.h"
#include "engine/region_fences.h"

namespace kvs {
namespace {

class RegionFencesKillAllBut : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<RegionInfo> fenced = registry_.allocate(1 << 16, false, 8);
    StatusOr<RegionInfo> plain = registry_.allocate(1 << 16, false);
    ASSERT_TRUE(fenced.ok() && plain.ok()) << fenced.status().message() << plain.status().message();
    fenced_ = fenced.value().id;
    plain_ = plain.value().id;
  }
  bool alive(uint32_t slot, uint64_t gen) {
    if (!fence_enter(registry_, fenced_, slot, gen).value()) return false;
    fence_leave(registry_, fenced_, slot);
    return true;
  }
  Code refusal(const std::vector<uint32_t>& slots, const std::vector<uint64_t>& gens) {
    return kill_allocations_but(registry_, fenced_, 10, slots, gens, 10).status().code();
  }

  MemoryRegistry registry_;
  uint64_t fenced_ = 0;
  uint64_t plain_ = 0;
};

TEST_F(RegionFencesKillAllBut, BadRegionsAndKeptListsAreRefusedBeforeAnyKill) {
  for (const uint64_t id : {plain_, uint64_t{999}}) {
    EXPECT_EQ(kill_allocations_but(registry_, id, 10, {1}, {1}, 10).status().code(), Code::kInvalidArgument);
  }
  EXPECT_EQ(refusal({1, 2}, {5}), Code::kInvalidArgument);           // lists that differ
  EXPECT_EQ(refusal({1, 8}, {5, 5}), Code::kInvalidArgument);        // a slot past the table (8 slots)
  EXPECT_EQ(refusal({1, 2}, {5, 0}), Code::kInvalidArgument);        // generation 0 names no allocation
  EXPECT_EQ(refusal({4, 1, 4}, {5, 5, 6}), Code::kInvalidArgument);  // a slot named twice
  for (uint32_t slot = 0; slot < 8; ++slot) EXPECT_TRUE(alive(slot, 5)) << slot;  // nothing killed
}

TEST_F(RegionFencesKillAllBut, KeptAllocationsInAnyOrderStayAlive) {
  const StatusOr<bool> done = kill_allocations_but(registry_, fenced_, 10, {6, 1, 4}, {7, 3, 12}, 20);
  ASSERT_TRUE(done.ok()) << done.status().message();
  EXPECT_TRUE(done.value());
  EXPECT_TRUE(alive(6, 7));
  EXPECT_TRUE(alive(1, 3));
  EXPECT_FALSE(alive(1, 2));
  EXPECT_TRUE(alive(4, 12));
  for (uint32_t slot : {0u, 2u, 3u, 5u, 7u}) {
    EXPECT_FALSE(alive(slot, 10)) << slot;
    EXPECT_TRUE(alive(slot, 11)) << slot;
  }
}

TEST_F(RegionFencesKillAllBut, WaitsForTheOwnersAccess) {
  ASSERT_TRUE(fence_enter(registry_, fenced_, 2, 7).value());
  const StatusOr<bool> busy = kill_allocations_but(registry_, fenced_, 10, {}, {}, 20);
  ASSERT_TRUE(busy.ok());
  EXPECT_FALSE(busy.value());
  fence_leave(registry_, fenced_, 2);
  EXPECT_TRUE(kill_allocations_but(registry_, fenced_, 10, {}, {}, 20).value());
}

}  // namespace
}  // namespace kvs
