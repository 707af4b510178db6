// The interface every transport implements. Transports describe themselves (cost, slice limit,
// reachability); the engine chooses among them and never special-cases a transport by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/batch.h"
#include "engine/descriptor.h"

namespace kvs {

// One contiguous piece of a request, moved by one path.
struct Slice {
  std::shared_ptr<Batch> batch;
  uint32_t request = 0;
  TransferOp op = TransferOp::kRead;
  char* local = nullptr;  // inside a region pinned by the batch
  uint64_t region_id = 0;
  uint64_t key = 0;
  uint64_t offset = 0;  // within the remote region
  uint64_t length = 0;

  void done(const Status& status) const { batch->slice_done(request, status); }
};

// A transport's link to one peer segment. Thread-safe.
class Channel {
 public:
  virtual ~Channel() = default;
  // Takes the slices; each one is reported to its batch exactly once, on any outcome.
  virtual void submit(std::vector<Slice>&& slices) = 0;
  // False once the link is broken for good; the engine then opens a new one.
  virtual bool healthy() const = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual uint32_t bit() const = 0;  // TransportBit
  // Lower is preferred when several transports reach a peer.
  virtual int cost() const = 0;
  // Largest slice this transport moves as one unit.
  virtual uint64_t slice_size() const = 0;
  virtual bool reachable(const SegmentDescriptor& peer) const = 0;
  virtual StatusOr<std::shared_ptr<Channel>> connect(const SegmentDescriptor& peer) = 0;
};

}  // namespace kvs
