// Hands the memfds of exported shareable regions to same-host peers that present the region keys,
// over an abstract unix socket (scoped to this network namespace, like the host id).
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "common/status.h"
#include "core/registry.h"

namespace kvs::shm {

// Request: u32 count, then count x (u64 region id, u64 key). Reply: first the pin table as region 0,
// then per region one datagram (u64 region id, u8 granted) with the memfd attached when granted.
constexpr uint32_t kMaxRegionsPerRequest = 4096;

class ShmServer {
 public:
  explicit ShmServer(MemoryRegistry* registry) : registry_(registry) {}
  ~ShmServer() { stop(); }
  ShmServer(const ShmServer&) = delete;
  ShmServer& operator=(const ShmServer&) = delete;

  Status start(const std::string& name);
  void stop();

 private:
  void loop();
  void serve(int fd);

  MemoryRegistry* registry_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// Socket address for an abstract name (leading NUL added here).
int abstract_address(const std::string& name, void* addr, unsigned* len);

}  // namespace kvs::shm
