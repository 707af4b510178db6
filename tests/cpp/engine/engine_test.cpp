// The engine before XXH3 is loaded: a C++ caller (this binary, a tool) may run transfers without
// transfer_engine's import having loaded the checksum library. Reads still land, and a read that asks
// for its digest comes back unchecked (the caller verifies), as engine.h promises; the TCP transport
// used to make a hashing state for every reply it received, calling through XXH3's null entry points.
//
// XXH3, once loaded, stays loaded for the process, and other suites of this binary load it: each case
// runs in a fresh process (a death test in the "threadsafe" style re-executes the binary for just its
// statement), where nothing has loaded it. On the code before, that process died of SIGSEGV.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/xxh3.h"
#include "engine/flat_batches.h"

namespace kvs {
namespace {

constexpr uint64_t kBytes = 1 << 16;

// A real engine reading from itself over TCP on 127.0.0.1: one region of known bytes, one to land in.
class SelfReader {
 public:
  SelfReader() {
    EngineConfig config;
    config.transport = "tcp";
    engine_ = std::make_unique<Engine>(config);
    if (!engine_->start().ok()) return;
    StatusOr<RegionInfo> src = engine_->registry().allocate(kBytes, true);
    StatusOr<RegionInfo> dst = engine_->registry().allocate(kBytes, false);
    if (!src.ok() || !dst.ok()) return;
    src_ = src.value();
    dst_ = dst.value();
    for (uint64_t i = 0; i < kBytes; ++i)
      reinterpret_cast<uint8_t*>(src_.base)[i] = static_cast<uint8_t>(i * 7 + 1);
    StatusOr<uint32_t> peer = engine_->open_peer(engine_->name(), "");
    if (!peer.ok()) return;
    request_ = OneRequest{TransferOp::kRead, dst_.base, peer.value(), src_.id, 0, kBytes, 0, 0};
    ready_ = true;
  }
  ~SelfReader() { engine_->stop(); }

  bool ready() const { return ready_; }
  Engine& engine() { return *engine_; }
  const OneRequest& request() const { return request_; }
  void clear() { std::memset(reinterpret_cast<void*>(dst_.base), 0, kBytes); }
  bool landed() const {
    return std::memcmp(reinterpret_cast<void*>(dst_.base), reinterpret_cast<void*>(src_.base), kBytes) == 0;
  }

 private:
  std::unique_ptr<Engine> engine_;
  RegionInfo src_, dst_;
  OneRequest request_;
  bool ready_ = false;
};

// Exit codes of the child, so that a failure says which step it was (a crash is a signal, not these).
enum Step { kPassed = 0, kNoEngine = 10, kLoaded, kPlainRead, kPlainBytes, kVerifiedRead, kVerifiedBytes };

int read_without_xxh3() {
  if (xxh3::loaded()) return kLoaded;  // (the fresh process must not have it)
  SelfReader reader;
  if (!reader.ready()) return kNoEngine;
  const auto [state, error] = transfer_one(reader.engine(), reader.request(), 10000);
  if (state != static_cast<int>(RequestState::kCompleted) || error != 0) return kPlainRead;
  if (!reader.landed()) return kPlainBytes;
  reader.clear();
  // No digest can be taken without XXH3: unchecked, never a crash and never a false verdict.
  if (read_verified_one(reader.engine(), reader.request(), 10000, 12345) != kReadUnchecked)
    return kVerifiedRead;
  if (!reader.landed()) return kVerifiedBytes;
  return kPassed;
}

TEST(EngineWithoutXxh3, ReadsLandAndAVerifiedReadComesBackUnchecked) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(read_without_xxh3()), ::testing::ExitedWithCode(kPassed), "");
}

}  // namespace
}  // namespace kvs
