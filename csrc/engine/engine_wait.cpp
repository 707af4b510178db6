// Engine's waits on a batch: helping the copy pool, spinning briefly for the last replies, and verifying
// reads as they end.
#include <algorithm>
#include <vector>

#include "engine/engine.h"

namespace kvs {

namespace {
constexpr size_t kSpinRequests = 2;
}  // namespace

bool Engine::wait(Batch& batch, int64_t timeout_us, bool help) {
  while (help && !batch.done() && pool_->run_one()) {
  }
  // A reply to one or two requests often lands within tens of microseconds, sooner than a sleeping
  // thread wakes: spin briefly for those. Not for a batch with more to come: spinning there took a core
  // the I/O threads needed (2 cores: 64 KiB x 16 TCP reads 0.86-0.92 of raw with it, 1.03-1.13
  // without). Spinning again for a batch's last replies measured no better (small-object gets worse).
  const int64_t spin_us = batch.remaining() <= kSpinRequests ? 40 : 0;
  const auto spin =
      std::chrono::microseconds(timeout_us < 0 ? spin_us : std::min<int64_t>(spin_us, timeout_us));
  const auto spin_until = Clock::now() + spin;
  while (Clock::now() < spin_until) {
    if (batch.done()) return true;
  }
  return batch.wait(timeout_us);
}

namespace {
int32_t verdict(const Batch& batch, size_t request, uint64_t expected, bool check) {
  if (batch.state(request) != RequestState::kCompleted) {
    const auto code = static_cast<int32_t>(batch.error(request));
    return code != 0 ? code : static_cast<int32_t>(Code::kConnectionFailed);
  }
  if (!check) return kReadVerified;
  uint64_t landed = 0;
  if (!batch.landed_digest(request, &landed)) return kReadUnchecked;
  return landed == expected ? kReadVerified : kReadMismatch;
}
}  // namespace

void Engine::wait_verified(Batch& batch, const uint64_t* expected, const uint8_t* check, int32_t* verdicts) {
  const size_t n = batch.size();
  std::vector<uint8_t> open(n, 1);
  size_t left = n;
  // Looks at the states between bursts of copies (a look at a few hundred states costs less than one
  // copy); with nothing to copy it sleeps, longer while nothing ends: the batch's end wakes it at once.
  constexpr auto kHelpBetweenLooks = std::chrono::microseconds(100);
  constexpr int64_t kFirstSleepUs = 200, kLongestSleepUs = 3200;
  int64_t sleep_us = kFirstSleepUs;
  while (left != 0) {
    bool helped = false;
    for (const auto until = Clock::now() + kHelpBetweenLooks; pool_->run_one();) {
      helped = true;
      if (Clock::now() >= until) break;
    }
    batch.done();  // (applies the deadline)
    size_t ended = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!open[i] || batch.pending(i)) continue;
      open[i] = 0;
      --left;
      ++ended;
      verdicts[i] = verdict(batch, i, expected[i], check[i] != 0);
    }
    if (left == 0) break;
    if (ended != 0 || helped) {
      sleep_us = kFirstSleepUs;
    } else {
      wait(batch, sleep_us, false);
      sleep_us = std::min(2 * sleep_us, kLongestSleepUs);
    }
  }
  batch.wait(-1);  // (every request is final: returns once no copy of a failed one runs any more)
}

}  // namespace kvs
