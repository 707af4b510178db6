#include "engine/flat_batches.h"

#include <memory>

#include "core/copy_pool.h"

namespace kvs {
namespace {

// A one-request view of `r`, pointing into it.
BatchView one_view(const OneRequest& r, const uint8_t* op) {
  return BatchView{op, &r.local_addr, &r.peer,     &r.region_id, &r.offset, &r.length,
                   1,  &r.fence_slot, &r.fence_gen};
}

}  // namespace

StatusOr<BatchView> batch_view(const BatchArrays& a) {
  const size_t n = a.ops.size;
  if (a.local_addrs.size != n || a.peers.size != n || a.region_ids.size != n || a.offsets.size != n ||
      a.lengths.size != n) {
    return Status(Code::kInvalidArgument, "batch arrays differ in length");
  }
  BatchView view{
      a.ops.data, a.local_addrs.data, a.peers.data, a.region_ids.data, a.offsets.data, a.lengths.data, n};
  if (a.fence_slots.has_value() != a.fence_gens.has_value() ||
      (a.fence_slots && (a.fence_slots->size != n || a.fence_gens->size != n))) {
    return Status(Code::kInvalidArgument, "fence arrays must both be given, one entry per request");
  }
  if (a.fence_slots) {
    view.fence_slots = a.fence_slots->data;
    view.fence_gens = a.fence_gens->data;
  }
  if (a.digests) {
    if (a.digests->size != n) return Status(Code::kInvalidArgument, "one digest flag per request");
    view.digests = a.digests->data;
  }
  if (a.piece_counts || a.piece_addrs || a.piece_lengths) {
    if (!a.piece_counts || !a.piece_addrs || !a.piece_lengths || a.piece_counts->size != n ||
        a.piece_addrs->size != a.piece_lengths->size) {
      return Status(Code::kInvalidArgument,
                    "pieces take three arrays: a count per request, then every piece's address and length");
    }
    view.piece_counts = a.piece_counts->data;
    view.piece_addrs = a.piece_addrs->data;
    view.piece_lengths = a.piece_lengths->data;
    view.piece_total = a.piece_addrs->size;
  }
  return view;
}

Status check_verified_arrays(size_t requests, size_t expected, size_t check) {
  if (expected != requests || check != requests) {
    return Status(Code::kInvalidArgument, "one expected digest and check flag per request");
  }
  return Status::OK();
}

std::pair<int, int> transfer_one(Engine& engine, const OneRequest& r, int64_t timeout_ms) {
  const auto op = static_cast<uint8_t>(r.op);
  std::shared_ptr<Batch> batch;
  {
    CopyPool::CallerRuns caller;  // (the wait below copies a same-host slice on this thread)
    batch = engine.submit(one_view(r, &op), timeout_ms);
  }
  engine.wait(*batch, -1);
  return {static_cast<int>(batch->state(0)), static_cast<int>(batch->error(0))};
}

int32_t read_verified_one(Engine& engine, const OneRequest& r, int64_t timeout_ms, uint64_t expected) {
  const auto op = static_cast<uint8_t>(TransferOp::kRead);
  const uint8_t asked = 1;
  BatchView view = one_view(r, &op);
  view.digests = &asked;
  std::shared_ptr<Batch> batch;
  {
    CopyPool::CallerRuns caller;  // (wait_verified copies a same-host slice on this thread)
    batch = engine.submit(view, timeout_ms);
  }
  int32_t verdict = 0;
  engine.wait_verified(*batch, &expected, &asked, &verdict);
  return verdict;
}

}  // namespace kvs
