// A listening TCP socket that hands each accepted connection to a thread of its own, for the servers that
// speak to peers: the engine's handshake endpoint and the tcp transport. Bounded so that no peer can lock
// the others out: connections in all and per peer address, and a connection that has not proved itself
// (the handler says when it has: a handshake passed, a well-formed first frame) within `prove_ms` is cut,
// as is the oldest such one when a new peer finds the server full.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>

#include "common/limited_log.h"
#include "common/status.h"

namespace kvs {

struct AcceptorConfig {
  int poll_ms = 100;      // socket timeout granularity (and how fast stop() is noticed)
  int socket_buffer = 0;  // SO_SNDBUF/SO_RCVBUF of accepted sockets; 0: kernel autotuning
  size_t max_connections =
      1024;                   // at this, the oldest unproved one gives its place, else a new one is closed
  size_t max_per_peer = 256;  // the same, per peer address
  int prove_ms = 10000;       // time a connection has to prove itself; 0: no limit
};

class Acceptor {
 public:
  // Serves one connection until it returns; `stopping` turns true when the acceptor stops (the socket
  // is also shut down then, so blocking reads end). The handler sets `proved` once the peer has shown it
  // speaks the protocol (until then it may be cut). The acceptor closes the socket afterwards.
  using Handler = std::function<void(int fd, const std::atomic<bool>& stopping, std::atomic<bool>& proved)>;

  Acceptor(Handler handler, AcceptorConfig config) : handler_(std::move(handler)), config_(config) {}
  ~Acceptor() { stop(); }
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  Status start(const std::string& host, uint16_t port);
  void stop();
  uint16_t port() const { return port_; }
  uint64_t refused() const { return refused_.load(); }  // connections closed or cut by the bounds
  // Logs that the handler refused a peer ("refused a handshake from host:port: why"), thread-safe: a flood
  // of bad peers logs a line a second, with how many went unlogged, not a line each.
  void log_refusal(const std::string& what, int fd, const std::string& why);

 private:
  struct Conn {
    int fd;
    std::string peer;  // the peer's address, without the port
    std::chrono::steady_clock::time_point accepted;
    std::thread thread;
    std::atomic<bool> proved{false};
    std::atomic<bool> finished{false};
    bool cut = false;  // shut down by the bounds (its thread is ending)
  };
  void accept_loop();
  void admit(int fd);
  void reap_finished();
  void cut_unproved_past_deadline();
  bool cut_oldest_unproved(const std::string* peer);  // nullptr: from any peer
  void cut(Conn& conn, const char* why);
  void refuse(const std::string& peer, const char* why);

  Handler handler_;
  AcceptorConfig config_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> refused_{0};
  LimitedLog log_;
  std::thread thread_;
  std::mutex mu_;
  std::list<Conn> conns_;
};

}  // namespace kvs
