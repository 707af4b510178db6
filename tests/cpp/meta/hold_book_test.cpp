// hold_book: each node's holds in number order, held again without passing an earlier number,
// acknowledged from the front up to what was sent, cancelled by generation, dropped by region or node,
// and sent encoded as msgpack-python writes them.
#include "meta/hold_book.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace kvs::meta {
namespace {

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

// A row of `key` with copies on segment 1 at slots `slots` (offset slot * 64, gen slot + 100).
Ref object(ObjectTable& t, std::string_view key, std::vector<uint32_t> slots) {
  const Row row = t.insert(key);
  t.at(row).size = 4096;
  t.at(row).checksum = 9;
  for (const uint32_t s : slots) t.add_copy(row, MemoryCopy{1, s, s * 64ull, s + 100ull});
  return ref_of(t, row);
}

HeldCopy copy_at(uint32_t slot) {
  return HeldCopy{1, 7, slot * 64ull, slot, slot + 100ull};
}

// Bytes of one field whose encoding starts with `b`: an unsigned int of any width, a fixstr or a bool.
size_t width(uint8_t b) {
  if ((b & 0xe0) == 0xa0) return 1 + (b & 0x1f);
  switch (b) {
    case 0xcc: return 2;
    case 0xcd: return 3;
    case 0xce: return 5;
    case 0xcf: return 9;
    default: return 1;
  }
}

// The numbers of the holds a take sends (each hold's first field; all below 128 here).
std::vector<int> seqs(HoldBook& book, uint32_t node, size_t limit = 100) {
  std::string out;
  const Taken taken = book.take(node, limit, out);
  std::vector<int> got;
  size_t at = taken.sent < 16 ? 1 : 3;
  for (size_t i = 0; i < taken.sent; ++i) {
    EXPECT_EQ(static_cast<uint8_t>(out[at]), 0x9b);  // an array of 11
    got.push_back(out[at + 1]);
    at += 2;
    for (int field = 1; field < 11; ++field) at += width(static_cast<uint8_t>(out[at]));
  }
  return got;
}

TEST(HoldBook, AHoldIsSentAsMsgpackPythonPacksItsTupleInTheSmallestForms) {
  ObjectTable t;
  const Row row = t.insert("k");
  Object& o = t.at(row);
  o.size = 70000;
  o.checksum = 1ull << 40;
  o.pinned = true;
  o.base_replicas = 2;
  o.target_replicas = 3;
  t.add_copy(row, MemoryCopy{1, 300, 5, 1ull << 33});
  HoldBook book(t);
  EXPECT_EQ(book.hold(0, ref_of(t, row), HeldCopy{1, 7, 5, 300, 1ull << 33}), 1u);
  std::string out;
  const Taken taken = book.take(0, 10, out);
  EXPECT_EQ(taken.sent, 1u);
  EXPECT_EQ(
      out, bytes({0x91, 0x9b, 0x01, 0x07, 0x05, 0xcd, 0x01, 0x2c, 0xcf, 0, 0, 0, 2, 0, 0, 0,    0,    0xa1,
                  'k',  0xce, 0x00, 0x01, 0x11, 0x70, 0xcf, 0,    0,    1, 0, 0, 0, 0, 0, 0xc3, 0x02, 0x03}));
  EXPECT_EQ(book.sent(), 1u);
  std::string again;
  book.take(0, 10, again);  // sent until acknowledged
  EXPECT_EQ(again, out);
}

TEST(HoldBook, NothingToSendIsAnEmptyArrayAndSixteenHoldsTakeAnArray16Header) {
  ObjectTable t;
  HoldBook book(t);
  std::string out;
  EXPECT_EQ(book.take(3, 10, out).sent, 0u);
  EXPECT_EQ(out, bytes({0x90}));
  for (uint32_t s = 0; s < 16; ++s) book.hold(0, object(t, "k" + std::to_string(s), {s}), copy_at(s));
  out.clear();
  EXPECT_EQ(book.take(0, 100, out).sent, 16u);
  EXPECT_EQ(out.substr(0, 3), bytes({0xdc, 0x00, 0x10}));
}

TEST(HoldBook, HoldsGoInNumberOrderAndOneHeldAgainBeforeItIsSentKeepsItsNumber) {
  ObjectTable t;
  HoldBook book(t);
  const Ref a = object(t, "a", {1}), b = object(t, "b", {2});
  EXPECT_EQ(book.hold(0, a, copy_at(1)), 1u);
  EXPECT_EQ(book.hold(0, b, copy_at(2)), 2u);
  EXPECT_EQ(book.lowest(0), 1u);
  EXPECT_EQ(book.hold(0, a, copy_at(1)), 1u);  // (a count set again, say): the row is read when sent
  EXPECT_EQ(book.last_seq(), 2u);
  EXPECT_EQ(seqs(book, 0), (std::vector<int>{1, 2}));
  EXPECT_EQ(book.lowest(0), 1u);
  EXPECT_EQ(book.outstanding(), 2u);
  EXPECT_EQ(seqs(book, 0, 1), (std::vector<int>{1}));  // at most the limit
}

// The review's race (s43): a put waits until its node's lowest unacknowledged number passes its mark; a
// user's count retells the object's hold while the node has received none. The node's next poll
// acknowledges nothing: the put must still wait.
TEST(HoldBook, HeldAgainBeforeTheNodeReceivedItTheMarkIsNotPassedByAnEmptyAcknowledgement) {
  ObjectTable t;
  HoldBook book(t);
  const Ref a = object(t, "a", {1});
  const uint64_t mark = book.hold(0, a, copy_at(1));
  book.hold(0, a, copy_at(1));
  book.acknowledge(0, 0);
  EXPECT_LE(book.lowest(0), mark);  // (the code before: lowest 2, past the mark)
  EXPECT_EQ(seqs(book, 0), (std::vector<int>{1}));
  book.acknowledge(0, 1);
  EXPECT_EQ(book.lowest(0), 0u);
}

TEST(HoldBook, HeldAgainAfterItWasSentBothAreSentAndTheEarlierKeepsTheMark) {
  ObjectTable t;
  HoldBook book(t);
  const Ref a = object(t, "a", {1}), b = object(t, "b", {2});
  book.hold(0, a, copy_at(1));
  book.hold(0, b, copy_at(2));
  EXPECT_EQ(seqs(book, 0, 1), (std::vector<int>{1}));  // the node is sent a's first hold only
  EXPECT_EQ(book.hold(0, a, copy_at(1)), 3u);          // sent already: told again under a new number
  EXPECT_EQ(book.hold(0, a, copy_at(1)), 3u);          // not sent yet: that one
  book.acknowledge(0, 0);
  EXPECT_EQ(book.lowest(0), 1u);
  EXPECT_EQ(seqs(book, 0), (std::vector<int>{1, 2, 3}));  // (the node keeps one record per slot)
  EXPECT_EQ(book.outstanding(), 3u);
  book.acknowledge(0, 1);  // the earlier acknowledged: the newer is still a's hold (cancel finds it)
  EXPECT_EQ(book.lowest(0), 2u);
  EXPECT_TRUE(book.cancel(0, 7, 1, 101));
  EXPECT_EQ(seqs(book, 0), (std::vector<int>{2}));
  book.acknowledge(0, 2);
  EXPECT_EQ(book.lowest(0), 0u);
  EXPECT_EQ(book.outstanding(), 0u);
}

TEST(HoldBook, AnEarlierHoldOfACancelledCopyIsDroppedWhenTakenNeverSent) {
  ObjectTable t;
  HoldBook book(t);
  const Ref a = object(t, "a", {1});
  book.hold(0, a, copy_at(1));
  seqs(book, 0);
  book.hold(0, a, copy_at(1));
  EXPECT_TRUE(book.cancel(0, 7, 1, 101));  // the newest; the copy leaves the row as it is freed
  ASSERT_TRUE(t.drop_copy(static_cast<Row>(a & 0xFFFFFFFFu), MemoryCopy{1, 1, 64, 101}));
  EXPECT_EQ(book.lowest(0), 1u);
  std::string out;
  const Taken taken = book.take(0, 10, out);
  EXPECT_EQ(taken.sent, 0u);
  EXPECT_EQ(taken.dropped, 1u);
  EXPECT_EQ(book.lowest(0), 0u);
}

TEST(HoldBook, ANodeAcknowledgesAtMostTheHighestNumberItWasSent) {
  ObjectTable t;
  HoldBook book(t);
  for (uint32_t s = 1; s <= 3; ++s) book.hold(0, object(t, "k" + std::to_string(s), {s}), copy_at(s));
  book.acknowledge(0, UINT64_MAX);  // nothing sent yet
  EXPECT_EQ(book.lowest(0), 1u);
  EXPECT_EQ(book.outstanding(), 3u);
  EXPECT_EQ(seqs(book, 0, 2), (std::vector<int>{1, 2}));
  book.acknowledge(0, UINT64_MAX);
  EXPECT_EQ(book.lowest(0), 3u);
  book.hold(1, object(t, "other", {4}), copy_at(4));
  EXPECT_EQ(seqs(book, 1), (std::vector<int>{4}));  // another node's sends count for it alone
  book.acknowledge(0, 4);
  EXPECT_EQ(book.lowest(0), 3u);
  EXPECT_EQ(seqs(book, 0), (std::vector<int>{3}));
  book.acknowledge(0, 3);
  EXPECT_EQ(book.lowest(0), 0u);
}

TEST(HoldBook, HoldRowsOfARowNotSentYetKeepsItsNumbers) {
  ObjectTable t;
  HoldBook book(t);
  book.add_segment(1, 0, 7);
  const Ref a = object(t, "a", {1, 2});
  std::vector<uint32_t> nodes;
  ASSERT_TRUE(book.hold_rows({a}, nodes).ok());
  ASSERT_TRUE(book.hold(0, object(t, "b", {3}), copy_at(3)) == 3u);
  ASSERT_TRUE(book.hold_rows({a}, nodes).ok());
  EXPECT_EQ(t.at(static_cast<Row>(a & 0xFFFFFFFFu)).hold_seq, 2u);
  EXPECT_EQ(seqs(book, 0), (std::vector<int>{1, 2, 3}));
  ASSERT_TRUE(book.hold_rows({a}, nodes).ok());  // sent: told again
  EXPECT_EQ(t.at(static_cast<Row>(a & 0xFFFFFFFFu)).hold_seq, 5u);
  EXPECT_EQ(seqs(book, 0), (std::vector<int>{1, 2, 3, 4, 5}));
}

TEST(HoldBook, AcknowledgingPopsThroughTheNumberAndLowestFollows) {
  ObjectTable t;
  HoldBook book(t);
  for (uint32_t s = 1; s <= 4; ++s) book.hold(0, object(t, "k" + std::to_string(s), {s}), copy_at(s));
  EXPECT_EQ(seqs(book, 0), (std::vector<int>{1, 2, 3, 4}));
  book.acknowledge(0, 2);
  EXPECT_EQ(book.lowest(0), 3u);
  EXPECT_EQ(seqs(book, 0), (std::vector<int>{3, 4}));
  book.acknowledge(1, 9);  // another node's: nothing here
  book.acknowledge(0, 9);
  EXPECT_EQ(book.lowest(0), 0u);
  EXPECT_EQ(book.outstanding(), 0u);
  book.hold(0, object(t, "late", {5}), copy_at(5));  // a slot acknowledged before is held again
  EXPECT_EQ(seqs(book, 0), (std::vector<int>{5}));
  book.acknowledge(0, 5);
  EXPECT_EQ(book.outstanding(), 0u);
}

TEST(HoldBook, CancelNeedsTheGenerationAndAGapAtTheFrontMovesLowest) {
  ObjectTable t;
  HoldBook book(t);
  book.hold(0, object(t, "a", {1}), copy_at(1));
  book.hold(0, object(t, "b", {2}), copy_at(2));
  EXPECT_FALSE(book.cancel(0, 7, 1, 999));  // another allocation of the slot
  EXPECT_FALSE(book.cancel(0, 8, 1, 101));  // another region
  EXPECT_FALSE(book.cancel(5, 7, 1, 101));  // another node
  EXPECT_TRUE(book.cancel(0, 7, 1, 101));
  EXPECT_FALSE(book.cancel(0, 7, 1, 101));
  EXPECT_EQ(book.lowest(0), 2u);
  EXPECT_EQ(seqs(book, 0), (std::vector<int>{2}));
}

TEST(HoldBook, DropRegionAndDropNodeForgetTheirHolds) {
  ObjectTable t;
  HoldBook book(t);
  const Ref a = object(t, "a", {1}), b = object(t, "b", {2});
  book.hold(0, a, copy_at(1));
  book.hold(0, b, HeldCopy{1, 8, 128, 2, 102});  // region 8
  book.hold(1, b, copy_at(2));
  book.drop_region(0, 7);
  EXPECT_EQ(seqs(book, 0), (std::vector<int>{2}));
  book.drop_node(0);
  EXPECT_EQ(book.lowest(0), 0u);
  EXPECT_EQ(seqs(book, 1), (std::vector<int>{3}));
  EXPECT_EQ(book.outstanding(), 1u);
}

TEST(HoldBook, AHoldWhoseObjectOrCopyIsGoneIsDroppedNotSent) {
  ObjectTable t;
  HoldBook book(t);
  const Ref gone = object(t, "gone", {1}), moved = object(t, "moved", {2}), kept = object(t, "kept", {3});
  book.hold(0, gone, copy_at(1));
  book.hold(0, moved, copy_at(2));
  book.hold(0, kept, copy_at(3));
  t.erase(static_cast<Row>(gone & 0xFFFFFFFFu));
  object(t, "reuses the row", {1});  // (same slot, same row: a stale reference must not reach it)
  ASSERT_TRUE(t.drop_copy(static_cast<Row>(moved & 0xFFFFFFFFu), MemoryCopy{1, 2, 128, 102}));
  std::string out;
  const Taken taken = book.take(0, 10, out);
  EXPECT_EQ(taken.sent, 1u);
  EXPECT_EQ(taken.dropped, 2u);
  EXPECT_EQ(book.lowest(0), 3u);
  EXPECT_EQ(book.outstanding(), 1u);
  EXPECT_NE(out.find("kept"), std::string::npos);
}

TEST(HoldBook, HoldRowsHoldsEveryCopySetsHoldSeqAndNamesEachNodeOnce) {
  ObjectTable t;
  HoldBook book(t);
  book.add_segment(1, 0, 7);
  book.add_segment(2, 4, 9);
  const Ref a = object(t, "a", {1, 2});
  const Row row_b = t.insert("b");
  t.add_copy(row_b, MemoryCopy{2, 5, 320, 105});
  t.add_copy(row_b, MemoryCopy{1, 6, 384, 106});
  std::vector<uint32_t> nodes;
  ASSERT_TRUE(book.hold_rows({a, ref_of(t, row_b)}, nodes).ok());
  EXPECT_EQ(nodes, (std::vector<uint32_t>{0, 4}));
  EXPECT_EQ(t.at(static_cast<Row>(a & 0xFFFFFFFFu)).hold_seq, 2u);
  EXPECT_EQ(t.at(row_b).hold_seq, 4u);
  EXPECT_EQ(seqs(book, 0), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(seqs(book, 4), (std::vector<int>{3}));
  EXPECT_TRUE(book.cancel(4, 9, 5, 105));  // (held in segment 2's region, 9)
}

TEST(HoldBook, HoldRowsHoldsNothingForAStaleReferenceOrAnUnknownSegment) {
  ObjectTable t;
  HoldBook book(t);
  book.add_segment(1, 0, 7);
  const Ref a = object(t, "a", {1});
  const Row row_b = t.insert("b");
  t.add_copy(row_b, MemoryCopy{3, 5, 320, 105});
  std::vector<uint32_t> nodes;
  EXPECT_EQ(book.hold_rows({a, ref_of(t, row_b)}, nodes).unknown_segment, 3u);
  const Ref stale = ref_of(t, row_b);
  t.erase(row_b);
  EXPECT_EQ(book.hold_rows({a, stale}, nodes).stale, 1u);
  EXPECT_TRUE(nodes.empty());
  EXPECT_EQ(book.last_seq(), 0u);
  EXPECT_EQ(book.outstanding(), 0u);
}

TEST(HoldBook, ManyHoldsCancelledAndHeldAgainKeepOrderAndCount) {
  ObjectTable t;
  HoldBook book(t);
  std::vector<Ref> refs;
  for (uint32_t s = 0; s < 8; ++s) refs.push_back(object(t, "k" + std::to_string(s), {s}));
  std::vector<uint64_t> numbers(8);             // each slot's live hold
  for (int round = 0; round < 5000; ++round) {  // a node that never acknowledges: gaps are compacted
    const uint32_t s = static_cast<uint32_t>(round) % 8;
    if (round % 3 == 0) {
      EXPECT_EQ(book.cancel(0, 7, s, s + 100ull), round >= 8);  // (held from the first pass on)
    }
    const uint64_t seq = book.hold(0, refs[s], copy_at(s));
    if (round >= 8 && round % 3 != 0) {
      EXPECT_EQ(seq, numbers[s]);  // not sent: held once
    }
    numbers[s] = seq;
  }
  EXPECT_EQ(book.outstanding(), 8u);
  std::sort(numbers.begin(), numbers.end());
  std::string out;
  EXPECT_EQ(book.take(0, 100, out).sent, 8u);
  EXPECT_EQ(book.lowest(0), numbers[0]);  // in number order
  book.acknowledge(0, numbers[3]);
  EXPECT_EQ(book.lowest(0), numbers[4]);
  EXPECT_EQ(book.outstanding(), 4u);
}

TEST(HoldBook, ANodeThatTakesButNeverAcknowledgesKeepsEveryRetellItWasSent) {
  ObjectTable t;
  HoldBook book(t);
  const Ref a = object(t, "a", {1});
  for (int round = 0; round < 100; ++round) {
    book.hold(0, a, copy_at(1));
    seqs(book, 0, 1000);
    book.acknowledge(0, 0);
  }
  EXPECT_EQ(book.outstanding(), 100u);  // one per retell sent (as any hold of such a node is kept)
  EXPECT_EQ(book.lowest(0), 1u);
  book.acknowledge(0, 100);
  EXPECT_EQ(book.outstanding(), 0u);
}

}  // namespace
}  // namespace kvs::meta
