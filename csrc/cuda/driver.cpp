#include "cuda/driver.h"

#include <dlfcn.h>

#include "cuda/driver_table.h"

namespace kvs::cuda {
namespace {

constexpr unsigned kHostRegisterPortable = 0x01;

template <typename F>
bool find(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  return out != nullptr;
}

bool resolve(void* handle, DriverTable& d) {
  return find(handle, "cuInit", d.init) && find(handle, "cuDeviceGetCount", d.device_get_count) &&
         find(handle, "cuDeviceGet", d.device_get) &&
         find(handle, "cuDevicePrimaryCtxRetain", d.primary_ctx_retain) &&
         find(handle, "cuCtxSetCurrent", d.ctx_set_current) &&
         find(handle, "cuMemHostRegister_v2", d.mem_host_register) &&
         find(handle, "cuMemHostUnregister", d.mem_host_unregister) &&
         find(handle, "cuGetErrorString", d.get_error_string) &&
         find(handle, "cuPointerGetAttribute", d.pointer_get_attribute) &&
         find(handle, "cuMemAlloc_v2", d.mem_alloc) && find(handle, "cuMemFree_v2", d.mem_free) &&
         find(handle, "cuStreamCreate", d.stream_create) &&
         find(handle, "cuStreamSynchronize", d.stream_synchronize) &&
         find(handle, "cuMemcpyAsync", d.memcpy_async);
}

// Optional entry points: a driver without them still serves every other call.
void resolve_optional(void* handle, DriverTable& d) {
  if (!find(handle, "cuIpcGetMemHandle", d.ipc_get_mem_handle) ||
      !find(handle, "cuIpcOpenMemHandle_v2", d.ipc_open_mem_handle) ||
      !find(handle, "cuIpcCloseMemHandle", d.ipc_close_mem_handle)) {
    d.ipc_get_mem_handle = nullptr;
    d.ipc_open_mem_handle = nullptr;
    d.ipc_close_mem_handle = nullptr;
  }
}

DriverTable load() {
  DriverTable d;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    d.status = Status(Code::kNotSupported, "no CUDA driver on this machine (libcuda.so.1 not found)");
    return d;
  }
  if (!resolve(handle, d)) {
    d.status = Status(Code::kNotSupported, "libcuda.so.1 lacks the driver API kvstore uses (too old?)");
    return d;
  }
  resolve_optional(handle, d);
  d.status = Status::OK();  // failed() below may use get_error_string
  if (CUresult r = d.init(0); r != 0) {
    d.status = Status(Code::kNotSupported, "cuInit failed: CUDA error " + std::to_string(r));
    return d;
  }
  if (CUresult r = d.device_get_count(&d.devices); r != 0 || d.devices == 0) {
    d.status = Status(Code::kNotSupported, r != 0 ? "cuDeviceGetCount failed: CUDA error " + std::to_string(r)
                                                  : std::string("no GPU visible"));
    return d;
  }
  return d;
}

// Primary contexts, retained on first use of each device.
struct Contexts {
  std::mutex mu;
  std::vector<CUcontext> by_device;
};

Contexts& contexts() {
  static Contexts c;
  return c;
}

}  // namespace

const DriverTable& driver() {
  static const DriverTable d = load();  // thread-safe, once
  return d;
}

Status failed(CUresult result, const std::string& what) {
  const char* text = nullptr;
  const DriverTable& d = driver();
  if (d.get_error_string == nullptr || d.get_error_string(result, &text) != 0 || text == nullptr) {
    text = "unknown error";
  }
  return Status(Code::kIoError, what + ": CUDA error " + std::to_string(result) + " (" + text + ")");
}

Status use_device(int device) {
  const DriverTable& d = driver();
  if (!d.status.ok()) return d.status;
  if (device < 0 || device >= d.devices) {
    return Status(Code::kInvalidArgument,
                  "no GPU " + std::to_string(device) + " (" + std::to_string(d.devices) + " visible)");
  }
  CUcontext context = nullptr;
  {
    Contexts& c = contexts();
    std::lock_guard<std::mutex> lock(c.mu);
    c.by_device.resize(static_cast<size_t>(d.devices), nullptr);
    if (c.by_device[device] == nullptr) {
      CUdevice handle = 0;
      if (CUresult r = d.device_get(&handle, device); r != 0) return failed(r, "cuDeviceGet");
      if (CUresult r = d.primary_ctx_retain(&c.by_device[device], handle); r != 0) {
        return failed(r, "cuDevicePrimaryCtxRetain");
      }
    }
    context = c.by_device[device];
  }
  if (CUresult r = d.ctx_set_current(context); r != 0) return failed(r, "cuCtxSetCurrent");
  return Status::OK();
}

Status available() {
  return driver().status;
}

int device_count() {
  return driver().status.ok() ? driver().devices : 0;
}

Status host_register(void* addr, size_t length) {
  if (Status st = use_device(0); !st.ok()) return st;
  if (CUresult r = driver().mem_host_register(addr, length, kHostRegisterPortable); r != 0) {
    return failed(r, "cuMemHostRegister");
  }
  return Status::OK();
}

Status host_unregister(void* addr) {
  if (Status st = use_device(0); !st.ok()) return st;
  if (CUresult r = driver().mem_host_unregister(addr); r != 0) return failed(r, "cuMemHostUnregister");
  return Status::OK();
}

}  // namespace kvs::cuda
