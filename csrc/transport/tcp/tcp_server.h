// Target side of the TCP transport: serves HELLO (answered with the engine id), READ and WRITE against the
// registry. Every request is checked (region exported, key, bounds) before any byte of memory is touched.
#pragma once

#include <atomic>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "core/registry.h"
#include "transport/tcp/tcp_config.h"
#include "transport/tcp/wire.h"

namespace kvs::tcp {

class TcpServer {
 public:
  TcpServer(MemoryRegistry* registry, uint64_t engine_id, TcpConfig config);
  ~TcpServer() { stop(); }
  TcpServer(const TcpServer&) = delete;
  TcpServer& operator=(const TcpServer&) = delete;

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
  void serve(Conn* conn);
  Status handle(int fd, const FrameHeader& header);
  Status reply_error(int fd, const FrameHeader& request, const Status& status);
  Status drain(int fd, uint64_t length);
  void reap_finished();

  MemoryRegistry* registry_;
  uint64_t engine_id_;
  TcpConfig config_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::list<Conn> conns_;
};

}  // namespace kvs::tcp
