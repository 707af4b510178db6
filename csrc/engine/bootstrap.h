// The handshake endpoint that names an engine ("host:port"): a peer connects, says hello and gets the
// encoded engine descriptor back. Transports publish how to reach them inside the descriptor, so this
// is the only address a peer needs to know.
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "core/descriptor.h"

namespace kvs {

class BootstrapServer {
 public:
  using DescriptorFn = std::function<std::vector<char>()>;
  BootstrapServer(DescriptorFn descriptor, int timeout_ms);
  ~BootstrapServer() { stop(); }
  BootstrapServer(const BootstrapServer&) = delete;
  BootstrapServer& operator=(const BootstrapServer&) = delete;

  Status start(const std::string& host, uint16_t port);
  void stop();
  uint16_t port() const { return port_; }

 private:
  struct Conn {
    int fd;
    std::thread thread;
    std::atomic<bool> finished{false};
  };
  void accept_loop();
  void serve(int fd);
  void reap_finished();

  DescriptorFn descriptor_;
  int timeout_ms_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::list<Conn> conns_;
};

// Connects to an engine's handshake endpoint and returns its descriptor.
StatusOr<EngineDescriptor> fetch_descriptor(const std::string& name, int timeout_ms);

}  // namespace kvs
