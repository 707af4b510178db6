// put_reply: a put_start reply's bytes, item by item, as msgpack-python writes the same values.
#include "meta/put_reply.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace kvs::meta {
namespace {

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

PutOutcome placed(uint32_t first, uint32_t count) {
  return {PutOutcome::Kind::kPlaced, first, count, 0, {}};
}

TEST(PutReply, AnEmptyBatchIsAnEmptyArray) {
  EXPECT_EQ(encode_put_reply({}, {}), bytes({0x90}));
}

TEST(PutReply, StoredAndFailedItemsCarryNoPlacements) {
  const std::vector<PutOutcome> outcomes{{PutOutcome::Kind::kStored, 0, 0, 0, {}},
                                         {PutOutcome::Kind::kFailed, 0, 0, 105, "no room"}};
  EXPECT_EQ(encode_put_reply(outcomes, {}),
            bytes({0x92, 0x93, 0x00, 0xa0, 0xc0, 0x93, 0x69, 0xa7}) + "no room" + bytes({0xc0}));
}

TEST(PutReply, APlacedItemNamesEachCopyFieldByFieldInTheSmallestForms) {
  const std::vector<PlacedCopy> copies{{"e:1", 7, 70000, 300, 1ull << 33}, {"e:2", 200, 0, 65536, 127}};
  const std::string got = encode_put_reply({placed(0, 2)}, copies);
  const std::string want = bytes({0x91, 0x93, 0x00, 0xa0, 0x92, 0x95, 0xa3}) + "e:1" +
                           bytes({0x07, 0xce, 0x00, 0x01, 0x11, 0x70, 0xcd, 0x01, 0x2c, 0xcf,
                                  0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x95, 0xa3}) +
                           "e:2" + bytes({0xcc, 0xc8, 0x00, 0xce, 0x00, 0x01, 0x00, 0x00, 0x7f});
  EXPECT_EQ(got, want);
}

TEST(PutReply, ItemsTakeTheirOwnCopiesInOrder) {
  const std::vector<PlacedCopy> copies{{"a", 1, 1, 1, 1}, {"b", 2, 2, 2, 2}, {"c", 3, 3, 3, 3}};
  const std::string got = encode_put_reply({placed(0, 1), placed(1, 2)}, copies);
  const auto copy = [](char engine, int v) { return bytes({0x95, 0xa1, engine, v, v, v, v}); };
  const std::string head = bytes({0x93, 0x00, 0xa0});
  EXPECT_EQ(got, bytes({0x92}) + head + bytes({0x91}) + copy('a', 1) + head + bytes({0x92}) + copy('b', 2) +
                     copy('c', 3));
}

TEST(PutReply, LongMessagesAndLargeBatchesTakeTheirWiderHeaders) {
  const std::string message(40, 'x');
  std::vector<PutOutcome> outcomes(16, PutOutcome{PutOutcome::Kind::kFailed, 0, 0, 100, message});
  const std::string got = encode_put_reply(outcomes, {});
  const std::string item = bytes({0x93, 0x64, 0xd9, 40}) + message + bytes({0xc0});
  std::string want = bytes({0xdc, 0x00, 0x10});
  for (int i = 0; i < 16; ++i) want += item;
  EXPECT_EQ(got, want);
}

TEST(PutReply, AnItemNamingCopiesPastTheEndIsRefused) {
  const std::vector<PlacedCopy> copies{{"a", 1, 1, 1, 1}};
  EXPECT_THROW(encode_put_reply({placed(0, 2)}, copies), std::out_of_range);
  EXPECT_THROW(encode_put_reply({placed(1, 1)}, copies), std::out_of_range);
}

}  // namespace
}  // namespace kvs::meta
