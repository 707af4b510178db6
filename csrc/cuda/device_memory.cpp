// Device allocations: what a pointer belongs to, and plain allocations for benches and tests.
#include "cuda/driver.h"
#include "cuda/driver_table.h"

namespace kvs::cuda {
namespace {

// cuda.h's CUpointer_attribute and CUmemorytype values.
constexpr int kAttributeContext = 1;
constexpr int kAttributeMemoryType = 2;
constexpr int kAttributeDeviceOrdinal = 9;
constexpr int kAttributeRangeStart = 11;
constexpr int kAttributeRangeSize = 12;
constexpr unsigned kMemoryTypeDevice = 2;
constexpr CUresult kErrorInvalidContext = 201;

}  // namespace

StatusOr<DeviceRange> device_range(uint64_t ptr) {
  const DriverTable& d = driver();
  if (!d.status.ok()) return d.status;
  if (ptr == 0) return Status(Code::kInvalidArgument, "null device pointer");
  unsigned memory_type = 0;
  if (d.pointer_get_attribute(&memory_type, kAttributeMemoryType, ptr) != 0 ||
      memory_type != kMemoryTypeDevice) {
    return Status(Code::kInvalidArgument, "address is not device memory allocated in this process");
  }
  DeviceRange range;
  CUdeviceptr start = 0;
  size_t size = 0;
  CUresult r = d.pointer_get_attribute(&range.device, kAttributeDeviceOrdinal, ptr);
  if (r == kErrorInvalidContext) {
    // The ordinal and range queries need a current context (the memory type does not): this thread has
    // none yet. Make the pointer's own context current (a stream-ordered allocation names none: GPU 0's).
    CUcontext owner = nullptr;
    Status st =
        d.pointer_get_attribute(&owner, kAttributeContext, ptr) == 0 && owner != nullptr
            ? (d.ctx_set_current(owner) == 0 ? Status::OK() : Status(Code::kIoError, "cuCtxSetCurrent"))
            : use_device(0);
    if (!st.ok()) return st;
    r = d.pointer_get_attribute(&range.device, kAttributeDeviceOrdinal, ptr);
  }
  if (r != 0) return failed(r, "cuPointerGetAttribute(DEVICE_ORDINAL)");
  if (r = d.pointer_get_attribute(&start, kAttributeRangeStart, ptr); r != 0) {
    return failed(r, "cuPointerGetAttribute(RANGE_START_ADDR)");
  }
  if (r = d.pointer_get_attribute(&size, kAttributeRangeSize, ptr); r != 0) {
    return failed(r, "cuPointerGetAttribute(RANGE_SIZE)");
  }
  range.base = start;
  range.length = size;
  return range;
}

StatusOr<uint64_t> device_alloc(int device, uint64_t length) {
  if (Status st = use_device(device); !st.ok()) return st;
  if (length == 0) return Status(Code::kInvalidArgument, "cannot allocate an empty device buffer");
  CUdeviceptr ptr = 0;
  if (CUresult r = driver().mem_alloc(&ptr, length); r != 0) {
    Status st = failed(r, "cuMemAlloc of " + std::to_string(length) + " bytes");
    return Status(Code::kNoMemory, st.message());
  }
  return ptr;
}

Status device_free(int device, uint64_t ptr) {
  if (Status st = use_device(device); !st.ok()) return st;
  if (CUresult r = driver().mem_free(ptr); r != 0) return failed(r, "cuMemFree");
  return Status::OK();
}

}  // namespace kvs::cuda
