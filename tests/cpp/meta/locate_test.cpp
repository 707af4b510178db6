// locate: a reader's batch lookup: its reply's encoding, the uses it records, prefixes, groups and notes.
#include "meta/locate.h"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "meta/msgpack_writer.h"

namespace kvs::meta {
namespace {

const UseRule kRule{100, 130, 10, 1000};  // now 100, leases to 130, half-life 10 s, hot at 1000

Row stored(ObjectTable& t, const std::string& key, uint64_t size, std::vector<MemoryCopy> copies) {
  const Row row = t.insert(key);
  Object& o = t.at(row);
  o.size = size;
  o.checksum = size * 7;
  o.complete = true;
  o.base_replicas = static_cast<uint8_t>(copies.empty() ? 1 : copies.size());
  for (const MemoryCopy& c : copies) t.add_copy(row, c);
  return row;
}

// Segment 1 on tier 0 of host "h" engine "e:1" region 7, segment 2 on tier 1 of "h2" "e:2" region 8.
PlaceOf places() {
  return [](uint32_t segment) -> std::optional<Place> {
    if (segment == 1) return Place{0, "h", "e:1", 7};
    if (segment == 2) return Place{1, "h2", "e:2", 8};
    return std::nullopt;
  };
}

void expect_copy(MsgpackWriter& w, uint64_t tier, const char* host, const char* engine, uint64_t region,
                 const MemoryCopy& c) {
  w.array(8);
  w.uint(tier);
  w.str(host);
  w.str(engine);
  w.uint(region);
  w.uint(c.offset);
  w.uint(c.slot);
  w.uint(c.gen);
  w.str("");
}

TEST(Locate, ReplyNamesEachHitsCopiesAndNilForMisses) {
  ObjectTable t;
  const MemoryCopy a{1, 3, 4096, 9}, b{2, 4, 8192, 10};
  stored(t, "x", 64, {a, b});
  stored(t, "y", 32, {b});
  const Located got = locate_many(t, {"x", "absent", "y"}, false, kRule, false, places());
  MsgpackWriter w;
  w.array(3);
  w.array(3);
  w.uint(64);
  w.uint(448);
  w.array(2);
  expect_copy(w, 0, "h", "e:1", 7, a);
  expect_copy(w, 1, "h2", "e:2", 8, b);
  w.nil();
  w.array(3);
  w.uint(32);
  w.uint(224);
  w.array(1);
  expect_copy(w, 1, "h2", "e:2", 8, b);
  EXPECT_EQ(got.reply, w.data());
  EXPECT_EQ(got.hits, (std::vector<uint32_t>{0, 2}));
  EXPECT_TRUE(got.notes.empty());
}

TEST(Locate, EveryHitIsAUseUnderTheRule) {
  ObjectTable t;
  const Row row = stored(t, "x", 64, {{1, 0, 0, 1}});
  t.at(row).heat = 2;
  t.at(row).heat_time = 90;
  locate_many(t, {"x", "x"}, false, kRule, false, places());
  const Object& o = t.at(row);
  EXPECT_EQ(o.lease_until, 130);
  EXPECT_EQ(o.last_access, 100);
  EXPECT_EQ(o.access_count, 2u);
  EXPECT_DOUBLE_EQ(o.heat, 3);  // 2 halved to 1, plus two reads
  EXPECT_EQ(o.heat_time, 100);
}

TEST(Locate, APrefixStopsAtTheFirstMissAndAnswersNilAfterIt) {
  ObjectTable t;
  stored(t, "a", 1, {{1, 0, 0, 1}});
  const Row c = stored(t, "c", 1, {{1, 0, 64, 2}});
  const Located got = locate_many(t, {"a", "b", "c"}, true, kRule, false, places());
  EXPECT_EQ(got.hits, (std::vector<uint32_t>{0}));
  EXPECT_EQ(t.at(c).access_count, 0u);  // not read past the miss
  const std::string tail = got.reply.substr(got.reply.size() - 2);
  EXPECT_EQ(tail, std::string("\xc0\xc0", 2));
}

TEST(Locate, HiddenMembersAndPutsInProgressAreMisses) {
  ObjectTable t;
  stored(t, "g#0of2", 1, {{1, 0, 0, 1}});
  t.at(t.find("g#0of2")).group = kHidden;
  const Row pending = stored(t, "p", 1, {{1, 0, 64, 2}});
  t.at(pending).complete = false;
  const Located got = locate_many(t, {"g#0of2", "p"}, false, kRule, false, places());
  EXPECT_TRUE(got.hits.empty());
  EXPECT_EQ(got.reply, std::string("\x92\xc0\xc0", 3));
}

TEST(Locate, AHitOnAShownMemberLeasesItsWholeGroup) {
  ObjectTable t;
  const Row m0 = stored(t, "g#0of2", 1, {{1, 0, 0, 1}});
  const Row m1 = stored(t, "g#1of2", 1, {{1, 0, 64, 2}});
  t.at(m0).group = t.at(m1).group = kShown;
  locate_many(t, {"g#0of2"}, false, kRule, false, places());
  EXPECT_EQ(t.at(m1).lease_until, 130);
  EXPECT_EQ(t.at(m1).access_count, 0u);  // leased, not read
}

TEST(Locate, NotesNameHitsOffMemoryOnDiskOrNeedingAttention) {
  ObjectTable t;
  stored(t, "plain", 1, {{1, 0, 0, 1}});
  stored(t, "off", 1, {});  // committed, no copy in memory
  const Row disk = stored(t, "disk", 1, {{1, 0, 64, 2}});
  t.at(disk).disk_segment = 5;
  const Row short_one = stored(t, "short", 1, {{1, 0, 128, 3}});
  t.at(short_one).base_replicas = 2;
  const Located got = locate_many(t, {"plain", "off", "disk", "short"}, false, kRule, false, places());
  ASSERT_EQ(got.notes.size(), 3u);
  EXPECT_EQ(got.notes[0].index, 1u);
  EXPECT_FALSE(got.notes[0].in_memory);
  EXPECT_EQ(got.notes[1].index, 2u);
  EXPECT_EQ(got.notes[1].disk_segment, 5u);
  EXPECT_FALSE(got.notes[1].attention);
  EXPECT_EQ(got.notes[2].index, 3u);
  EXPECT_TRUE(got.notes[2].attention);
  EXPECT_EQ(got.reply.substr(0, 1), "\x94");
  const Located transient = locate_many(t, {"plain"}, false, kRule, true, places());
  ASSERT_EQ(transient.notes.size(), 1u);  // with a transient disk tier every hit is noted
  EXPECT_TRUE(transient.notes[0].in_memory);
}

TEST(Locate, RefusesABadHalfLifeAndACopyWithoutAPlace) {
  ObjectTable t;
  stored(t, "x", 1, {{3, 0, 0, 1}});
  EXPECT_THROW(locate_many(t, {"x"}, false, UseRule{100, 130, 0, 1}, false, places()), std::invalid_argument);
  EXPECT_THROW(locate_many(t, {"x"}, false, kRule, false, places()), std::logic_error);
}

TEST(Locate, AsksForEachSegmentsPlaceOncePerCall) {
  ObjectTable t;
  stored(t, "x", 1, {{1, 0, 0, 1}});
  stored(t, "y", 1, {{1, 0, 64, 2}});
  std::map<uint32_t, int> asked;
  locate_many(t, {"x", "y", "x"}, false, kRule, false, [&asked](uint32_t segment) -> std::optional<Place> {
    ++asked[segment];
    return Place{0, "h", "e:1", 7};
  });
  EXPECT_EQ(asked, (std::map<uint32_t, int>{{1, 1}}));
}

}  // namespace
}  // namespace kvs::meta
