// One contiguous piece of a request, moved by one path of one transport.
#pragma once

#include <cstdint>
#include <memory>

#include "core/batch.h"

namespace kvs {

struct Slice {
  std::shared_ptr<Batch> batch;
  uint32_t request = 0;
  TransferOp op = TransferOp::kRead;
  char* local = nullptr;  // inside a region pinned by the batch
  uint64_t region_id = 0;
  uint64_t key = 0;
  uint64_t offset = 0;  // within the remote region
  uint64_t length = 0;
  uint32_t fence_slot = 0;  // the allocation the request names in a fenced region (core/fence.h)
  uint64_t fence_gen = 0;   // 0: none named

  void done(const Status& status) const { batch->slice_done(request, status); }
};

}  // namespace kvs
