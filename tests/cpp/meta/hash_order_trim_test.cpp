// HashOrder::trim: a ghost list cut to its bound in one call, exactly as pop_first one at a time cuts it.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "meta/hash_order.h"

namespace kvs::meta {
namespace {

std::vector<uint64_t> drain(HashOrder& order) {
  std::vector<uint64_t> out;
  while (const auto h = order.pop_first()) out.push_back(*h);
  return out;
}

TEST(HashOrderTrim, RemovesTheFirstEntriesDownToTheLimit) {
  HashOrder order;
  for (uint64_t h = 1; h <= 10; ++h) order.add(h, false);
  EXPECT_EQ(order.trim(4), 6u);
  EXPECT_EQ(order.size(), 4u);
  EXPECT_EQ(drain(order), (std::vector<uint64_t>{7, 8, 9, 10}));
}

TEST(HashOrderTrim, WithinTheLimitRemovesNothing) {
  HashOrder order;
  EXPECT_EQ(order.trim(0), 0u);
  order.add(5, false);
  order.add(6, true);
  EXPECT_EQ(order.trim(2), 0u);
  EXPECT_EQ(order.trim(7), 0u);
  EXPECT_EQ(drain(order), (std::vector<uint64_t>{6, 5}));
}

TEST(HashOrderTrim, ToZeroEmptiesItAndItTakesEntriesAgain) {
  HashOrder order;
  for (uint64_t h = 1; h <= 100; ++h) order.add(h, false);
  EXPECT_EQ(order.trim(0), 100u);
  EXPECT_EQ(order.size(), 0u);
  EXPECT_FALSE(order.contains(1));
  order.add(3, false);
  order.add(1, false);
  EXPECT_EQ(drain(order), (std::vector<uint64_t>{3, 1}));
}

TEST(HashOrderTrim, LeavesWhatPopFirstOneAtATimeLeaves) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 50; ++round) {
    HashOrder trimmed, popped;
    for (int i = 0; i < 2000; ++i) {  // adds (some moving a present hash), front adds and discards
      const uint64_t h = rng() % 700;
      const auto op = rng() % 4;
      if (op == 3) {
        trimmed.discard(h);
        popped.discard(h);
      } else {
        trimmed.add(h, op == 2);
        popped.add(h, op == 2);
      }
    }
    const size_t limit = rng() % 800;
    size_t expected = 0;
    while (popped.size() > limit && popped.pop_first()) ++expected;
    EXPECT_EQ(trimmed.trim(limit), expected);
    EXPECT_EQ(drain(trimmed), drain(popped));
  }
}

}  // namespace
}  // namespace kvs::meta
