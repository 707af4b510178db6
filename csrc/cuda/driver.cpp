#include "cuda/driver.h"

#include <dlfcn.h>

#include <mutex>

namespace kvs::cuda {
namespace {

// Driver API types and constants (cuda.h): plain ints and opaque handles.
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
constexpr unsigned kHostRegisterPortable = 0x01;

struct Driver {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*device_get_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*mem_host_register)(void*, size_t, unsigned) = nullptr;
  CUresult (*mem_host_unregister)(void*) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
  int devices = 0;
  CUcontext context = nullptr;  // device 0's primary context
  Status status = Status(Code::kNotSupported, "CUDA driver not loaded");
};

template <typename F>
bool find(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  return out != nullptr;
}

Status failed(const Driver& d, CUresult r, const std::string& what) {
  const char* text = nullptr;
  if (d.get_error_string == nullptr || d.get_error_string(r, &text) != 0 || text == nullptr)
    text = "unknown error";
  return Status(Code::kNotSupported, what + ": CUDA error " + std::to_string(r) + " (" + text + ")");
}

Driver load() {
  Driver d;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    d.status = Status(Code::kNotSupported, "no CUDA driver on this machine (libcuda.so.1 not found)");
    return d;
  }
  if (!find(handle, "cuInit", d.init) || !find(handle, "cuDeviceGetCount", d.device_get_count) ||
      !find(handle, "cuDeviceGet", d.device_get) ||
      !find(handle, "cuDevicePrimaryCtxRetain", d.primary_ctx_retain) ||
      !find(handle, "cuCtxSetCurrent", d.ctx_set_current) ||
      !find(handle, "cuMemHostRegister_v2", d.mem_host_register) ||
      !find(handle, "cuMemHostUnregister", d.mem_host_unregister) ||
      !find(handle, "cuGetErrorString", d.get_error_string)) {
    d.status = Status(Code::kNotSupported, "libcuda.so.1 lacks the driver API kvstore uses (too old?)");
    return d;
  }
  if (CUresult r = d.init(0); r != 0) {
    d.status = failed(d, r, "cuInit");
    return d;
  }
  if (CUresult r = d.device_get_count(&d.devices); r != 0 || d.devices == 0) {
    d.status = r != 0 ? failed(d, r, "cuDeviceGetCount") : Status(Code::kNotSupported, "no GPU visible");
    return d;
  }
  CUdevice device = 0;
  if (CUresult r = d.device_get(&device, 0); r != 0) {
    d.status = failed(d, r, "cuDeviceGet");
    return d;
  }
  if (CUresult r = d.primary_ctx_retain(&d.context, device); r != 0) {
    d.status = failed(d, r, "cuDevicePrimaryCtxRetain");
    return d;
  }
  d.status = Status::OK();
  return d;
}

const Driver& driver() {
  static const Driver d = load();  // thread-safe, once
  return d;
}

}  // namespace

Status available() {
  return driver().status;
}

int device_count() {
  return driver().status.ok() ? driver().devices : 0;
}

Status host_register(void* addr, size_t length) {
  const Driver& d = driver();
  if (!d.status.ok()) return d.status;
  if (CUresult r = d.ctx_set_current(d.context); r != 0) return failed(d, r, "cuCtxSetCurrent");
  if (CUresult r = d.mem_host_register(addr, length, kHostRegisterPortable); r != 0) {
    return failed(d, r, "cuMemHostRegister");
  }
  return Status::OK();
}

Status host_unregister(void* addr) {
  const Driver& d = driver();
  if (!d.status.ok()) return d.status;
  if (CUresult r = d.ctx_set_current(d.context); r != 0) return failed(d, r, "cuCtxSetCurrent");
  if (CUresult r = d.mem_host_unregister(addr); r != 0) return failed(d, r, "cuMemHostUnregister");
  return Status::OK();
}

}  // namespace kvs::cuda
