#include "core/copy_pool.h"

#include <sched.h>

#include <algorithm>

namespace kvs {

namespace {
thread_local bool t_caller_runs = false;  // a CallerRuns is held on this thread
}  // namespace

CopyPool::CallerRuns::CallerRuns() : before_(t_caller_runs) {
  t_caller_runs = true;
}

CopyPool::CallerRuns::~CallerRuns() {
  t_caller_runs = before_;
}

int CopyPool::workers_for(int wanted) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const int cores = sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed) : 0;
  const int spare = cores > 1 ? cores - 1 : 1;
  return std::max(1, std::min(wanted, spare));
}

CopyPool::CopyPool(int threads) {
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { loop(); });
}

CopyPool::~CopyPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  // Tasks left after the workers stop still run: each one reports its slice.
  while (run_one()) {
  }
}

void CopyPool::post(std::vector<std::function<void()>>&& tasks) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : tasks) tasks_.push_back(std::move(t));
  }
  if (tasks.size() == 1) {
    if (!t_caller_runs) cv_.notify_one();
  } else {
    cv_.notify_all();
  }
}

bool CopyPool::run_one() {
  std::function<void()> task;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (tasks_.empty()) return false;
    task = std::move(tasks_.front());
    tasks_.pop_front();
  }
  task();
  return true;
}

void CopyPool::loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace kvs
