// One UCP context and worker with the thread that owns them: every UCP call of the ucx transport runs on
// that thread (a single-threaded worker needs no locks inside UCX), handed over as a task. The thread
// progresses the worker (which also serves peers' one-sided operations on this engine's memory, as UCX's
// tcp and shared-memory transports need), runs the tasks, and sleeps on the worker's event fd when idle.
#pragma once

#include <sys/eventfd.h>

#include <atomic>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "transport/ucx/ucp_api.h"

namespace kvs::ucx {

class UcxWorker {
 public:
  // net_devices: UCX_NET_DEVICES for this context ("" : UCX's own choice; the environment's wins).
  static StatusOr<std::unique_ptr<UcxWorker>> start(const Ucp& api, int busy_poll_us,
                                                    const std::string& net_devices);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  const Ucp& api() const { return api_; }
  ucp_context_h context() const { return context_; }
  ucp_worker_h worker() const { return worker_; }
  const std::vector<char>& address() const { return address_; }
  // The loaded UCX moves CUDA device memory (its cuda modules load and see a GPU).
  bool cuda() const { return cuda_; }

  // Runs `task` on the worker's thread, soon. Tasks posted after stop() are dropped (run with stopping()).
  void post(std::function<void()> task);
  // Runs `fn` on the worker's thread and returns its result.
  template <typename F>
  auto call(F fn) -> decltype(fn()) {
    if (std::this_thread::get_id() == thread_.get_id()) return fn();
    auto task = std::make_shared<std::packaged_task<decltype(fn())()>>(std::move(fn));
    auto result = task->get_future();
    post([task] { (*task)(); });
    return result.get();
  }
  // Called on the worker's thread after each round of progress (endpoints check their timeouts there).
  void on_tick(std::function<void()> tick);
  bool stopping() const { return stopping_.load(); }

 private:
  UcxWorker(const Ucp& api, int busy_poll_us) : api_(api), busy_poll_us_(busy_poll_us) {}
  void loop();
  bool run_tasks();

  const Ucp& api_;
  const int busy_poll_us_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int worker_fd_ = -1;
  int wake_fd_ = -1;
  std::vector<char> address_;
  bool cuda_ = false;
  std::vector<std::function<void()>> ticks_;  // (worker thread only)

  std::mutex mu_;
  std::deque<std::function<void()>> tasks_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace kvs::ucx
