// One contiguous piece of a request, moved by one path of one transport.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/batch.h"
#include "core/memory.h"

namespace kvs {

struct Slice;

// Another link to the same peer that moves a slice's kinds, for slices its own transport lost (every path
// down, endpoint closed): set by the engine, null when the peer has no such link.
class SliceFallback {
 public:
  virtual ~SliceFallback() = default;
  virtual void take(Slice&& slice) = 0;
};

struct Slice {
  std::shared_ptr<Batch> batch;
  uint32_t request = 0;
  TransferOp op = TransferOp::kRead;
  char* local = nullptr;  // inside a region pinned by the batch (null when `pieces` is set)
  // Or the local side is these pieces, in order (`length` is their sum): only for a transport that
  // gathers (Capabilities::gathers). They belong to the batch.
  const Piece* pieces = nullptr;
  uint32_t piece_count = 0;
  uint64_t region_id = 0;
  uint64_t key = 0;
  uint64_t offset = 0;  // within the remote region
  uint64_t length = 0;
  uint32_t fence_slot = 0;  // the allocation the request names in a fenced region (core/fence.h)
  uint64_t fence_gen = 0;   // 0: none named
  // Where the local memory is (which NICs are near it): gpu:N, else host memory on local_numa (-1: unknown).
  MemoryLocation local_location;
  int32_t local_numa = -1;
  uint8_t attempts = 0;  // paths it was already sent on and lost with (a transport's failover bound)
  bool digest = false;   // its request's only slice, and a digest was asked for: hash what lands (Batch)
  std::shared_ptr<SliceFallback> fallback;

  void done(const Status& status) const { batch->slice_done(request, status); }
  // Its transport lost it (the link failed, not the request): another link takes it, once, if there is
  // one; else it fails with `status`.
  void lost(const Status& status) const {
    if (fallback && status.code() != Code::kClosed && batch->pending(request)) {
      Slice again = *this;
      again.fallback.reset();
      again.attempts = 0;
      fallback->take(std::move(again));
      return;
    }
    done(status);
  }
};

// Takes the slices a dead connection still held (queued, or sent and unanswered) and why it died.
using LostSlices = std::function<void(std::vector<Slice>&&, const Status&)>;

}  // namespace kvs
