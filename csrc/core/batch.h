// A submitted batch: per-request state, slice accounting, deadline, and the copy guard that keeps
// memory untouched once a request has been reported as finished.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "core/registry.h"

namespace kvs {

enum class TransferOp : uint8_t { kRead = 0, kWrite = 1 };

// One piece of a request's local memory: a request may gather (write) or scatter (read) many, in order,
// against one remote range.
struct Piece {
  char* addr = nullptr;
  uint64_t length = 0;
};

// Values are part of the Python API (transfer_engine.RequestState).
enum class RequestState : int32_t { kPending = 0, kCompleted = 1, kFailed = 2, kTimedOut = 3 };

using Clock = std::chrono::steady_clock;

class Batch {
 public:
  Batch(size_t requests, Clock::time_point deadline);

  size_t size() const { return states_.size(); }
  size_t remaining() const { return remaining_.load(std::memory_order_relaxed); }  // requests not final
  Clock::time_point deadline() const { return deadline_; }

  // Set-up, before slices are handed to transports.
  void set_slices(size_t request, uint64_t slices) { slices_left_[request].store(slices); }
  void hold_pin(RegionPin pin);
  // The local pieces of every request that has several (set-up, once, before slices go out: slices
  // point into them, and they live as long as the batch).
  void set_pieces(std::vector<Piece>&& pieces) { pieces_ = std::move(pieces); }
  const Piece* pieces() const { return pieces_.data(); }
  // Ends a request before any slice was issued (validation failure).
  void reject(size_t request, const Status& status) { finish(request, RequestState::kFailed, status.code()); }
  // Asks for the XXH3-64 of the bytes a read request lands into its local memory (`local`/`length`, or
  // its `piece_count` pieces from `first_piece` on), set-up, before its slices go out: the transport
  // moving its only slice hashes them as they land, in cache, and the caller need not read them again.
  void want_digest(size_t request, char* local, uint64_t length, uint32_t first_piece, uint32_t piece_count);
  bool wants_digest(size_t request) const { return digests_ && digests_[request].state.load() != kNotAsked; }
  // By the transport, before it reports the slice done.
  void set_digest(size_t request, uint64_t digest);
  // The digest of a completed request, when one was taken.
  bool digest(size_t request, uint64_t* out) const;
  // The digest of a completed request that asked for one: the one taken as it landed, else its local
  // bytes hashed now (moved in several slices). False when it asked none or is not complete.
  bool landed_digest(size_t request, uint64_t* out) const;

  // Transports report each slice exactly once.
  void slice_done(size_t request, const Status& status);

  // Wrap every access to local memory of a request: begin_copy() false means the request is over and
  // its memory must not be touched (data in flight is drained instead).
  bool begin_copy(size_t request);
  void end_copy();
  bool pending(size_t request) const { return state(request) == RequestState::kPending; }

  // Blocks until all requests finish or timeout_us passes (<0: until the batch deadline). Past the
  // deadline the unfinished requests become TIMED_OUT. Returns true when every request is final.
  bool wait(int64_t timeout_us);
  bool done();  // non-blocking; applies the deadline too

  RequestState state(size_t request) const { return static_cast<RequestState>(states_[request].load()); }
  Code error(size_t request) const { return static_cast<Code>(errors_[request].load()); }

 private:
  void finish(size_t request, RequestState state, Code error);
  void expire();
  void quiesce_and_release();

  std::vector<std::atomic<int32_t>> states_;
  std::vector<std::atomic<int32_t>> errors_;
  std::vector<std::atomic<uint64_t>> slices_left_;
  enum : uint8_t { kNotAsked, kAsked, kTaken };
  struct DigestSlot {
    std::atomic<uint8_t> state{kNotAsked};
    uint64_t value = 0;     // written before state turns kTaken
    char* local = nullptr;  // where the request lands (piece_count 0), else pieces_[first_piece...]
    uint64_t length = 0;
    uint32_t first_piece = 0;
    uint32_t piece_count = 0;
  };
  std::unique_ptr<DigestSlot[]> digests_;  // made by the first want_digest: batches that ask none pay nothing
  std::atomic<size_t> remaining_;
  std::atomic<int64_t> active_copies_{0};
  Clock::time_point deadline_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RegionPin> pins_;  // local regions, released when every request is final
  std::vector<Piece> pieces_;
  std::atomic<bool> released_{false};  // set once every request is final and no copy runs
};

}  // namespace kvs
