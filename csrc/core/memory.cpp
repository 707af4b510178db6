#include "core/memory.h"

#include <sys/syscall.h>
#include <unistd.h>

namespace kvs {

int numa_node_of(const void* addr) {
  constexpr unsigned long kNodeOfAddress = 1 | 2;  // MPOL_F_NODE | MPOL_F_ADDR (no libnuma needed)
  int node = -1;
  if (syscall(SYS_get_mempolicy, &node, nullptr, 0, const_cast<void*>(addr), kNodeOfAddress) != 0) return -1;
  return node;
}

const char* kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost: return "host";
    case MemoryKind::kHostPinned: return "host-pinned";
    case MemoryKind::kGpu: return "gpu";
    case MemoryKind::kFile: return "file";
  }
  return "unknown";
}

std::string location_name(const MemoryLocation& location) {
  if (location.kind == MemoryKind::kGpu) return "gpu:" + std::to_string(location.device);
  return kind_name(location.kind);
}

StatusOr<MemoryLocation> parse_location(const std::string& text) {
  MemoryLocation loc;
  if (text == "host") return loc;
  if (text == "host-pinned") {
    loc.kind = MemoryKind::kHostPinned;
    return loc;
  }
  if (text == "file") {
    loc.kind = MemoryKind::kFile;
    return loc;
  }
  const std::string digits = text.rfind("gpu:", 0) == 0 ? text.substr(4) : "";
  if (!digits.empty() && digits.size() <= 4 && digits.find_first_not_of("0123456789") == std::string::npos) {
    loc.kind = MemoryKind::kGpu;
    loc.device = std::stoi(digits);
    return loc;
  }
  return Status(Code::kInvalidArgument,
                "bad memory kind '" + text + "' (expected host, host-pinned, gpu:N or file)");
}

}  // namespace kvs
