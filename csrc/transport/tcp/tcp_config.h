#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/options.h"

namespace kvs::tcp {

struct TcpConfig {
  int connections = 2;                 // data connections per peer
  uint64_t slice_size = 1ull << 20;    // requests are cut into slices of at most this many bytes
  uint64_t max_payload = 64ull << 20;  // largest frame payload accepted from a peer
  int io_timeout_ms = 5000;            // no progress for this long on a busy connection: it is dead
  int connect_timeout_ms = 3000;
  int poll_ms = 100;                      // socket timeout granularity
  int socket_buffer = 4 << 20;            // SO_SNDBUF/SO_RCVBUF bytes; 0: kernel autotuning
  int busy_poll_us = 0;                   // spin this long for a due reply/request before sleeping (0: never)
  size_t max_connections = 1024;          // the server's connections at once
  size_t max_connections_per_peer = 128;  // ... from one address
  int prove_ms = 10000;                   // a connection without a well-formed frame by then is cut
  int idle_ms = 120000;                   // an authenticated one idle this long is cut (0: never)
  int evict_idle_ms = 1000;               // ... idle this long, it gives its place to a new one when full
  size_t max_waits_per_peer = 16;         // requests from one address waiting for an announcement at once
  int max_stalls() const { return io_timeout_ms / poll_ms + 1; }

  static std::vector<OptionSpec> specs();
  static TcpConfig from(const Options& options);
};

}  // namespace kvs::tcp
