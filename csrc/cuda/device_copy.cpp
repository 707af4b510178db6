// Batched host <-> device copies on per-device streams.
#include <mutex>
#include <vector>

#include "cuda/driver.h"
#include "cuda/driver_table.h"

namespace kvs::cuda {
namespace {

constexpr unsigned kStreamNonBlocking = 0x1;  // no implicit sync with the legacy default stream

// Idle streams per device: a batch takes one (creating it the first time), queues its copies, waits,
// gives it back. Concurrent batches use different streams, so one never waits for another's copies.
class StreamPool {
 public:
  StatusOr<CUstream> take(int device) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (idle_.size() <= static_cast<size_t>(device)) idle_.resize(static_cast<size_t>(device) + 1);
      auto& free = idle_[device];
      if (!free.empty()) {
        CUstream stream = free.back();
        free.pop_back();
        return stream;
      }
    }
    CUstream stream = nullptr;
    if (CUresult r = driver().stream_create(&stream, kStreamNonBlocking); r != 0) {
      return failed(r, "cuStreamCreate");
    }
    return stream;
  }
  void give_back(int device, CUstream stream) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_[device].push_back(stream);
  }

 private:
  std::mutex mu_;
  std::vector<std::vector<CUstream>> idle_;
};

StreamPool& streams() {
  static StreamPool pool;
  return pool;
}

// Queues `count` copies (enqueue(i) queues copy i and names the call on failure) on one of the device's
// streams, then waits once.
template <typename Enqueue>
Status on_stream(int device, size_t count, Enqueue enqueue) {
  if (Status st = use_device(device); !st.ok()) return st;
  auto stream = streams().take(device);
  if (!stream.ok()) return stream.status();
  Status result = Status::OK();
  for (size_t i = 0; i < count && result.ok(); ++i) result = enqueue(i, stream.value());
  // Wait even after a failed enqueue: the copies already queued must end before their memory is reused.
  if (CUresult r = driver().stream_synchronize(stream.value()); r != 0 && result.ok()) {
    result = failed(r, "cuStreamSynchronize");
  }
  streams().give_back(device, stream.value());
  return result;
}

}  // namespace

Status copy(int device, Direction direction, const DeviceCopy* copies, size_t count) {
  const DriverTable& d = driver();
  return on_stream(device, count, [&](size_t i, CUstream stream) {
    const DeviceCopy& c = copies[i];
    if (c.length == 0) return Status::OK();
    const bool to_device = direction == Direction::kToDevice;
    CUresult r =
        to_device
            ? d.memcpy_htod_async(c.device_ptr, reinterpret_cast<const void*>(c.host_ptr), c.length, stream)
            : d.memcpy_dtoh_async(reinterpret_cast<void*>(c.host_ptr), c.device_ptr, c.length, stream);
    return r == 0 ? Status::OK() : failed(r, to_device ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync");
  });
}

Status copy_any(int device, const AnyCopy* copies, size_t count) {
  const DriverTable& d = driver();
  return on_stream(device, count, [&](size_t i, CUstream stream) {
    const AnyCopy& c = copies[i];
    if (c.length == 0) return Status::OK();
    CUresult r = d.memcpy_async(c.dst, c.src, c.length, stream);
    return r == 0 ? Status::OK() : failed(r, "cuMemcpyAsync");
  });
}

Status synchronize(int device, uint64_t stream) {
  if (Status st = use_device(device); !st.ok()) return st;
  if (CUresult r = driver().stream_synchronize(reinterpret_cast<CUstream>(stream)); r != 0) {
    return failed(r, "cuStreamSynchronize");
  }
  return Status::OK();
}

}  // namespace kvs::cuda
