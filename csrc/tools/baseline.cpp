#include "tools/baseline.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/net.h"

namespace kvs::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Mapped {
  explicit Mapped(uint64_t size) : size(size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    data = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
    if (data) std::memset(data, 1, size);
  }
  ~Mapped() {
    if (data) munmap(data, size);
  }
  char* data;
  uint64_t size;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

StatusOr<Throughput> memcpy_baseline(uint64_t block_size, uint64_t working_set, double duration_s,
                                     int threads) {
  if (block_size == 0 || working_set < block_size || threads < 1) {
    return Status(Code::kInvalidArgument, "memcpy baseline needs working_set >= block_size > 0");
  }
  Mapped src(working_set), dst(working_set);
  if (!src.data || !dst.data) return Status(Code::kNoMemory, "cannot map the baseline working set");
  const uint64_t blocks = working_set / block_size;
  std::atomic<uint64_t> total{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      uint64_t moved = 0;
      for (uint64_t i = static_cast<uint64_t>(t); seconds_since(t0) < duration_s;
           i += static_cast<uint64_t>(threads)) {
        const uint64_t at = (i % blocks) * block_size;
        std::memcpy(dst.data + at, src.data + at, block_size);
        moved += block_size;
      }
      total.fetch_add(moved);
    });
  }
  for (auto& w : workers) w.join();
  return Throughput{total.load(), seconds_since(t0)};
}

StatusOr<Throughput> tcp_stream_baseline(const char* host, int connections, uint64_t block_size,
                                         uint64_t working_set, double duration_s, int socket_buffer) {
  const auto conns = static_cast<uint64_t>(connections);
  if (connections < 1 || block_size == 0 || working_set / conns < block_size) {
    return Status(Code::kInvalidArgument, "tcp baseline needs working_set >= connections x block_size > 0");
  }
  const uint64_t span = working_set / conns / block_size * block_size;
  Mapped send_memory(span * conns), recv_memory(span * conns);
  if (!send_memory.data || !recv_memory.data) return Status(Code::kNoMemory, "cannot map the working set");
  uint16_t port = 0;
  auto listener = tcp_listen(host, 0, &port);
  if (!listener.ok()) return listener.status();
  std::vector<int> senders, receivers;
  for (int i = 0; i < connections; ++i) {
    auto fd = tcp_connect(host, port, 3000);
    if (!fd.ok()) return fd.status();
    senders.push_back(fd.value());
    receivers.push_back(accept4(listener.value(), nullptr, nullptr, SOCK_CLOEXEC));
    // The same socket tuning the engine uses (no send/receive timeouts: this loop never stalls).
    tune_data_socket(senders.back(), 0, socket_buffer);
    tune_data_socket(receivers.back(), 0, socket_buffer);
  }
  close(listener.value());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> received{0};
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (int i = 0; i < connections; ++i) {
    threads.emplace_back([&, i] {
      char* base = send_memory.data + span * static_cast<uint64_t>(i);
      for (uint64_t at = 0; !stop.load(); at = (at + block_size) % span) {
        if (!send_all(senders[i], base + at, block_size, 50).ok()) break;
      }
      shutdown(senders[i], SHUT_WR);
    });
    threads.emplace_back([&, i] {
      char* base = recv_memory.data + span * static_cast<uint64_t>(i);
      uint64_t got = 0;
      for (uint64_t at = 0;; at = (at + block_size) % span) {
        const ssize_t n = recv(receivers[i], base + at, block_size, MSG_WAITALL);
        if (n <= 0) break;
        got += static_cast<uint64_t>(n);
      }
      received.fetch_add(got);
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(duration_s));
  stop.store(true);
  for (auto& t : threads) t.join();
  const double elapsed = seconds_since(t0);
  for (int fd : senders) close(fd);
  for (int fd : receivers) close(fd);
  return Throughput{received.load(), elapsed};
}

}  // namespace kvs::bench
