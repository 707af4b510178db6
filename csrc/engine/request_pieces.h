// What Engine::submit does with a batch's local memory before it reaches a transport: each local region
// pinned once per batch (BatchPins), a request's pieces checked and kept (pin_pieces), and requests cut
// into slices, runs of whole pieces where the transport gathers them (cut, cut_pieces).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"
#include "core/batch.h"
#include "core/memory.h"
#include "core/registry.h"
#include "core/slice.h"

namespace kvs {

using Located = std::pair<MemoryLocation, int32_t>;  // where local memory is, and its NUMA node

// The local regions one submit has pinned for its batch: each is pinned once, however many requests and
// pieces fall in it (a vLLM batch names thousands of pieces in a few dozen layer tensors).
class BatchPins {
 public:
  BatchPins(MemoryRegistry& registry, Batch& batch) : registry_(registry), batch_(batch) {}

  // Pins [addr, addr + length) for the batch (a read must not land in read-only memory).
  StatusOr<Located> pin(TransferOp op, uint64_t addr, uint64_t length) {
    const Held* held = find(addr, length);
    if (held == nullptr) {
      auto pin = registry_.pin_local(addr, length);
      if (!pin.ok()) return pin.status();
      const RegionInfo& info = pin.value().info();
      held_.push_back(Held{info.base, info.length, info.read_only, {info.location, info.numa_node}});
      batch_.hold_pin(std::move(pin.value()));
      held = &held_.back();
      last_ = held_.size() - 1;
    }
    if (op == TransferOp::kRead && held->read_only) {
      return Status(Code::kPermissionDenied, "a read would write into a read-only local region");
    }
    return held->where;
  }

 private:
  struct Held {
    uint64_t base;
    uint64_t length;
    bool read_only;
    Located where;
  };

  const Held* find(uint64_t addr, uint64_t length) {
    auto inside = [&](const Held& h) { return addr >= h.base && in_bounds(addr - h.base, length, h.length); };
    if (last_ < held_.size() && inside(held_[last_])) return &held_[last_];
    // Then the one pinned after it: a paged value's pieces visit the layers' tensors in the same order
    // value after value, so its next piece is in the next region (a scan per piece was ~25 ns).
    const size_t next = last_ + 1 < held_.size() ? last_ + 1 : 0;
    if (next < held_.size() && inside(held_[next])) {
      last_ = next;
      return &held_[next];
    }
    // The most recent few only: a batch spread over thousands of regions pins some twice, never scans
    // them all per request.
    for (size_t k = held_.size() > kScan ? held_.size() - kScan : 0; k < held_.size(); ++k) {
      if (inside(held_[k])) {
        last_ = k;
        return &held_[k];
      }
    }
    return nullptr;
  }

  MemoryRegistry& registry_;
  Batch& batch_;
  static constexpr size_t kScan = 64;
  std::vector<Held> held_;
  size_t last_ = 0;
};

// Pins a request's pieces and appends them to `out` (nothing appended when one is refused): each must be
// registered, non-empty and of one kind of memory with the others, and together `total` bytes.
StatusOr<Located> pin_pieces(BatchPins& pins, TransferOp op, const uint64_t* addrs, const uint64_t* lengths,
                             uint32_t count, uint64_t total, std::vector<Piece>& out);

// Cuts `length` bytes of local memory at `local` into slices of at most `step`, from proto's remote
// offset on (advanced past them).
void cut(Slice& proto, char* local, uint64_t length, uint64_t step, std::vector<Slice>& out);

// A request's pieces as slices: for a transport that gathers, runs of whole pieces of at most `step`
// bytes (and kMaxSlicePieces) each, a longer piece cut alone; else every piece a slice of its own.
void cut_pieces(Slice& proto, const Piece* pieces, uint32_t count, uint64_t step, bool gathers,
                std::vector<Slice>& out);

}  // namespace kvs
