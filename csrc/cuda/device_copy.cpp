// Batched copies on per-device streams.
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

}  // namespace

Status copy(int device, const Copy* copies, size_t count) {
  if (Status st = use_device(device); !st.ok()) return st;
  auto stream = streams().take(device);
  if (!stream.ok()) return stream.status();
  const DriverTable& d = driver();
  Status result = Status::OK();
  for (size_t i = 0; i < count && result.ok(); ++i) {
    const Copy& c = copies[i];
    if (c.length == 0) continue;
    if (CUresult r = d.memcpy_async(c.dst, c.src, c.length, stream.value()); r != 0) {
      result = failed(r, "cuMemcpyAsync");
    }
  }
  // Wait even after a failed enqueue: the copies already queued must end before their memory is reused.
  if (CUresult r = d.stream_synchronize(stream.value()); r != 0 && result.ok()) {
    result = failed(r, "cuStreamSynchronize");
  }
  streams().give_back(device, stream.value());
  return result;
}

Status synchronize(int device, uint64_t stream) {
  if (Status st = use_device(device); !st.ok()) return st;
  if (CUresult r = driver().stream_synchronize(reinterpret_cast<CUstream>(stream)); r != 0) {
    return failed(r, "cuStreamSynchronize");
  }
  return Status::OK();
}

}  // namespace kvs::cuda
