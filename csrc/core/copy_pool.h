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
  // How many workers to start for a configured `wanted`: at most one fewer than the cores this process may
  // run on (at least one), since a thread waiting on its batch copies too. On 2 cores, 2 workers plus the
  // waiting thread made a 512 KiB x 32 same-host get 0.69-0.82 of memcpy x2; 1 worker plus it, 0.82-0.99.
  static int workers_for(int wanted);
  int workers() const { return static_cast<int>(workers_.size()); }
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  // While a thread holds one, a single task it posts wakes no worker: the thread runs it itself at once (a
  // one-request transfer waits on its batch, helping). A woken worker raced the caller for it and took it
  // about half the time for a 512 KiB same-host read, which then paid the caller's sleep and wake-up (and
  // on a busy host a worker waiting for a core). Tasks of several slices still wake the workers.
  class CallerRuns {
   public:
    CallerRuns();
    ~CallerRuns();
    CallerRuns(const CallerRuns&) = delete;
    CallerRuns& operator=(const CallerRuns&) = delete;

   private:
    bool before_;
  };

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
