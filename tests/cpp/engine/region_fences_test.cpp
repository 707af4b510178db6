// region_fences: a fenced region's kills, floors, announcements and the owner's own access, by region id.
#include "engine/region_fences.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/fence.h"

namespace kvs {
namespace {

class RegionFences : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<RegionInfo> fenced = registry_.allocate(1 << 16, false, 8);
    StatusOr<RegionInfo> plain = registry_.allocate(1 << 16, false);
    ASSERT_TRUE(fenced.ok() && plain.ok()) << fenced.status().message() << plain.status().message();
    fenced_ = fenced.value().id;
    plain_ = plain.value().id;
  }
  // A peer's admission of [offset, offset + length) of (slot, gen), without waiting for an announcement.
  bool peer_admitted(uint32_t slot, uint64_t gen, uint64_t offset, uint64_t length) {
    FenceTable* fence = registry_.find(fenced_)->fence();
    if (!fence->enter(slot, gen, offset, length, false, 0)) return false;
    fence->leave(slot);
    return true;
  }

  MemoryRegistry registry_;
  uint64_t fenced_ = 0;
  uint64_t plain_ = 0;
};

TEST_F(RegionFences, UnknownOrUnfencedRegionsAndBadListsAreInvalid) {
  for (const uint64_t id : {plain_, uint64_t{999}}) {
    EXPECT_EQ(kill_allocations(registry_, id, {1}, {1}, 10).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(raise_fence_floor(registry_, id, 1, 10).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(fence_enter(registry_, id, 1, 1).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(announce_allocations(registry_, id, {1}, {1}, {0}, {64}).code(), Code::kInvalidArgument);
    fence_leave(registry_, id, 1);  // nothing to end: no effect
  }
  const StatusOr<bool> bad = kill_allocations(registry_, fenced_, {1, 2}, {1}, 10);
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "no fenced region with that id, or bad lists");
  EXPECT_EQ(announce_allocations(registry_, fenced_, {1}, {1, 2}, {0}, {64}).code(), Code::kInvalidArgument);
}

TEST_F(RegionFences, AnAnnouncementOutsideTheRegionAnnouncesNothing) {
  const Status st = announce_allocations(registry_, fenced_, {1, 2}, {5, 6}, {0, (1 << 16) - 32}, {64, 64});
  EXPECT_EQ(st.code(), Code::kOutOfRange);
  EXPECT_FALSE(peer_admitted(1, 5, 0, 64));  // the first, in bounds, was not announced either
  ASSERT_TRUE(announce_allocations(registry_, fenced_, {1}, {5}, {0}, {64}).ok());
  EXPECT_TRUE(peer_admitted(1, 5, 0, 64));
  EXPECT_FALSE(peer_admitted(1, 5, 32, 64));  // outside the announced range
}

TEST_F(RegionFences, AKillWaitsForTheOwnersAccessAndThenShutsIt) {
  ASSERT_TRUE(fence_enter(registry_, fenced_, 2, 7).value());
  const StatusOr<bool> busy = kill_allocations(registry_, fenced_, {2}, {7}, 20);
  ASSERT_TRUE(busy.ok());
  EXPECT_FALSE(busy.value());  // the access admitted before is still in
  fence_leave(registry_, fenced_, 2);
  EXPECT_TRUE(kill_allocations(registry_, fenced_, {2}, {7}, 20).value());
  EXPECT_FALSE(fence_enter(registry_, fenced_, 2, 7).value());
  fence_leave(registry_, fenced_, 99);  // a slot past the table: no effect
}

TEST_F(RegionFences, AFloorKillsEveryGenerationAtOrBelowIt) {
  EXPECT_TRUE(raise_fence_floor(registry_, fenced_, 10, 20).value());
  EXPECT_FALSE(fence_enter(registry_, fenced_, 3, 10).value());
  ASSERT_TRUE(fence_enter(registry_, fenced_, 3, 11).value());
  fence_leave(registry_, fenced_, 3);
}

}  // namespace
}  // namespace kvs
