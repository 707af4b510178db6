// object_groups: member keys `<group>#<i>of<n>`, leases taken by a whole group, group states.
#include "meta/object_groups.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace kvs::meta {
namespace {

Row stored(ObjectTable& t, const std::string& key, uint8_t group = kNotMember) {
  const Row row = t.insert(key);
  t.at(row).complete = true;
  t.at(row).group = group;
  return row;
}

TEST(ObjectGroups, GroupOfReadsMemberKeysOnly) {
  EXPECT_EQ(group_of("ns/0x00000000000000ab#3of8").group, "ns/0x00000000000000ab");
  EXPECT_EQ(group_of("ns/0x00000000000000ab#3of8").members, 8u);
  EXPECT_EQ(group_of("a#b#0of2").group, "a#b");  // the last '#' starts the member part
  for (const char* plain : {"plain", "a#0o2", "a#0of", "a#0of2x", "a#0of99999", "a#0of-1"}) {
    EXPECT_EQ(group_of(plain).members, 0u) << plain;
  }
  EXPECT_TRUE(may_be_member("a#0of2"));
  EXPECT_FALSE(may_be_member("a0of2"));
}

TEST(ObjectGroups, VisibleMeansCommittedAndNotHidden) {
  Object o;
  EXPECT_FALSE(visible(o));
  o.complete = true;
  EXPECT_TRUE(visible(o));
  o.group = kShown;
  EXPECT_TRUE(visible(o));
  o.group = kHidden;
  EXPECT_FALSE(visible(o));
}

TEST(ObjectGroups, ALeaseOnOneMemberRaisesEveryMembersLeaseNeverLowersOne) {
  ObjectTable t;
  const Row m0 = stored(t, "g#0of3", kShown);
  const Row m1 = stored(t, "g#1of3", kShown);  // g#2of3 is absent: skipped
  const Row other = stored(t, "h#0of3", kShown);
  t.at(m1).lease_until = 50;
  lease_group(t, "g#2of3", 20);
  EXPECT_EQ(t.at(m0).lease_until, 20);
  EXPECT_EQ(t.at(m1).lease_until, 50);
  EXPECT_EQ(t.at(other).lease_until, 0);
}

TEST(ObjectGroups, LeaseGroupsSkipsKeysThatAreNoMemberOrAbsent) {
  ObjectTable t;
  const Row m0 = stored(t, "g#0of2", kShown);
  const Row plain = stored(t, "g#1of2");  // in the table but not marked a member
  lease_groups(t, {"g#1of2", "absent#0of2"}, 9);
  EXPECT_EQ(t.at(m0).lease_until, 0);
  EXPECT_EQ(t.at(plain).lease_until, 0);
  lease_groups(t, {"g#0of2"}, 9);
  EXPECT_EQ(t.at(m0).lease_until, 9);
  EXPECT_EQ(t.at(plain).lease_until, 9);
}

TEST(ObjectGroups, SetGroupStateChecksTheStateAndSkipsAbsentKeys) {
  ObjectTable t;
  const Row row = stored(t, "g#0of2");
  set_group_state(t, {"g#0of2", "absent"}, kHidden);
  EXPECT_EQ(t.at(row).group, kHidden);
  EXPECT_THROW(set_group_state(t, {"g#0of2"}, 3), std::invalid_argument);
  EXPECT_EQ(t.at(row).group, kHidden);
}

}  // namespace
}  // namespace kvs::meta
