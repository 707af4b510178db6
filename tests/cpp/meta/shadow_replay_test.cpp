// shadow_replay: a shadow cache and its ghost replaying references, hit by hit, insertion by insertion.
#include "meta/shadow_replay.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvs::meta {
namespace {

TEST(ShadowReplay, HitsAreDecayedBeforeEachReferenceAndCountedOnAHit) {
  HashOrder order, ghost;
  const double hits = replay_shadow(order, ghost, {1, 2, 1, 1}, 4, false, 0.5, 8.0);
  // 8 -> 4 (miss) -> 2 (miss) -> 1 + 1 (hit) -> 1 + 1 (hit)
  EXPECT_EQ(hits, 2.0);
  EXPECT_EQ(order.size(), 2u);
  EXPECT_EQ(ghost.size(), 0u);
}

TEST(ShadowReplay, LruInsertionEvictsTheLeastRecentIntoTheGhost) {
  HashOrder order, ghost;
  // capacity 2: 1, 2, 1 (hit: 2 is now first), 3 evicts 2
  EXPECT_EQ(replay_shadow(order, ghost, {1, 2, 1, 3}, 2, false, 1.0, 0.0), 1.0);
  EXPECT_TRUE(order.contains(1));
  EXPECT_TRUE(order.contains(3));
  EXPECT_FALSE(order.contains(2));
  EXPECT_TRUE(ghost.contains(2));
  EXPECT_EQ(order.pop_first(), 1u);
}

TEST(ShadowReplay, BimodalInsertionPutsANewKeyFirstUnlessTheGhostRemembersIt) {
  HashOrder order, ghost;
  // capacity 2, bimodal: 1 and 2 go first in turn (order 2, 1); 3 goes first and is evicted at once
  EXPECT_EQ(replay_shadow(order, ghost, {1, 2, 3}, 2, true, 1.0, 0.0), 0.0);
  EXPECT_FALSE(order.contains(3));
  EXPECT_TRUE(ghost.contains(3));
  // 3 again: the ghost remembers it, so it is admitted last; the first (2) goes
  EXPECT_EQ(replay_shadow(order, ghost, {3}, 2, true, 1.0, 0.0), 0.0);
  EXPECT_TRUE(order.contains(3));
  EXPECT_FALSE(ghost.contains(3));
  EXPECT_FALSE(order.contains(2));
  EXPECT_EQ(order.pop_first(), 1u);
}

TEST(ShadowReplay, TheGhostKeepsFourTimesTheCapacity) {
  HashOrder order, ghost;
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 100; ++k) keys.push_back(k);
  EXPECT_EQ(replay_shadow(order, ghost, keys, 3, false, 1.0, 0.0), 0.0);
  EXPECT_EQ(order.size(), 3u);
  EXPECT_EQ(ghost.size(), 12u);
  EXPECT_TRUE(ghost.contains(97));
  EXPECT_TRUE(ghost.contains(86));
  EXPECT_FALSE(ghost.contains(85));
  EXPECT_TRUE(order.contains(98));
}

}  // namespace
}  // namespace kvs::meta
