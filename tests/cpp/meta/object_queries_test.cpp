// object_queries: eviction's candidates, a segment's objects, walks, and which of a batch are stored.
#include "meta/object_queries.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvs::meta {
namespace {

Row committed(ObjectTable& t, const std::string& key) {
  const Row row = t.insert(key);
  t.at(row).complete = true;
  return row;
}

TEST(ObjectQueries, VictimStateSaysNoYesOrHeld) {
  ObjectTable t;
  const Row row = committed(t, "k");
  t.add_copy(row, MemoryCopy{1, 0, 0, 1});
  EXPECT_EQ(victim_state(t, "absent", 10, false), VictimState::kNo);
  EXPECT_EQ(victim_state(t, "k", 10, false), VictimState::kYes);
  EXPECT_EQ(victim_state(t, "k", 10, true), VictimState::kNo);  // no disk record
  t.at(row).disk_segment = 2;
  EXPECT_EQ(victim_state(t, "k", 10, true), VictimState::kYes);
  t.at(row).lease_until = 11;
  EXPECT_EQ(victim_state(t, "k", 10, false), VictimState::kHeld);
  EXPECT_EQ(victim_state(t, "k", 11, false), VictimState::kYes);  // a lease ends at its time
  t.at(row).pinned = true;
  EXPECT_EQ(victim_state(t, "k", 20, false), VictimState::kNo);
  t.at(row).pinned = false;
  t.at(row).complete = false;
  EXPECT_EQ(victim_state(t, "k", 20, false), VictimState::kNo);
}

TEST(ObjectQueries, FirstVictimsStepOverPutsPinsAndLeases) {
  ObjectTable t;
  const Row pending = t.insert("pending");
  const Row pinned = committed(t, "pinned");
  t.at(pinned).pinned = true;
  const Row held = committed(t, "held");
  t.at(held).lease_until = 50;
  const Row free_one = committed(t, "free");
  for (const Row row : {pending, pinned, held, free_one}) t.push_back(Order::kMemory, row);
  FirstVictims v = first_victims(t, Order::kMemory, 10);
  EXPECT_EQ(v.free, free_one);
  EXPECT_EQ(v.held, held);
  t.unlink(Order::kMemory, free_one);
  v = first_victims(t, Order::kMemory, 10);
  EXPECT_EQ(v.free, kNoRow);
  EXPECT_EQ(v.held, held);
  EXPECT_EQ(first_victims(t, Order::kDisk, 10).held, kNoRow);
}

TEST(ObjectQueries, RowsOnASegmentByCopyOrDiskRecord) {
  ObjectTable t;
  const Row a = t.insert("a");
  t.add_copy(a, MemoryCopy{1, 0, 0, 1});
  t.add_copy(a, MemoryCopy{2, 0, 0, 1});
  const Row b = t.insert("b");
  t.at(b).disk_segment = 2;
  t.erase(t.insert("gone"));
  EXPECT_EQ(rows_on(t, 2, false), (std::vector<Row>{a}));
  EXPECT_EQ(rows_on(t, 2, true), (std::vector<Row>{b}));
  EXPECT_TRUE(rows_on(t, 3, false).empty());
}

TEST(ObjectQueries, WalkAndScanGoInSlices) {
  ObjectTable t;
  std::vector<Row> rows;
  for (const char* key : {"a", "b", "c", "d"}) rows.push_back(t.insert(key));
  t.erase(rows[1]);
  for (const Row row : {rows[3], rows[0], rows[2]}) t.push_back(Order::kDisk, row);
  EXPECT_EQ(walk(t, Order::kDisk, kNoRow, 2), (std::vector<Row>{rows[3], rows[0]}));
  EXPECT_EQ(walk(t, Order::kDisk, rows[0], 5), (std::vector<Row>{rows[2]}));
  Row next = 0;
  EXPECT_EQ(scan(t, 0, 2, &next), (std::vector<Row>{rows[0], rows[2]}));  // the erased row is skipped
  EXPECT_EQ(next, rows[2] + 1);
  EXPECT_EQ(scan(t, next, 2, &next), (std::vector<Row>{rows[3]}));
  EXPECT_EQ(next, kNoRow);
}

TEST(ObjectQueries, WhichOfABatchAreStoredInMemoryOrShort) {
  ObjectTable t;
  const Row full = committed(t, "full");
  t.add_copy(full, MemoryCopy{1, 0, 0, 1});
  committed(t, "off");  // no copy in memory
  const Row pending = t.insert("pending");
  t.add_copy(pending, MemoryCopy{1, 1, 64, 2});
  const Row hidden = committed(t, "hidden");
  t.at(hidden).group = kHidden;
  const std::vector<std::string_view> keys{"absent", "full", "off", "pending", "hidden"};
  EXPECT_EQ(visible_mask(t, keys), (std::vector<bool>{false, true, true, false, false}));
  EXPECT_EQ(in_memory(t, keys), (std::vector<uint32_t>{1}));
  EXPECT_EQ(short_of_copies(t, keys), (std::vector<uint32_t>{2, 4}));
  EXPECT_EQ(first_present(t, keys), 1u);
  EXPECT_EQ(first_present(t, {"x", "y"}), 2u);
}

}  // namespace
}  // namespace kvs::meta
