// object_use: the lease and heat rule of a read.
#include "meta/object_use.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kvs::meta
