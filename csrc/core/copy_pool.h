// Worker threads for memory-to-memory copies (local and shm transports). A thread waiting on a batch
// can help, so a small synchronous transfer does not pay for a wake-up.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvs {

class CopyPool {
 public:
  explicit CopyPool(int threads);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  void post(std::vector<std::function<void()>>&& tasks);
  // Runs one queued task on the calling thread; false if none was queued.
  bool run_one();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace kvs
