// object_use: the lease and heat rule of a read, and its uses over a batch of keys.
#include "meta/object_use.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace kvs::meta {
namespace {

TEST(ObjectUse, HeatHalvesEveryHalfLifeAndNeverGrowsBackwards) {
  Object o;
  o.heat = 8;
  o.heat_time = 100;
  EXPECT_DOUBLE_EQ(decayed_heat(o, 100, 10), 8);
  EXPECT_DOUBLE_EQ(decayed_heat(o, 110, 10), 4);
  EXPECT_DOUBLE_EQ(decayed_heat(o, 130, 10), 1);
  EXPECT_DOUBLE_EQ(decayed_heat(o, 90, 10), 8);  // a clock behind heat_time: no decay, no growth
}

TEST(ObjectUse, AReadLeasesCountsAndHeats) {
  Object o;
  o.heat = 4;
  o.heat_time = 0;
  o.lease_until = 5;
  record_use(o, UseRule{10, 40, 10, 100});
  EXPECT_EQ(o.lease_until, 40);
  EXPECT_EQ(o.last_access, 10);
  EXPECT_EQ(o.access_count, 1u);
  EXPECT_DOUBLE_EQ(o.heat, 3);  // 4 halved once, plus this read
  EXPECT_EQ(o.heat_time, 10);
  o.lease_until = 90;
  record_use(o, UseRule{10, 40, 10, 100});
  EXPECT_EQ(o.lease_until, 90);  // a longer lease stays
  EXPECT_DOUBLE_EQ(o.heat, 4);
  EXPECT_EQ(o.access_count, 2u);
}

TEST(ObjectUse, AttentionForHotShortOrSetObjects) {
  Object o;
  o.base_replicas = 2;
  o.heat = 1;
  EXPECT_FALSE(needs_attention(o, 2, 5));
  EXPECT_TRUE(needs_attention(o, 1, 5));  // below what its put asked for
  o.heat = 5;
  EXPECT_TRUE(needs_attention(o, 2, 5));  // hot
  o.heat = 1;
  o.target_replicas = 3;
  EXPECT_TRUE(needs_attention(o, 2, 5));  // change_replica set a count
}

TEST(ObjectUse, AMatchHeatsWithoutCountingARead) {
  Object o;
  record_use(o, UseRule{10, 0, 10, 100, false});
  EXPECT_EQ(o.access_count, 0u);
  EXPECT_EQ(o.lease_until, 0);  // no lease asked
  EXPECT_EQ(o.last_access, 10);
  EXPECT_DOUBLE_EQ(o.heat, 1);
}

Row stored(ObjectTable& t, const std::string& key, bool complete = true, uint8_t group = kNotMember) {
  const Row row = t.insert(key);
  t.at(row).complete = complete;
  t.at(row).group = group;
  return row;
}

TEST(ObjectUse, UseManyAppliesTheRuleToCommittedObjectsAndSaysWhatItFound) {
  ObjectTable t;
  const Row copied = stored(t, "copied");
  t.add_copy(copied, MemoryCopy{1, 2, 4096, 3});
  const Row on_disk = stored(t, "on-disk");
  t.at(on_disk).disk_segment = 5;
  const Row writing = stored(t, "writing", false);
  const Row hidden = stored(t, "g#0of2", true, kHidden);  // read while its group was whole: still a use
  const std::vector<uint8_t> found =
      use_many(t, {"copied", "absent", "on-disk", "writing", "g#0of2"}, UseRule{20, 25, 10, 100});
  // "on-disk" has no memory copy: below the one copy its put asked for, so replication looks at it.
  const std::vector<uint8_t> expected{kUsed | kInMemory, 0, kUsed | kAttention | kOnDisk, 0,
                                      kUsed | kAttention};
  EXPECT_EQ(found, expected);
  for (const Row row : {copied, on_disk, hidden}) {
    EXPECT_EQ(t.at(row).lease_until, 25);
    EXPECT_EQ(t.at(row).access_count, 1u);
    EXPECT_DOUBLE_EQ(t.at(row).heat, 1);
    EXPECT_EQ(t.at(row).heat_time, 20);
  }
  EXPECT_EQ(t.at(writing).access_count, 0u);  // a put in progress is not read
  EXPECT_EQ(t.at(writing).heat_time, 0);
}

TEST(ObjectUse, UseManyLeasesAWholeGroupOnlyWithALease) {
  ObjectTable t;
  const Row m0 = stored(t, "g#0of2", true, kShown);
  const Row m1 = stored(t, "g#1of2", true, kShown);
  use_many(t, {"g#0of2"}, UseRule{1, 0, 10, 100});  // a use without a lease (touch, a match)
  EXPECT_EQ(t.at(m1).lease_until, 0);
  use_many(t, {"g#0of2", "g#1of2"}, UseRule{2, 8, 10, 100});
  EXPECT_EQ(t.at(m0).lease_until, 8);
  EXPECT_EQ(t.at(m1).lease_until, 8);
  EXPECT_EQ(t.at(m1).access_count, 1u);  // leased with its group, read once
}

TEST(ObjectUse, AKeyUsedTwiceInABatchIsUsedTwice) {
  ObjectTable t;
  const Row row = stored(t, "k");
  use_many(t, {"k", "k"}, UseRule{0, 0, 10, 100});
  EXPECT_EQ(t.at(row).access_count, 2u);
  EXPECT_DOUBLE_EQ(t.at(row).heat, 2);
}

TEST(ObjectUse, HeatAtIsTheDecayedHeatAndTheHalfLifeMustBePositive) {
  ObjectTable t;
  const Row row = stored(t, "k");
  t.at(row).heat = 6;
  t.at(row).heat_time = 4;
  EXPECT_DOUBLE_EQ(heat_at(t, row, 14, 5), 1.5);
  EXPECT_EQ(t.at(row).heat, 6);  // reading the heat changes nothing
  EXPECT_THROW(heat_at(t, row, 14, 0), std::invalid_argument);
  EXPECT_THROW(use_many(t, {"k"}, UseRule{0, 0, -1, 100}), std::invalid_argument);
  EXPECT_EQ(t.at(row).access_count, 0u);
}

}  // namespace
}  // namespace kvs::meta
