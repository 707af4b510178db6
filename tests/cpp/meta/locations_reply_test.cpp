// locations_reply: a get_replicas response frame read field by field, and every frame outside the common
// shape left to the general decoder.
#include "meta/locations_reply.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "meta/msgpack_writer.h"

namespace kvs::meta {
namespace {

struct Copy {
  uint64_t tier = 0;
  std::string host = "h1";
  std::string engine = "127.0.0.1:7000";
  uint64_t region = 1, offset = 4096, slot = 3, gen = 9;
  std::string path;
};

void write_copy(MsgpackWriter& w, const Copy& c) {
  w.array(8);
  w.uint(c.tier);
  w.str(c.host);
  w.str(c.engine);
  w.uint(c.region);
  w.uint(c.offset);
  w.uint(c.slot);
  w.uint(c.gen);
  w.str(c.path);
}

// [msg_id, 0, "", [nil, [size, checksum, [copies...]]]]
std::string frame(const std::vector<Copy>& copies, uint64_t msg_id = 7, uint64_t size = 1024) {
  MsgpackWriter w;
  w.array(4);
  w.uint(msg_id);
  w.uint(0);
  w.str("");
  w.array(2);
  w.nil();
  w.array(3);
  w.uint(size);
  w.uint(0xfedcba9876543210ull);
  w.array(static_cast<uint32_t>(copies.size()));
  for (const Copy& c : copies) write_copy(w, c);
  return w.take();
}

TEST(LocationsReply, AMissAndAHitWithTwoCopiesReadFieldByField) {
  Copy a, b;
  b.tier = 1;
  b.host = "h2";
  b.engine = "127.0.0.1:7001";
  b.region = 1ull << 40;
  b.offset = 70000;
  b.slot = 65536;
  b.gen = ~0ull;
  b.path = "";
  LocationsReply r;
  const std::string bytes = frame({a, b}, 1ull << 33);  // (kept: the reply's strings are views into it)
  ASSERT_TRUE(read_locations_reply(bytes, r));
  EXPECT_EQ(r.msg_id, 1ull << 33);
  ASSERT_EQ(r.entries.size(), 2u);
  EXPECT_FALSE(r.entries[0].hit);
  const LocatedEntry& e = r.entries[1];
  EXPECT_TRUE(e.hit);
  EXPECT_EQ(e.size, 1024u);
  EXPECT_EQ(e.checksum, 0xfedcba9876543210ull);
  ASSERT_EQ(e.count, 2u);
  const LocatedCopy& second = r.copies[e.first + 1];
  EXPECT_EQ(r.copies[e.first].engine, "127.0.0.1:7000");
  EXPECT_EQ(r.copies[e.first].offset, 4096u);
  EXPECT_EQ(second.tier, 1u);
  EXPECT_EQ(second.host_id, "h2");
  EXPECT_EQ(second.engine, "127.0.0.1:7001");
  EXPECT_EQ(second.region_id, 1ull << 40);
  EXPECT_EQ(second.offset, 70000u);
  EXPECT_EQ(second.slot, 65536u);
  EXPECT_EQ(second.gen, ~0ull);
  EXPECT_EQ(second.path, "");
}

TEST(LocationsReply, LongStringsAndLongArraysAreRead) {
  Copy c;
  c.host = std::string(40, 'h');     // str8
  c.engine = std::string(300, 'e');  // str16
  c.path = std::string(70000, 'p');  // str32
  MsgpackWriter w;
  w.array(4);
  w.uint(1);
  w.uint(0);
  w.str("");
  w.array(70000);  // array32 of misses
  for (int i = 0; i < 69999; ++i) w.nil();
  w.array(3);
  w.uint(5);
  w.uint(6);
  w.array(20);  // array16 of copies
  for (int i = 0; i < 20; ++i) write_copy(w, c);
  LocationsReply r;
  ASSERT_TRUE(read_locations_reply(w.data(), r));
  ASSERT_EQ(r.entries.size(), 70000u);
  EXPECT_EQ(r.entries.back().count, 20u);
  EXPECT_EQ(r.copies.back().path.size(), 70000u);
  EXPECT_EQ(r.copies.back().engine, c.engine);
}

TEST(LocationsReply, AnEmptyBatchIsRead) {
  LocationsReply r;
  ASSERT_TRUE(read_locations_reply(std::string("\x94\x01\x00\xa0\x90", 5), r));
  EXPECT_TRUE(r.entries.empty());
}

TEST(LocationsReply, EveryTruncationAndAnyTrailingByteIsLeftToTheGeneralDecoder) {
  const std::string whole = frame({Copy{}, Copy{}});
  LocationsReply r;
  ASSERT_TRUE(read_locations_reply(whole, r));
  for (size_t n = 0; n < whole.size(); ++n) {
    EXPECT_FALSE(read_locations_reply(std::string_view(whole).substr(0, n), r)) << n;
  }
  EXPECT_FALSE(read_locations_reply(whole + '\xc0', r));
}

// frame({Copy{}}) with its `n` bytes at `at` replaced by `bytes`.
std::string spoiled(size_t at, size_t n, std::string_view bytes) {
  const std::string f = frame({Copy{}});
  return f.substr(0, at) + std::string(bytes) + f.substr(at + n);
}

TEST(LocationsReply, FormsOutsideTheCommonShapeAreLeftToTheGeneralDecoder) {
  // frame({Copy{}}): 94 | 07 | 00 | a0 | 92 c0 | 93 cd0400 cf<8> 91 98 00 a2"h1" ae"127.0.0.1:7000" ...
  const size_t msg_id = 1, code = 2, message = 3, miss = 5, entry = 6, size = 7, copies = 19, copy = 20;
  const size_t tier = copy + 1, host = copy + 2, engine = copy + 5;
  LocationsReply r;
  const std::string unspoiled = spoiled(0, 0, "");  // (kept: the reply's strings are views into it)
  ASSERT_TRUE(read_locations_reply(unspoiled, r));
  ASSERT_EQ(r.copies.at(0).engine, "127.0.0.1:7000");
  EXPECT_FALSE(read_locations_reply(spoiled(0, 1, "\x93"), r)) << "a response of 3 parts";
  EXPECT_FALSE(read_locations_reply(spoiled(msg_id, 1, "\xd0\x07"), r)) << "a signed msg_id";
  EXPECT_FALSE(read_locations_reply(spoiled(code, 1, "\x01"), r)) << "an error reply";
  EXPECT_FALSE(read_locations_reply(spoiled(message, 1, "\x01"), r)) << "a message that is not a str";
  EXPECT_FALSE(read_locations_reply(spoiled(miss, 1, "\xc2"), r)) << "a bool entry";
  EXPECT_FALSE(read_locations_reply(spoiled(entry, 1, "\x92"), r)) << "an entry of 2 fields";
  EXPECT_FALSE(read_locations_reply(spoiled(size, 3, "\xcb\x40\x90\x00\x00\x00\x00\x00\x00"), r))
      << "a float size";
  EXPECT_FALSE(read_locations_reply(spoiled(size, 3, "\xcf\x80\x00\x00\x00\x00\x00\x00\x00"), r))
      << "a size of 2^63";
  EXPECT_TRUE(read_locations_reply(spoiled(size, 3, "\xcf\x7f\xff\xff\xff\xff\xff\xff\xff"), r))
      << "a size of 2^63 - 1";
  EXPECT_EQ(r.entries.at(1).size, (1ull << 63) - 1);
  EXPECT_FALSE(read_locations_reply(spoiled(size, 3, "\xd1\x04\x00"), r)) << "a signed size";
  EXPECT_FALSE(read_locations_reply(spoiled(copies, 1, "\xdd\xff\xff\xff\xff"), r)) << "copies past the end";
  EXPECT_FALSE(read_locations_reply(spoiled(copy, 1, "\x97"), r)) << "a copy of 7 fields";
  EXPECT_TRUE(read_locations_reply(spoiled(tier, 1, "\x01"), r)) << "tier 1";
  EXPECT_FALSE(read_locations_reply(spoiled(tier, 1, "\x02"), r)) << "tier 2";
  EXPECT_FALSE(read_locations_reply(spoiled(tier, 1, "\xc3"), r)) << "a bool tier";
  EXPECT_FALSE(read_locations_reply(spoiled(tier, 1, "\xff"), r)) << "a negative tier";
  EXPECT_FALSE(read_locations_reply(spoiled(host, 3, "\xc4\x02h1"), r)) << "bytes for a str";
  EXPECT_FALSE(read_locations_reply(spoiled(host, 3, "\xc0"), r)) << "a nil host";
  // an engine of "": a disk record read from its path, the general decoder's rule
  EXPECT_FALSE(read_locations_reply(spoiled(engine, 15, "\xa0"), r));
  EXPECT_TRUE(read_locations_reply(spoiled(engine, 15, "\xa1x"), r));
}

}  // namespace
}  // namespace kvs::meta
