// The CUDA driver API, loaded at run time (dlopen("libcuda.so.1")): nothing CUDA is needed to build,
// install or import kvstore. Without a driver every call is one clear NotSupported error.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace kvs::cuda {

// OK when the driver loaded and initialised and at least one GPU is visible; else why not.
Status available();
int device_count();

// Page-locks host memory for DMA by every GPU (cuMemHostRegister, portable), with the primary context of
// device 0 made current on this thread first.
Status host_register(void* addr, size_t length);
Status host_unregister(void* addr);

}  // namespace kvs::cuda
