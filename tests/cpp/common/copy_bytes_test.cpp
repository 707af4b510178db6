// The data path's copies: copy_bytes and copy_streaming (stores around the cache for a put's bytes) copy
// exactly the bytes asked, whatever the lengths and the alignment of either side (the streamed lines'
// head and tail), and never a byte outside the destination.
#include "common/copy_bytes.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace kvs {
namespace {

constexpr size_t kGuard = 64;
constexpr char kUntouched = 0x5a;

std::vector<char> pattern(size_t n, uint64_t seed) {
  std::vector<char> bytes(n);
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    bytes[i] = static_cast<char>(seed >> 56);
  }
  return bytes;
}

using Copy = void (*)(void*, const void*, size_t);

// Copies n bytes from source offset `from` to destination offset `to` (within 32-byte aligned buffers)
// and checks the copy and the guard bytes on both sides of it.
void check_copy(Copy copy, size_t n, size_t from, size_t to) {
  // (one byte more than copied: an empty vector's data() may be null, which memcmp may not be given)
  const std::vector<char> source = pattern(n + from + 1, n * 131 + from);
  alignas(32) static char destination[(2 << 20) + 4 * kGuard];
  const size_t span = kGuard + to + n + kGuard;
  ASSERT_LE(span, sizeof(destination));
  std::memset(destination, kUntouched, span);
  copy(destination + kGuard + to, source.data() + from, n);
  ASSERT_EQ(std::memcmp(destination + kGuard + to, source.data() + from, n), 0)
      << "n=" << n << " from=" << from << " to=" << to;
  for (size_t i = 0; i < kGuard + to; ++i) ASSERT_EQ(destination[i], kUntouched) << "before, n=" << n;
  for (size_t i = kGuard + to + n; i < span; ++i) ASSERT_EQ(destination[i], kUntouched) << "after, n=" << n;
}

const std::vector<size_t> kLengths = {
    0,   1,    31,   32,    33,    127,   128,       255,           256,
    257, 1000, 4103, 65535, 65536, 65549, 512 << 10, (1 << 20) + 5, 2 << 20};

TEST(CopyBytes, CopiesEveryLengthAndAlignment) {
  for (size_t n : kLengths) {
    for (size_t from : {0, 3, 32}) {
      for (size_t to : {0, 1, 17, 31, 32}) check_copy(&copy_bytes, n, from, to);
    }
  }
}

TEST(CopyStreaming, CopiesEveryLengthAndAlignment) {
  for (size_t n : kLengths) {
    for (size_t from : {0, 3, 32}) {
      for (size_t to : {0, 1, 17, 31, 32}) check_copy(&copy_streaming, n, from, to);
    }
  }
}

}  // namespace
}  // namespace kvs
