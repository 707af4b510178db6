// locate_many's ReadTouch: the eviction policy's part of a read done in the lookup's own pass (each hit
// linked in the order moves last; the sampled hits are named back), as the policy's own touch and sample
// would have done it after the lookup.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meta/crc32.h"
#include "meta/locate.h"

namespace kvs::meta {
namespace {

const UseRule kRule{100, 130, 10, 1000};

PlaceOf one_place() {
  return [](uint32_t) -> std::optional<Place> { return Place{0, "h", "e:1", 7}; };
}

Row stored(ObjectTable& t, const std::string& key, bool linked) {
  const Row row = t.insert(key);
  Object& o = t.at(row);
  o.size = 64;
  o.complete = true;
  t.add_copy(row, {1, static_cast<uint32_t>(row), 4096ull * row, 1});
  if (linked) t.push_back(Order::kMemory, row);
  return row;
}

std::vector<Row> memory_order(const ObjectTable& t) {
  std::vector<Row> out;
  for (Row r = t.first(Order::kMemory); r != kNoRow; r = t.next(Order::kMemory, r)) out.push_back(r);
  return out;
}

TEST(LocateReadTouch, HitsLinkedInTheOrderMoveLastInTurnAndAreNamed) {
  ObjectTable t;
  const Row a = stored(t, "a", true), b = stored(t, "b", true), c = stored(t, "c", true);
  stored(t, "unlinked", false);  // (a hit not in the order: not moved, not named)
  const Located got = locate_many(t, {"b", "absent", "unlinked", "a"}, false, kRule, false, one_place(),
                                  ReadTouch{Order::kMemory, 1});
  EXPECT_EQ(memory_order(t), (std::vector<Row>{c, b, a}));
  EXPECT_EQ(got.hits, (std::vector<uint32_t>{0, 2, 3}));
  EXPECT_EQ(got.sampled, (std::vector<uint32_t>{0, 3}));
}

TEST(LocateReadTouch, NamesTheHitsWhoseCrcTheSampleDivides) {
  ObjectTable t;
  std::vector<std::string> keys;
  for (int i = 0; i < 400; ++i) keys.push_back("bm/client/" + std::to_string(i));
  std::vector<std::string_view> asked;
  std::vector<uint32_t> expected;
  for (size_t i = 0; i < keys.size(); ++i) {
    stored(t, keys[i], i % 5 != 0);  // every fifth not in the order
    asked.push_back(keys[i]);
    if (i % 5 != 0 && crc32(keys[i]) % 8 == 0) expected.push_back(static_cast<uint32_t>(i));
  }
  const Located got = locate_many(t, asked, false, kRule, false, one_place(), ReadTouch{Order::kMemory, 8});
  EXPECT_EQ(got.sampled, expected);
  EXPECT_GT(expected.size(), 20u);  // (about 1 in 8 of 320)
  const Located none = locate_many(t, asked, false, kRule, false, one_place(), ReadTouch{Order::kMemory, 0});
  EXPECT_TRUE(none.sampled.empty());
  EXPECT_EQ(none.hits.size(), keys.size());
}

TEST(LocateReadTouch, WithoutAnOrderNothingMovesAndEveryHitIsNamed) {
  ObjectTable t;
  const Row a = stored(t, "a", true), b = stored(t, "b", true);
  const Located got = locate_many(t, {"a", "absent", "b", "a"}, false, kRule, false, one_place());
  EXPECT_EQ(memory_order(t), (std::vector<Row>{a, b}));
  EXPECT_EQ(got.sampled, got.hits);
  EXPECT_EQ(got.hits, (std::vector<uint32_t>{0, 2, 3}));
}

TEST(LocateReadTouch, APrefixMovesOnlyTheHitsBeforeItsFirstMiss) {
  ObjectTable t;
  const Row a = stored(t, "a", true), b = stored(t, "b", true), c = stored(t, "c", true);
  const Located got =
      locate_many(t, {"b", "absent", "a"}, true, kRule, false, one_place(), ReadTouch{Order::kMemory, 1});
  EXPECT_EQ(memory_order(t), (std::vector<Row>{a, c, b}));
  EXPECT_EQ(got.sampled, (std::vector<uint32_t>{0}));
}

}  // namespace
}  // namespace kvs::meta
