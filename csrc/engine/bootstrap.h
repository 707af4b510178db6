// The handshake endpoint that names an engine ("host:port"): a peer connects, says hello and gets the
// encoded engine descriptor back. Transports publish how to reach them inside the descriptor, so this
// is the only address a peer needs to know. Both sides first prove they know the cluster secret
// (challenge-response over a nonce from each side, HMAC-SHA256; the secret never crosses the wire): the
// descriptor, with its regions' access keys, goes only to a peer of the same cluster.
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
  // The encoded descriptor for a peer of this session.
  using DescriptorFn = std::function<std::vector<char>(const Session&)>;
  // `secret`: the cluster secret ("" : none, the engine serves loopback only unless insecure).
  BootstrapServer(DescriptorFn descriptor, int timeout_ms, std::string secret);
  BootstrapServer(const BootstrapServer&) = delete;
  BootstrapServer& operator=(const BootstrapServer&) = delete;

  Status start(const std::string& host, uint16_t port) { return acceptor_.start(host, port); }
  void stop() { acceptor_.stop(); }
  uint16_t port() const { return acceptor_.port(); }

 private:
  void serve(int fd, const std::atomic<bool>& stopping, ConnState& state);

  DescriptorFn descriptor_;
  int timeout_ms_;
  std::string secret_;
  Acceptor acceptor_;  // last: its threads call serve(), so it stops first
};

// Connects to an engine's handshake endpoint, proves the secret, checks the engine's proof and returns
// its descriptor with the session agreed on (PermissionDenied when the secrets differ).
StatusOr<EngineDescriptor> fetch_descriptor(const std::string& name, int timeout_ms,
                                            const std::string& secret);

}  // namespace kvs
