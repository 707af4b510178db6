// Page-locking host memory for a pinned region: registered with the CUDA driver where one is present
// at run time (DMA-able by every GPU), else mlock()ed after the pages were faulted in.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace kvs {

enum class PinMethod { kNone = 0, kCuda = 1, kMlock = 2 };
const char* pin_method_name(PinMethod method);

// Pins [addr, addr + length). A refused mlock is NoMemory naming RLIMIT_MEMLOCK and how to raise it.
StatusOr<PinMethod> pin_host_memory(void* addr, size_t length);
void unpin_host_memory(void* addr, size_t length, PinMethod method);

}  // namespace kvs
