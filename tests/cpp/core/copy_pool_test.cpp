// The copy pool (core/copy_pool.h): a single task posted under CallerRuns wakes no worker and is run by the
// thread that posted it, as a one-request transfer's wait does; without it, or with several tasks, the
// workers take them. Real threads, for TSan (tests/run --sanitize).
#include "core/copy_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace kvs {
namespace {

using std::chrono::milliseconds;

// A new pool's workers, once they sleep on their queue: a worker that has not reached its wait yet (or just
// ended a task) takes what is queued without being woken.
void let_workers_sleep() {
  std::this_thread::sleep_for(milliseconds(300));
}

// Waits up to `limit` for `done` to reach `want`.
bool reaches(const std::atomic<int>& done, int want, milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (done.load() < want) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

TEST(CopyPool, ASingleTaskPostedUnderCallerRunsWakesNoWorker) {
  CopyPool pool(2);
  let_workers_sleep();
  std::atomic<int> done{0};
  std::thread::id ran_on;
  {
    CopyPool::CallerRuns caller;
    std::vector<std::function<void()>> one;
    one.emplace_back([&] {
      ran_on = std::this_thread::get_id();
      done.fetch_add(1);
    });
    pool.post(std::move(one));
  }
  // No worker was woken: the task waits for its caller (a spurious wake-up could take it, never seen).
  EXPECT_FALSE(reaches(done, 1, milliseconds(200)));
  EXPECT_TRUE(pool.run_one());
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(CopyPool, WithoutCallerRunsAWorkerTakesASingleTask) {
  CopyPool pool(1);
  std::atomic<int> done{0};
  std::thread::id ran_on;
  std::vector<std::function<void()>> one;
  one.emplace_back([&] {
    ran_on = std::this_thread::get_id();
    done.fetch_add(1);
  });
  pool.post(std::move(one));
  ASSERT_TRUE(reaches(done, 1, milliseconds(10000)));
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(CopyPool, SeveralTasksUnderCallerRunsStillWakeTheWorkers) {
  CopyPool pool(2);
  std::atomic<int> done{0};
  {
    CopyPool::CallerRuns caller;
    std::vector<std::function<void()>> tasks;
    for (int i = 0; i < 4; ++i) tasks.emplace_back([&] { done.fetch_add(1); });
    pool.post(std::move(tasks));
  }
  EXPECT_TRUE(reaches(done, 4, milliseconds(10000)));
}

TEST(CopyPool, CallerRunsEndsWithItsScopeAndNests) {
  CopyPool pool(1);
  let_workers_sleep();
  std::atomic<int> done{0};
  {
    CopyPool::CallerRuns outer;
    {
      CopyPool::CallerRuns inner;
    }
    std::vector<std::function<void()>> one;
    one.emplace_back([&] { done.fetch_add(1); });
    pool.post(std::move(one));  // (still under the outer one: no worker woken)
  }
  EXPECT_FALSE(reaches(done, 1, milliseconds(100)));
  std::vector<std::function<void()>> another;
  another.emplace_back([&] { done.fetch_add(1); });
  pool.post(std::move(another));  // (outside both: a worker wakes, and takes both tasks)
  EXPECT_TRUE(reaches(done, 2, milliseconds(10000)));
}

}  // namespace
}  // namespace kvs
