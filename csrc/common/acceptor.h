// A listening TCP socket that hands each accepted connection to a thread of its own (up to a bound),
// for the servers that speak to peers: the engine's handshake endpoint and the tcp transport.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace kvs {

struct AcceptorConfig {
  int poll_ms = 100;              // socket timeout granularity (and how fast stop() is noticed)
  int socket_buffer = 0;          // SO_SNDBUF/SO_RCVBUF of accepted sockets; 0: kernel autotuning
  size_t max_connections = 1024;  // beyond this, new connections are closed at once
};

class Acceptor {
 public:
  // Serves one connection until it returns; `stopping` turns true when the acceptor stops (the socket
  // is also shut down then, so blocking reads end). The acceptor closes the socket afterwards.
  using Handler = std::function<void(int fd, const std::atomic<bool>& stopping)>;

  Acceptor(Handler handler, AcceptorConfig config) : handler_(std::move(handler)), config_(config) {}
  ~Acceptor() { stop(); }
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

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
  void reap_finished();

  Handler handler_;
  AcceptorConfig config_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::mutex mu_;
  std::list<Conn> conns_;
};

}  // namespace kvs
