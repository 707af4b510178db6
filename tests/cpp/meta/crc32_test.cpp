// crc32: zlib's CRC-32, eight bytes a step; the eviction policy's sample depends on every value.
#include "meta/crc32.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

namespace kvs::meta {
namespace {

// The definition, a bit at a time: what every table must agree with.
uint32_t crc32_by_bits(std::string_view bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

TEST(Crc32, KnownValues) {
  EXPECT_EQ(crc32(""), 0u);
  EXPECT_EQ(crc32("123456789"), 0xCBF43926u);  // the check value of CRC-32/ISO-HDLC
  EXPECT_EQ(crc32("a"), 0xE8B7BE43u);          // zlib.crc32(b"a")
  EXPECT_EQ(crc32("bm/c0/12345"), crc32_by_bits("bm/c0/12345"));
}

TEST(Crc32, EveryLengthAndAlignmentMatchesTheDefinition) {
  std::mt19937 random(7);
  std::string buffer(200, '\0');
  for (char& c : buffer) c = static_cast<char>(random());
  for (size_t start = 0; start < 8; ++start) {
    for (size_t length = 0; length <= 80; ++length) {
      const std::string_view bytes(buffer.data() + start, length);
      ASSERT_EQ(crc32(bytes), crc32_by_bits(bytes)) << "start " << start << " length " << length;
    }
  }
}

}  // namespace
}  // namespace kvs::meta
