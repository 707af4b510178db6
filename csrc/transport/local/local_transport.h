// Same-process transport: a memcpy against the target engine's registry (which still checks region,
// key and bounds).
#pragma once

#include <memory>

#include "engine/copy_pool.h"
#include "engine/registry.h"
#include "transport/transport.h"

namespace kvs {

// Registries of the engines alive in this process, by engine id.
void local_directory_add(uint64_t engine_id, std::weak_ptr<MemoryRegistry> registry);
void local_directory_remove(uint64_t engine_id);

class LocalTransport : public Transport {
 public:
  explicit LocalTransport(CopyPool* pool, uint64_t slice_size) : pool_(pool), slice_size_(slice_size) {}
  const char* name() const override { return "local"; }
  uint32_t bit() const override { return kTransportLocal; }
  int cost() const override { return 0; }
  uint64_t slice_size() const override { return slice_size_; }
  bool reachable(const SegmentDescriptor& peer) const override;
  StatusOr<std::shared_ptr<Channel>> connect(const SegmentDescriptor& peer) override;

 private:
  CopyPool* pool_;
  uint64_t slice_size_;
};

}  // namespace kvs
