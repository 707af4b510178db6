// The handshake endpoint that names an engine ("host:port"): a peer connects, says hello and gets the
// encoded engine descriptor back. Transports publish how to reach them inside the descriptor, so this
// is the only address a peer needs to know.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "common/acceptor.h"
#include "common/status.h"
#include "core/descriptor.h"

namespace kvs {

class BootstrapServer {
 public:
  using DescriptorFn = std::function<std::vector<char>()>;
  BootstrapServer(DescriptorFn descriptor, int timeout_ms);
  BootstrapServer(const BootstrapServer&) = delete;
  BootstrapServer& operator=(const BootstrapServer&) = delete;

  Status start(const std::string& host, uint16_t port) { return acceptor_.start(host, port); }
  void stop() { acceptor_.stop(); }
  uint16_t port() const { return acceptor_.port(); }

 private:
  void serve(int fd, const std::atomic<bool>& stopping);

  DescriptorFn descriptor_;
  int timeout_ms_;
  Acceptor acceptor_;  // last: its threads call serve(), so it stops first
};

// Connects to an engine's handshake endpoint and returns its descriptor.
StatusOr<EngineDescriptor> fetch_descriptor(const std::string& name, int timeout_ms);

}  // namespace kvs
