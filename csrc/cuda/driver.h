// The CUDA driver API, loaded at run time (dlopen("libcuda.so.1")): nothing CUDA is needed to build,
// install or import kvstore. Without a driver every call is one clear NotSupported error.
#pragma once

#include <cstddef>
#include <cstdint>
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

// The device allocation holding `ptr`: its base, length and GPU. Fails (InvalidArgument) for memory that is
// not device memory of this process, so a bad pointer is refused before any copy touches it.
struct DeviceRange {
  uint64_t base = 0;
  uint64_t length = 0;
  int device = -1;
};
StatusOr<DeviceRange> device_range(uint64_t ptr);

// Device memory for benches and tests (cuMemAlloc on `device`).
StatusOr<uint64_t> device_alloc(int device, uint64_t length);
Status device_free(int device, uint64_t ptr);

// Copies between any two addresses the driver knows by unified addressing (device memory of this process,
// IPC-opened memory of another, host memory): all queued on one of GPU `device`'s streams (async;
// page-locked host memory makes them DMA), then one wait. The caller has checked every range; host memory
// need not be pinned (the driver stages pageable memory itself, slower).
struct Copy {
  uint64_t dst = 0;
  uint64_t src = 0;
  uint64_t length = 0;
};
Status copy(int device, const Copy* copies, size_t count);

// CUDA IPC: a device allocation of one process opened by another process of the same host.
constexpr size_t kIpcHandleBytes = 64;
// OK when the driver can share device memory between processes; else why not.
Status ipc_available();
struct IpcExport {
  char handle[kIpcHandleBytes] = {};
  uint64_t offset = 0;      // of the exported pointer inside the allocation the handle opens
  uint64_t allocation = 0;  // that allocation's length
};
// The handle of the allocation holding `ptr` (cuMemAlloc'd memory only; pooled or VMM memory is refused).
StatusOr<IpcExport> ipc_export(uint64_t ptr);
// Opens a peer's allocation in `device`'s context (peer access enabled lazily); returns its base here.
StatusOr<uint64_t> ipc_open(int device, const char* handle);
void ipc_close(int device, uint64_t base);

// Waits for a stream another library handed over with its memory (the CUDA array interface's "stream":
// 1 and 2 are the legacy and per-thread default streams), so its pending writes land before a copy.
Status synchronize(int device, uint64_t stream);

}  // namespace kvs::cuda
