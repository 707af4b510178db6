#include "transport/ucx/ucx_worker.h"

#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

namespace kvs::ucx {

StatusOr<std::unique_ptr<UcxWorker>> UcxWorker::start(const Ucp& api, int busy_poll_us,
                                                      const std::string& net_devices) {
  if (!api.status.ok()) return api.status;
  std::unique_ptr<UcxWorker> w(new UcxWorker(api, busy_poll_us));
  ucp_config* config = nullptr;
  ucs_status_t s = api.config_read(nullptr, nullptr, &config);  // (UCX_* settings from the environment)
  if (s != kOk) return Status(Code::kNotSupported, "ucp_config_read: " + api.describe(s));
  if (!net_devices.empty() && std::getenv("UCX_NET_DEVICES") == nullptr) {
    s = api.config_modify(config, "NET_DEVICES", net_devices.c_str());
    if (s != kOk) {
      api.config_release(config);
      return Status(Code::kInvalidArgument, "UCX_NET_DEVICES=" + net_devices + ": " + api.describe(s));
    }
  }
  ucp_params_t params{kParamFieldFeatures, kFeatureRma | kFeatureWakeup};
  s = api.init_version(kApiMajor, kMinMinor, &params, config, &w->context_);
  api.config_release(config);
  if (s != kOk) return Status(Code::kNotSupported, "ucp_init: " + api.describe(s));
  ucp_context_attr_t attr{kAttrFieldMemoryTypes, 0, 0, 0};
  w->cuda_ = api.context_query(w->context_, &attr) == kOk && (attr.memory_types >> kMemoryTypeCuda & 1) != 0;
  ucp_worker_params_t worker_params{kWorkerParamFieldThreadMode, kThreadModeSingle};
  s = api.worker_create(w->context_, &worker_params, &w->worker_);
  if (s != kOk) return Status(Code::kNotSupported, "ucp_worker_create: " + api.describe(s));
  ucp_address* address = nullptr;
  size_t length = 0;
  s = api.worker_get_address(w->worker_, &address, &length);
  if (s != kOk) return Status(Code::kNotSupported, "ucp_worker_get_address: " + api.describe(s));
  w->address_.assign(reinterpret_cast<const char*>(address), reinterpret_cast<const char*>(address) + length);
  api.worker_release_address(w->worker_, address);
  s = api.worker_get_efd(w->worker_, &w->worker_fd_);
  if (s != kOk) return Status(Code::kNotSupported, "ucp_worker_get_efd: " + api.describe(s));
  w->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (w->wake_fd_ < 0) return errno_status(Code::kIoError, "eventfd");
  w->thread_ = std::thread([raw = w.get()] { raw->loop(); });
  return w;
}

UcxWorker::~UcxWorker() {
  if (thread_.joinable()) {
    post([this] { stopping_.store(true); });
    thread_.join();
  }
  // The loop ran every task left and each endpoint's close before it ended.
  if (worker_ != nullptr) api_.worker_destroy(worker_);
  if (context_ != nullptr) api_.cleanup(context_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void UcxWorker::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void UcxWorker::on_tick(std::function<void()> tick) {
  call([&] { ticks_.push_back(std::move(tick)); });
}

bool UcxWorker::run_tasks() {
  std::deque<std::function<void()>> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(tasks_);
  }
  for (auto& t : tasks) t();
  return !tasks.empty();
}

void UcxWorker::loop() {
  using std::chrono::microseconds;
  auto idle_since = std::chrono::steady_clock::now();
  for (;;) {
    bool busy = run_tasks();
    while (api_.worker_progress(worker_) != 0) busy = true;
    for (auto& tick : ticks_) tick();
    if (stopping_.load()) {
      // Drain: progress until every close and completion posted so far has run.
      for (int i = 0; i < 1000 && (run_tasks() || api_.worker_progress(worker_) != 0); ++i) {
      }
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (busy) {
      idle_since = now;
      continue;
    }
    if (now - idle_since < microseconds(busy_poll_us_)) continue;  // spin briefly: replies come soon
    if (api_.worker_arm(worker_) == kErrBusy) continue;            // events arrived meanwhile
    pollfd fds[2] = {{worker_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    // (the timeout bounds how late a tick runs: endpoints time their operations out there)
    if (poll(fds, 2, 50) > 0 && (fds[1].revents & POLLIN)) {
      uint64_t drained;
      (void)!read(wake_fd_, &drained, sizeof(drained));
    }
    idle_since = std::chrono::steady_clock::now();
  }
}

}  // namespace kvs::ucx
