// puts: a batch of puts started and ended in the object table, and the puts in progress it keeps.
#include "meta/puts.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "meta/crc32.h"
#include "meta/object_batches.h"

namespace kvs::meta {
namespace {

// Puts of `keys` by `writer`, `count` copies each on segments 1, 2, ... (offset i * 64), held as 10 + i.
StartedPuts started(const std::vector<std::string_view>& keys, uint32_t writer, uint32_t count = 1,
                    double deadline = 100) {
  StartedPuts p;
  p.keys = keys;
  p.count = count;
  p.writer = writer;
  p.base_replicas = static_cast<uint8_t>(count);
  p.started = 5;
  p.deadline = deadline;
  for (size_t i = 0; i < keys.size(); ++i) {
    p.sizes.push_back(100 + i);
    p.checksums.push_back(7 + i);
    p.hold_seqs.push_back(10 + i);
    for (uint32_t c = 0; c < count; ++c)
      p.copies.push_back(MemoryCopy{c + 1, static_cast<uint32_t>(i), i * 64, 1000 + i * count + c});
  }
  return p;
}

std::vector<std::string> keys_of(const ObjectTable& t, const std::vector<Row>& rows) {
  std::vector<std::string> out;
  for (const Row row : rows) out.emplace_back(t.key(row));
  return out;
}

TEST(Puts, StartMakesUncommittedRowsAndChargesTheWriter) {
  ObjectTable t;
  start_puts(t, started({"a", "b"}, 3, 2));
  const Row a = t.find("a"), b = t.find("b");
  ASSERT_NE(a, kNoRow);
  ASSERT_NE(b, kNoRow);
  const Object& o = t.at(b);
  EXPECT_FALSE(o.complete);
  EXPECT_EQ(o.size, 101u);
  EXPECT_EQ(o.checksum, 8u);
  EXPECT_EQ(o.hold_seq, 11u);
  EXPECT_EQ(o.writer, 3u);
  EXPECT_EQ(o.last_access, 5);
  EXPECT_EQ(o.base_replicas, 2);
  ASSERT_EQ(t.copy_count(b), 2u);
  EXPECT_EQ(t.copy(b, 0), (MemoryCopy{1, 1, 64, 1002}));
  EXPECT_EQ(t.copy(b, 1), (MemoryCopy{2, 1, 64, 1003}));
  EXPECT_EQ(t.puts().size(), 2u);
  EXPECT_EQ(t.puts().held(3).objects, 2u);
  EXPECT_EQ(t.puts().held(3).bytes, 2u * (100 + 101));
  EXPECT_EQ(t.puts().held(4).objects, 0u);  // (a writer never seen holds nothing)
}

TEST(Puts, StartIsAllOrNothing) {
  ObjectTable t;
  start_puts(t, started({"a"}, 1));
  EXPECT_THROW(start_puts(t, started({"b", "a"}, 1)), std::invalid_argument);
  EXPECT_THROW(start_puts(t, started({"c", "c"}, 1)), std::invalid_argument);
  StartedPuts bad = started({"d"}, 1);
  bad.sizes.clear();
  EXPECT_THROW(start_puts(t, bad), std::invalid_argument);
  bad = started({"d"}, 1, 2);
  bad.copies.pop_back();
  EXPECT_THROW(start_puts(t, bad), std::invalid_argument);
  EXPECT_EQ(t.find("b"), kNoRow);
  EXPECT_EQ(t.find("c"), kNoRow);
  EXPECT_EQ(t.find("d"), kNoRow);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.puts().held(1).objects, 1u);
}

// A refused batch leaves the table as it was even when its inserts grew the index (the rows made before
// the refused key are erased), and the same keys start afterwards.
TEST(Puts, StartIsAllOrNothingWhileTheIndexGrows) {
  ObjectTable t;
  start_puts(t, started({"kept"}, 1));
  std::vector<std::string> names;
  for (int i = 0; i < 5000; ++i) names.push_back("k" + std::to_string(i));
  std::vector<std::string_view> keys(names.begin(), names.end());
  std::vector<std::string_view> twice = keys;
  twice.push_back("k17");
  EXPECT_THROW(start_puts(t, started(twice, 1)), std::invalid_argument);
  std::vector<std::string_view> present = keys;
  present.push_back("kept");
  EXPECT_THROW(start_puts(t, started(present, 1)), std::invalid_argument);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.puts().held(1).objects, 1u);
  for (const std::string_view key : keys) ASSERT_EQ(t.find(key), kNoRow) << key;
  const std::vector<Row> rows = start_puts(t, started(keys, 1));
  EXPECT_EQ(t.size(), 5001u);
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(t.find(keys[i]), rows[i]) << keys[i];
  EXPECT_NE(t.find("kept"), kNoRow);
}

std::vector<std::string> order_keys(const ObjectTable& t, Order o) {
  std::vector<std::string> out;
  for (Row r = t.first(o); r != kNoRow; r = t.next(o, r)) out.emplace_back(t.key(r));
  return out;
}

// end_puts given an order links each object it commits last there, in key order (the eviction policy's
// plain insertion in the same walk); the keys it does not commit stay out; without one it links nothing.
TEST(Puts, EndLinksWhatItCommitsLastInTheOrderGiven) {
  ObjectTable t;
  start_puts(t, started({"old", "a", "b", "c"}, 1));
  start_puts(t, started({"x"}, 2));
  end_puts(t, {"old"}, 1, Order::kMemory);
  end_puts(t, {"c"}, 1);
  EXPECT_EQ(order_keys(t, Order::kMemory), (std::vector<std::string>{"old"}));
  EXPECT_TRUE(end_puts(t, {"b", "x", "gone", "a", "b"}, 1, Order::kMemory).sampled.empty());  // (sample 0)
  EXPECT_EQ(order_keys(t, Order::kMemory), (std::vector<std::string>{"old", "b", "a"}));
  EXPECT_TRUE(order_keys(t, Order::kDisk).empty());
  EXPECT_EQ(t.length(Order::kMemory), 3u);
}

// With a sample, end_puts names the keys it committed whose CRC-32 (zlib's) is divisible by it, in order;
// the ones it did not commit are never named.
TEST(Puts, EndNamesTheCommittedKeysOfTheSample) {
  ObjectTable t;
  std::vector<std::string> names;
  for (int i = 0; i < 64; ++i) names.push_back("s" + std::to_string(i));
  std::vector<std::string_view> keys(names.begin(), names.end());
  start_puts(t, started(keys, 1));
  std::vector<std::string_view> asked = keys;
  asked.insert(asked.begin() + 5, "never");
  asked.push_back("s3");  // (the second of a key: missing)
  const EndedPuts e = end_puts(t, asked, 1, std::nullopt, 4);
  std::vector<uint32_t> expected;
  for (uint32_t i = 0; i < keys.size(); ++i) {
    if (crc32(keys[i]) % 4 == 0) expected.push_back(i < 5 ? i : i + 1);
  }
  EXPECT_EQ(e.sampled, expected);
  EXPECT_GT(expected.size(), 4u);  // (about a quarter of 64)
  EXPECT_LT(expected.size(), 32u);
  EXPECT_EQ(crc32("a"), 0xE8B7BE43u);       // zlib.crc32(b"a"): the policy's rule
  EXPECT_EQ(t.length(Order::kMemory), 0u);  // (no order given: nothing linked)
}

TEST(Puts, EndCommitsTheWritersPutsAndNamesTheRest) {
  ObjectTable t;
  start_puts(t, started({"a", "b", "c"}, 1, 2));
  start_puts(t, started({"x"}, 2));
  const EndedPuts e = end_puts(t, {"a", "x", "gone", "c", "a"}, 1);
  EXPECT_EQ(e.ended, (std::vector<uint32_t>{0, 3}));
  EXPECT_EQ(e.missing, (std::vector<uint32_t>{1, 2, 4}));  // another's, absent, the second of a key
  EXPECT_EQ(e.bytes, 100u + 102u);
  EXPECT_TRUE(e.short_of_copies.empty());
  EXPECT_EQ(e.marks.at(1), 12u);  // the highest hold of a put on each segment
  EXPECT_EQ(e.marks.at(2), 12u);
  EXPECT_EQ(e.marks.size(), 2u);
  EXPECT_TRUE(t.at(t.find("a")).complete);
  EXPECT_FALSE(t.at(t.find("b")).complete);
  EXPECT_FALSE(t.at(t.find("x")).complete);
  EXPECT_EQ(t.puts().held(1).objects, 1u);
  EXPECT_EQ(t.puts().held(1).bytes, 2u * 101);
  EXPECT_EQ(t.puts().size(), 2u);
}

TEST(Puts, EndNamesObjectsShortOfTheCopiesAsked) {
  ObjectTable t;
  StartedPuts p = started({"a", "b"}, 1, 1);
  p.base_replicas = 2;  // placed with fewer copies than asked (min_replicas)
  start_puts(t, p);
  const EndedPuts e = end_puts(t, {"a", "b"}, 1);
  EXPECT_EQ(e.short_of_copies, (std::vector<uint32_t>{0, 1}));
}

TEST(Puts, ErasingOrCommittingAnUncommittedRowEndsItsPut) {
  ObjectTable t;
  start_puts(t, started({"a", "b", "c"}, 1));
  t.erase(t.find("a"));
  EXPECT_EQ(commit_rows(t, {t.find("b")}), 101u);
  EXPECT_EQ(t.puts().size(), 1u);
  EXPECT_EQ(t.puts().held(1).objects, 1u);
  EXPECT_EQ(t.puts().held(1).bytes, 102u);
  t.erase(t.find("b"));  // (a committed object: no put of it to end)
  EXPECT_EQ(t.puts().held(1).objects, 1u);
  EXPECT_EQ(keys_of(t, puts_of(t, 0)), (std::vector<std::string>{"c"}));
}

TEST(Puts, ExpiryReadsTheExpiredOldestFirstWithTheStallCredit) {
  ObjectTable t;
  start_puts(t, started({"a", "b"}, 1, 1, 10));
  start_puts(t, started({"c"}, 2, 1, 20));
  start_puts(t, started({"d"}, 1, 1, 30));
  EXPECT_TRUE(expired_puts(t, 10).empty());  // (due is past the deadline, not at it)
  EXPECT_EQ(keys_of(t, expired_puts(t, 25)), (std::vector<std::string>{"a", "b", "c"}));
  t.erase(t.find("a"));
  EXPECT_EQ(keys_of(t, expired_puts(t, 25)), (std::vector<std::string>{"b", "c"}));
  t.puts().credit(10);  // the master stalled: every put in progress has 10 s more
  EXPECT_EQ(keys_of(t, expired_puts(t, 25)), (std::vector<std::string>{"b"}));
  start_puts(t, started({"e"}, 1, 1, 45));  // started after the stall: no credit
  t.erase(t.find("b"));
  t.erase(t.find("c"));
  EXPECT_EQ(keys_of(t, expired_puts(t, 35)), (std::vector<std::string>{}));
  EXPECT_EQ(keys_of(t, expired_puts(t, 40.5)), (std::vector<std::string>{"d"}));
  EXPECT_EQ(keys_of(t, expired_puts(t, 45.5)), (std::vector<std::string>{"d", "e"}));
}

TEST(Puts, ARowReusedByAnotherPutIsNotTheOldEntry) {
  ObjectTable t;
  start_puts(t, started({"a"}, 1, 1, 10));
  t.erase(t.find("a"));
  start_puts(t, started({"a"}, 1, 1, 50));  // (the same row, a new incarnation)
  EXPECT_TRUE(expired_puts(t, 20).empty());
  EXPECT_EQ(keys_of(t, puts_of(t, 1)), (std::vector<std::string>{"a"}));
  EXPECT_TRUE(puts_of(t, 2).empty());
}

TEST(Puts, EndedEntriesDoNotPileUpBehindALongPut) {
  ObjectTable t;
  start_puts(t, started({"long"}, 1, 1, 1e9));
  for (int i = 0; i < 20000; ++i) {
    const std::string key = "k" + std::to_string(i);
    start_puts(t, started({key}, 2));
    end_puts(t, {key}, 2);
  }
  EXPECT_LE(t.puts().queue().size(), 2u * t.puts().size() + 1025);
  EXPECT_EQ(keys_of(t, puts_of(t, 0)), (std::vector<std::string>{"long"}));
  EXPECT_EQ(t.puts().held(2).objects, 0u);
  EXPECT_EQ(t.puts().held(2).bytes, 0u);
}

}  // namespace
}  // namespace kvs::meta
