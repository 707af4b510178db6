// Batches as their callers hand them over: flat arrays, element i of each describing request i, checked
// here into a BatchView; and a batch of one request, submitted and run to its end in one call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "common/status.h"
#include "core/batch.h"
#include "engine/engine.h"

namespace kvs {

template <typename T>
struct ArrayView {
  const T* data = nullptr;
  size_t size = 0;
};

struct BatchArrays {
  ArrayView<uint8_t> ops;
  ArrayView<uint64_t> local_addrs;
  ArrayView<uint32_t> peers;
  ArrayView<uint64_t> region_ids;
  ArrayView<uint64_t> offsets;
  ArrayView<uint64_t> lengths;
  // Optional (BatchView says what each means): both fence arrays or neither, one entry per request.
  std::optional<ArrayView<uint32_t>> fence_slots;
  std::optional<ArrayView<uint64_t>> fence_gens;
  std::optional<ArrayView<uint8_t>> digests;  // one flag per request
  // All three or none: a count per request, then every piece's address and length.
  std::optional<ArrayView<uint32_t>> piece_counts;
  std::optional<ArrayView<uint64_t>> piece_addrs;
  std::optional<ArrayView<uint64_t>> piece_lengths;
};

// The view of the arrays (pointing into them), or kInvalidArgument when their lengths disagree.
StatusOr<BatchView> batch_view(const BatchArrays& a);

// kInvalidArgument unless wait_verified's expected digests and check flags number one per request.
Status check_verified_arrays(size_t requests, size_t expected, size_t check);

// One request of a batch.
struct OneRequest {
  TransferOp op = TransferOp::kRead;
  uint64_t local_addr = 0;
  uint32_t peer = 0;
  uint64_t region_id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t fence_slot = 0;  // with fence_gen 0: names no allocation
  uint64_t fence_gen = 0;
};

// Submits the request and waits for its end (no deadline on the wait but the request's own): its
// (RequestState, error code).
std::pair<int, int> transfer_one(Engine& engine, const OneRequest& r, int64_t timeout_ms);

// Submits a read asking for its digest and runs it to its end, verified against `expected` as it lands:
// Engine::wait_verified's verdict.
int32_t read_verified_one(Engine& engine, const OneRequest& r, int64_t timeout_ms, uint64_t expected);

}  // namespace kvs
