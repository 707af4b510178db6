// Memory kinds a region can be registered with. A kind travels in the engine descriptor; transports
// declare which kinds they can touch on each side, and refuse the rest at submit.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace kvs {

enum class MemoryKind : uint8_t {
  kHost = 0,        // pageable host memory
  kHostPinned = 1,  // page-locked host memory (DMA-able)
  kGpu = 2,         // device memory of GPU `device`
  kFile = 3,        // a file tier's space, reached through a copier
};
constexpr int kMemoryKinds = 4;

// Bit per kind, for capability masks.
using KindMask = uint32_t;
constexpr KindMask kind_bit(MemoryKind kind) {
  return 1u << static_cast<uint32_t>(kind);
}
constexpr KindMask kAllHostKinds = kind_bit(MemoryKind::kHost) | kind_bit(MemoryKind::kHostPinned);

struct MemoryLocation {
  MemoryKind kind = MemoryKind::kHost;
  int32_t device = 0;  // GPU ordinal for kGpu; 0 otherwise

  bool operator==(const MemoryLocation& o) const { return kind == o.kind && device == o.device; }
};

// The NUMA node holding the page at addr (faulted in if it was not yet), -1 when the kernel cannot say.
int numa_node_of(const void* addr);

// "host", "host-pinned", "gpu:N", "file".
StatusOr<MemoryLocation> parse_location(const std::string& text);
std::string location_name(const MemoryLocation& location);
const char* kind_name(MemoryKind kind);

}  // namespace kvs
