// The store's checksums: the fused copy-and-hash (FusedCopy), copy_and_hash and the batch hashes give the
// xxhash library's own one-shot XXH3-64 of the bytes, whatever the lengths and piece splits (around the
// 64 KiB line where copies start to store around the cache), and copy every byte.
#include "common/xxh3.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/xxh3_copy.h"

namespace kvs::xxh3 {
namespace {

using OneShot = uint64_t (*)(const void*, size_t);

// The library's one-shot hash, the reference every digest is checked against; loads kvs::xxh3 too.
class Xxh3 : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* library = KVSTORE_TEST_XXHASH_LIBRARY;
    if (library[0] == '\0') GTEST_SKIP() << "the xxhash Python package was not found at configure time";
    // (the extension names CPython's symbols: found once libpython is loaded globally)
    if (KVSTORE_TEST_LIBPYTHON[0] != '\0') dlopen(KVSTORE_TEST_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL);
    void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle, nullptr) << dlerror();
    reference_ = reinterpret_cast<OneShot>(dlsym(handle, "XXH3_64bits"));
    ASSERT_NE(reference_, nullptr);
    ASSERT_TRUE(load(library).ok());
  }

  static std::vector<char> pattern(size_t n, uint64_t seed) {
    std::vector<char> bytes(n);
    for (size_t i = 0; i < n; ++i) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      bytes[i] = static_cast<char>(seed >> 56);
    }
    return bytes;
  }

  OneShot reference_ = nullptr;
};

constexpr size_t kKiB = 1024;
const size_t kLengths[] = {241,
                           255,
                           256,
                           1000,
                           4096,
                           64 * kKiB - 1,
                           64 * kKiB,
                           64 * kKiB + 1,
                           64 * kKiB + 63,
                           64 * kKiB + 64,
                           128 * kKiB + 7,
                           256 * kKiB,
                           1024 * kKiB + 13};

TEST_F(Xxh3, FusedCopyMatchesTheLibraryOverLengthsAndPieceSplits) {
  if (!fused_enabled()) GTEST_SKIP() << "no AVX2 here: the fused path is off (copies hash in two passes)";
  const size_t pieces[] = {1, 7, 63, 64, 65, 4093, 8 * kKiB, 64 * kKiB - 1, 64 * kKiB, 64 * kKiB + 1};
  for (size_t length : kLengths) {
    const std::vector<char> src = pattern(length, length);
    const uint64_t expected = reference_(src.data(), length);
    for (size_t piece : pieces) {
      if (length / piece > 20000) continue;             // (small pieces: checked on the shorter lengths)
      for (size_t misalign : {size_t{0}, size_t{1}}) {  // 32-byte aligned (streamed) and not
        std::vector<char> storage(length + 64, 0);
        char* dst = storage.data() + (32 - reinterpret_cast<uintptr_t>(storage.data()) % 32) + misalign;
        FusedCopy copy(length);
        for (size_t at = 0; at < length; at += piece)
          copy.copy(dst + at, src.data() + at, std::min(piece, length - at));
        ASSERT_EQ(copy.digest(), expected) << length << " bytes in pieces of " << piece;
        ASSERT_EQ(std::memcmp(dst, src.data(), length), 0) << length << " bytes in pieces of " << piece;
      }
    }
  }
}

TEST_F(Xxh3, CopyAndHashMatchesTheOneShotHash) {
  for (size_t length : {size_t{0}, size_t{1}, size_t{16}, size_t{240}, size_t{241}}) {
    const std::vector<char> src = pattern(length + 1, 3);
    std::vector<char> dst(length + 1, 0);
    EXPECT_EQ(copy_and_hash(dst.data(), src.data(), length), reference_(src.data(), length)) << length;
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), length), 0);
  }
  for (size_t length : kLengths) {
    const std::vector<char> src = pattern(length, 11);
    std::vector<char> dst(length, 0);
    EXPECT_EQ(copy_and_hash(dst.data(), src.data(), length), reference_(src.data(), length)) << length;
    EXPECT_EQ(dst, src);
  }
}

TEST_F(Xxh3, CopyAndHashIntoAStreamOverPieces) {
  const size_t length = 200 * kKiB + 5;
  const std::vector<char> src = pattern(length, 5);
  std::vector<char> dst(length, 0);
  Stream hash;
  size_t at = 0;
  for (size_t piece : {size_t{1}, 64 * kKiB - 1, size_t{2}, 64 * kKiB + 3}) {
    copy_and_hash(dst.data() + at, src.data() + at, piece, hash);
    at += piece;
  }
  copy_and_hash(dst.data() + at, src.data() + at, length - at, hash);
  EXPECT_EQ(hash.digest(), reference_(src.data(), length));
  EXPECT_EQ(dst, src);
}

TEST_F(Xxh3, HashValuesGivesEachValueTheDigestOfItsPiecesInOrder) {
  // 96 values of 3 pieces each, laid out as a paged cache lays them (piece k of every value side by
  // side), then a few contiguous ones and one of a single piece; 24 MiB in all: hashed on several threads.
  constexpr size_t kValues = 100;
  constexpr size_t kPiece = 80 * kKiB;
  const std::vector<char> memory = pattern(kValues * 3 * kPiece, 21);
  const auto base = reinterpret_cast<uint64_t>(memory.data());
  std::vector<uint64_t> addrs, lengths, counts;
  for (size_t v = 0; v < kValues; ++v) {
    const size_t n = v == kValues - 1 ? 1 : 3;
    for (size_t k = 0; k < n; ++k) {
      const bool paged = v < 96;
      addrs.push_back(base + (paged ? (k * kValues + v) * kPiece : (v * 3 + k) * kPiece));
      lengths.push_back(kPiece - v);  // values differ in size
    }
    counts.push_back(n);
  }
  std::vector<uint64_t> out(kValues, 0);
  hash_values(addrs.data(), lengths.data(), counts.data(), kValues, out.data());
  size_t first = 0;
  for (size_t v = 0; v < kValues; ++v) {
    std::vector<char> joined;
    for (size_t k = first; k < first + counts[v]; ++k) {
      const char* piece = reinterpret_cast<const char*>(addrs[k]);
      joined.insert(joined.end(), piece, piece + lengths[k]);
    }
    ASSERT_EQ(out[v], reference_(joined.data(), joined.size())) << "value " << v;
    ASSERT_EQ(hash_pieces(addrs.data() + first, lengths.data() + first, counts[v]), out[v]);
    first += counts[v];
  }
}

}  // namespace
}  // namespace kvs::xxh3
