// The driver entry points kvstore uses, resolved once from libcuda.so.1 (internal to csrc/cuda).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvs::cuda {

// Driver API types (cuda.h): plain integers and opaque handles.
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUstream = void*;
using CUdeviceptr = uint64_t;
// CUipcMemHandle: 64 opaque bytes, passed by value.
struct CUipcMemHandle {
  char reserved[64];
};

struct DriverTable {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*device_get_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*mem_host_register)(void*, size_t, unsigned) = nullptr;
  CUresult (*mem_host_unregister)(void*) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
  CUresult (*pointer_get_attribute)(void*, int, CUdeviceptr) = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned) = nullptr;
  CUresult (*stream_synchronize)(CUstream) = nullptr;
  // Unified addressing: any pair of host, device and IPC-opened memory.
  CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
  // CUDA IPC (optional: absent on platforms without it, e.g. WSL; the cuda_ipc transport then stays off).
  CUresult (*ipc_get_mem_handle)(CUipcMemHandle*, CUdeviceptr) = nullptr;
  CUresult (*ipc_open_mem_handle)(CUdeviceptr*, CUipcMemHandle, unsigned) = nullptr;
  CUresult (*ipc_close_mem_handle)(CUdeviceptr) = nullptr;
  int devices = 0;
  Status status = Status(Code::kNotSupported, "CUDA driver not loaded");
};

// The loaded driver (status says why not when it is unusable).
const DriverTable& driver();

// A driver error as a Status naming the call.
Status failed(CUresult result, const std::string& what);

// Makes device `device`'s primary context current on this thread (retained once per device).
Status use_device(int device);

}  // namespace kvs::cuda
