#include "core/batch.h"

#include <thread>

#include "common/xxh3.h"

namespace kvs {

Batch::Batch(size_t requests, Clock::time_point deadline)
    : states_(requests),
      errors_(requests),
      slices_left_(requests),
      remaining_(requests),
      deadline_(deadline) {
  for (size_t i = 0; i < requests; ++i) {
    states_[i].store(static_cast<int32_t>(RequestState::kPending));
    errors_[i].store(0);
    slices_left_[i].store(0);
  }
  if (requests == 0) released_.store(true);
}

void Batch::want_digest(size_t request, char* local, uint64_t length, uint32_t first_piece,
                        uint32_t piece_count) {
  if (!digests_) digests_ = std::make_unique<DigestSlot[]>(size());  // (set-up: one thread)
  DigestSlot& slot = digests_[request];
  slot.local = local;
  slot.length = length;
  slot.first_piece = first_piece;
  slot.piece_count = piece_count;
  slot.state.store(kAsked, std::memory_order_relaxed);
}

void Batch::set_digest(size_t request, uint64_t digest) {
  digests_[request].value = digest;
  digests_[request].state.store(kTaken, std::memory_order_release);
}

bool Batch::digest(size_t request, uint64_t* out) const {
  if (!digests_ || state(request) != RequestState::kCompleted ||
      digests_[request].state.load(std::memory_order_acquire) != kTaken) {
    return false;
  }
  *out = digests_[request].value;
  return true;
}

bool Batch::landed_digest(size_t request, uint64_t* out) const {
  if (digest(request, out)) return true;
  if (!digests_ || state(request) != RequestState::kCompleted ||
      digests_[request].state.load(std::memory_order_acquire) == kNotAsked || !xxh3::loaded()) {
    return false;
  }
  const DigestSlot& slot = digests_[request];
  xxh3::Stream hash;
  if (slot.piece_count == 0) {
    hash.update(slot.local, slot.length);
  } else {
    for (uint32_t k = 0; k < slot.piece_count; ++k) {
      const Piece& p = pieces_[slot.first_piece + k];
      hash.update(p.addr, p.length);
    }
  }
  *out = hash.digest();
  return true;
}

void Batch::hold_pin(RegionPin pin) {
  std::lock_guard<std::mutex> lock(mu_);
  pins_.push_back(std::move(pin));
}

void Batch::slice_done(size_t request, const Status& status) {
  if (!status.ok()) {
    finish(request, RequestState::kFailed, status.code());
  }
  if (slices_left_[request].fetch_sub(1) == 1 && status.ok()) {
    finish(request, RequestState::kCompleted, Code::kOk);
  }
}

void Batch::finish(size_t request, RequestState state, Code error) {
  int32_t expected = static_cast<int32_t>(RequestState::kPending);
  if (!states_[request].compare_exchange_strong(expected, static_cast<int32_t>(state))) return;
  errors_[request].store(static_cast<int32_t>(error));
  if (remaining_.fetch_sub(1) == 1) {
    quiesce_and_release();
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
}

bool Batch::begin_copy(size_t request) {
  active_copies_.fetch_add(1);
  if (pending(request)) return true;
  active_copies_.fetch_sub(1);
  return false;
}

void Batch::end_copy() {
  active_copies_.fetch_sub(1);
}

void Batch::quiesce_and_release() {
  // A request failed or timed out may still have a copy running on another thread: its memory stays
  // pinned until that copy is over. Copies are bounded by the transports' I/O timeout.
  while (active_copies_.load() != 0) std::this_thread::yield();
  std::vector<RegionPin> pins;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pins.swap(pins_);
  }
  released_.store(true);
}

void Batch::expire() {
  for (size_t i = 0; i < states_.size(); ++i) finish(i, RequestState::kTimedOut, Code::kTimedOut);
}

bool Batch::done() {
  if (released_.load()) return true;
  if (Clock::now() >= deadline_) {
    expire();
    // Another thread may be finishing the last request right now; wait for its release.
    while (!released_.load()) std::this_thread::yield();
    return true;
  }
  return false;
}

bool Batch::wait(int64_t timeout_us) {
  auto until = deadline_;
  if (timeout_us >= 0) until = std::min(until, Clock::now() + std::chrono::microseconds(timeout_us));
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, until, [&] { return released_.load(); });
  }
  return done();
}

}  // namespace kvs
