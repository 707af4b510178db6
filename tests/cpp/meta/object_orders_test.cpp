// object_orders: the eviction orders by key.
#include "meta/object_orders.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "meta/object_queries.h"

namespace kvs::meta {
namespace {

TEST(ObjectOrders, OrderNumbersAreZeroOrOne) {
  EXPECT_EQ(order_of(0), Order::kMemory);
  EXPECT_EQ(order_of(1), Order::kDisk);
  EXPECT_THROW(order_of(2), std::invalid_argument);
  EXPECT_THROW(order_of(-1), std::invalid_argument);
}

TEST(ObjectOrders, LinkTouchAndUnlinkByKey) {
  ObjectTable t;
  const Row a = t.insert("a");
  const Row b = t.insert("b");
  const Row c = t.insert("c");
  link_rows(t, Order::kMemory, {a, b}, false);
  link_rows(t, Order::kMemory, {c}, true);
  EXPECT_EQ(walk(t, Order::kMemory, kNoRow, 9), (std::vector<Row>{c, a, b}));
  EXPECT_TRUE(touch(t, Order::kMemory, "c"));
  EXPECT_FALSE(touch(t, Order::kDisk, "c"));  // not linked there
  EXPECT_EQ(touch_all(t, Order::kMemory, {"a", "absent"}), (std::vector<bool>{true, false}));
  EXPECT_EQ(walk(t, Order::kMemory, kNoRow, 9), (std::vector<Row>{b, c, a}));
  EXPECT_TRUE(linked_key(t, Order::kMemory, "b"));
  EXPECT_EQ(unlink_keys(t, Order::kMemory, {"absent", "b", "b"}), (std::vector<uint32_t>{1}));
  EXPECT_FALSE(linked_key(t, Order::kMemory, "b"));
  EXPECT_FALSE(unlink_key(t, Order::kMemory, "b"));
  EXPECT_TRUE(unlink_key(t, Order::kMemory, "c"));
  EXPECT_EQ(t.length(Order::kMemory), 1u);
}

}  // namespace
}  // namespace kvs::meta
