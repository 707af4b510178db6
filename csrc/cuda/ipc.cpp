// CUDA IPC: device allocations shared with other processes of this host.
#include <cstring>

#include "cuda/driver.h"
#include "cuda/driver_table.h"

namespace kvs::cuda {
namespace {

constexpr unsigned kIpcLazyEnablePeerAccess = 0x1;

}  // namespace

Status ipc_available() {
  const DriverTable& d = driver();
  if (!d.status.ok()) return d.status;
  if (d.ipc_open_mem_handle == nullptr) {
    return Status(Code::kNotSupported, "this CUDA driver cannot share device memory between processes");
  }
  return Status::OK();
}

StatusOr<IpcExport> ipc_export(uint64_t ptr) {
  if (Status st = ipc_available(); !st.ok()) return st;
  auto range = device_range(ptr);
  if (!range.ok()) return range.status();
  if (Status st = use_device(range.value().device); !st.ok()) return st;
  CUipcMemHandle handle{};
  if (CUresult r = driver().ipc_get_mem_handle(&handle, range.value().base); r != 0) {
    return failed(r, "cuIpcGetMemHandle (memory from cuMemAlloc only, not pooled or VMM allocations)");
  }
  IpcExport out;
  std::memcpy(out.handle, handle.reserved, kIpcHandleBytes);
  out.offset = ptr - range.value().base;
  out.allocation = range.value().length;
  return out;
}

StatusOr<uint64_t> ipc_open(int device, const char* handle) {
  if (Status st = ipc_available(); !st.ok()) return st;
  if (Status st = use_device(device); !st.ok()) return st;
  CUipcMemHandle h{};
  std::memcpy(h.reserved, handle, kIpcHandleBytes);
  CUdeviceptr base = 0;
  if (CUresult r = driver().ipc_open_mem_handle(&base, h, kIpcLazyEnablePeerAccess); r != 0) {
    return failed(r, "cuIpcOpenMemHandle");
  }
  return base;
}

void ipc_close(int device, uint64_t base) {
  if (use_device(device).ok()) driver().ipc_close_mem_handle(base);
}

}  // namespace kvs::cuda
