// Same-host transport: memfd-backed peer regions are mapped here so a transfer is one memcpy; other
// exported memory is reached with process_vm_readv/writev.
#pragma once

#include "engine/copy_pool.h"
#include "transport/transport.h"

namespace kvs::shm {

class ShmTransport : public Transport {
 public:
  ShmTransport(CopyPool* pool, std::string host_id, uint64_t slice_size)
      : pool_(pool), host_id_(std::move(host_id)), slice_size_(slice_size) {}
  const char* name() const override { return "shm"; }
  uint32_t bit() const override { return kTransportShm; }
  int cost() const override { return 10; }
  uint64_t slice_size() const override { return slice_size_; }
  bool reachable(const SegmentDescriptor& peer) const override;
  StatusOr<std::shared_ptr<Channel>> connect(const SegmentDescriptor& peer) override;

 private:
  CopyPool* pool_;
  std::string host_id_;
  uint64_t slice_size_;
};

}  // namespace kvs::shm
