// flat_batches: flat arrays checked into a BatchView; one-request batches run to their end on a real
// engine reading from itself over TCP on 127.0.0.1.
#include "engine/flat_batches.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/xxh3.h"

namespace kvs {
namespace {

struct Columns {
  std::vector<uint8_t> ops{0, 0};
  std::vector<uint64_t> local{1, 2}, regions{3, 3}, offsets{0, 8}, lengths{8, 8};
  std::vector<uint32_t> peers{0, 0};
  BatchArrays arrays() const {
    return BatchArrays{{ops.data(), ops.size()},         {local.data(), local.size()},
                       {peers.data(), peers.size()},     {regions.data(), regions.size()},
                       {offsets.data(), offsets.size()}, {lengths.data(), lengths.size()}};
  }
};

template <typename T>
ArrayView<T> view(const std::vector<T>& v) {
  return {v.data(), v.size()};
}

TEST(FlatBatches, AViewPointsIntoTheArrays) {
  const Columns c;
  const std::vector<uint32_t> slots{1, 2};
  const std::vector<uint64_t> gens{3, 4};
  BatchArrays a = c.arrays();
  a.fence_slots = view(slots);
  a.fence_gens = view(gens);
  const StatusOr<BatchView> v = batch_view(a);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v.value().count, 2u);
  EXPECT_EQ(v.value().offsets, c.offsets.data());
  EXPECT_EQ(v.value().fence_gens, gens.data());
  EXPECT_EQ(v.value().digests, nullptr);
  EXPECT_EQ(v.value().piece_counts, nullptr);
}

TEST(FlatBatches, ArraysThatDisagreeAreRefusedSayingWhich) {
  Columns c;
  c.lengths.pop_back();
  EXPECT_EQ(batch_view(c.arrays()).status().message(), "batch arrays differ in length");
  const Columns ok;
  const std::vector<uint32_t> one_slot{1}, counts{1, 1};
  const std::vector<uint64_t> gens{1, 1}, addrs{1, 2}, lens{1};
  const std::vector<uint8_t> flags{1};
  BatchArrays a = ok.arrays();
  a.fence_gens = view(gens);  // without its slots
  EXPECT_EQ(batch_view(a).status().code(), Code::kInvalidArgument);
  a.fence_slots = view(one_slot);  // one short
  EXPECT_EQ(batch_view(a).status().message(), "fence arrays must both be given, one entry per request");
  a = ok.arrays();
  a.digests = view(flags);
  EXPECT_EQ(batch_view(a).status().message(), "one digest flag per request");
  a = ok.arrays();
  a.piece_counts = view(counts);
  a.piece_addrs = view(addrs);
  EXPECT_EQ(batch_view(a).status().code(), Code::kInvalidArgument);  // no lengths
  a.piece_lengths = view(lens);                                      // fewer lengths than addresses
  EXPECT_EQ(batch_view(a).status().code(), Code::kInvalidArgument);
  a.piece_lengths = view(addrs);
  ASSERT_TRUE(batch_view(a).ok());
  EXPECT_EQ(batch_view(a).value().piece_total, 2u);
}

TEST(FlatBatches, VerifiedArraysNumberOnePerRequest) {
  EXPECT_TRUE(check_verified_arrays(3, 3, 3).ok());
  EXPECT_EQ(check_verified_arrays(3, 2, 3).code(), Code::kInvalidArgument);
  EXPECT_EQ(check_verified_arrays(3, 3, 4).code(), Code::kInvalidArgument);
}

class OneRequests : public ::testing::Test {
 protected:
  void SetUp() override {
    // The engine's copies hash with XXH3 from the xxhash package's library, as transfer_engine loads it.
    const char* library = KVSTORE_TEST_XXHASH_LIBRARY;
    if (library[0] == '\0') GTEST_SKIP() << "the xxhash package's library was not found at configure time";
    if (KVSTORE_TEST_LIBPYTHON[0] != '\0') dlopen(KVSTORE_TEST_LIBPYTHON, RTLD_NOW | RTLD_GLOBAL);
    ASSERT_TRUE(xxh3::load(library).ok());
    EngineConfig config;
    config.transport = "tcp";
    engine_ = std::make_unique<Engine>(config);
    ASSERT_TRUE(engine_->start().ok());
    StatusOr<RegionInfo> src = engine_->registry().allocate(kBytes, true);
    StatusOr<RegionInfo> dst = engine_->registry().allocate(kBytes, false);
    ASSERT_TRUE(src.ok() && dst.ok());
    src_ = src.value();
    dst_ = dst.value();
    for (uint64_t i = 0; i < kBytes; ++i)
      reinterpret_cast<uint8_t*>(src_.base)[i] = static_cast<uint8_t>(i * 7 + 1);
    StatusOr<uint32_t> peer = engine_->open_peer(engine_->name(), "");
    ASSERT_TRUE(peer.ok()) << peer.status().message();
    request_ = OneRequest{TransferOp::kRead, dst_.base, peer.value(), src_.id, 0, kBytes, 0, 0};
  }
  void TearDown() override {
    if (engine_) engine_->stop();
  }
  bool landed() const {
    return std::memcmp(reinterpret_cast<void*>(dst_.base), reinterpret_cast<void*>(src_.base), kBytes) == 0;
  }

  static constexpr uint64_t kBytes = 1 << 16;
  std::unique_ptr<Engine> engine_;
  RegionInfo src_, dst_;
  OneRequest request_;
};

TEST_F(OneRequests, ATransferRunsToItsEndWithTheBytesLanded) {
  const auto [state, error] = transfer_one(*engine_, request_, 5000);
  EXPECT_EQ(state, static_cast<int>(RequestState::kCompleted));
  EXPECT_EQ(error, 0);
  EXPECT_TRUE(landed());
  OneRequest outside = request_;
  outside.offset = kBytes - 8;  // runs past the region
  const auto [bad_state, bad_error] = transfer_one(*engine_, outside, 5000);
  EXPECT_EQ(bad_state, static_cast<int>(RequestState::kFailed));
  EXPECT_NE(bad_error, 0);
}

TEST_F(OneRequests, AVerifiedReadComparesTheLandedBytesDigest) {
  const uint64_t addr = src_.base, length = kBytes;
  const uint64_t digest = xxh3::hash_pieces(&addr, &length, 1);
  EXPECT_EQ(read_verified_one(*engine_, request_, 5000, digest ^ 1), kReadMismatch);
  EXPECT_EQ(read_verified_one(*engine_, request_, 5000, digest), kReadVerified);
  EXPECT_TRUE(landed());
}

}  // namespace
}  // namespace kvs
