// A listening TCP socket that hands each accepted connection to a thread of its own, for the servers that
// speak to peers: the engine's handshake endpoint and the tcp transport. Bounded so that no peer can lock
// the others out: connections in all and per peer address, and a connection that has not proved itself
// (the handler says when it has: a handshake passed, a well-formed first frame) within `prove_ms` is cut.
// A proved one that stays idle for `idle_ms` is cut too. When a new connection finds the server (or its
// peer's share) full, the connection silent the longest gives its place: one that has said nothing yet
// first; else one that began its handshake more than `protect_ms` ago and has not finished it; else, while
// handshakes in flight hold half the share or more, the oldest of them; else a proved one idle for at
// least `evict_idle_ms`. A hello needs no secret, so protecting every handshake let a flood of hellos
// (130 a second an address) keep everyone out; now it holds at most half: a flood from an address never
// cuts a member's handshake in flight before many newer ones, an authenticated peer that holds many idle
// connections cannot keep the others out, and a connection moving bytes never loses its place.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/limited_log.h"
#include "common/status.h"

namespace kvs {

struct AcceptorConfig {
  int poll_ms = 100;      // socket timeout granularity (and how fast stop() is noticed)
  int socket_buffer = 0;  // SO_SNDBUF/SO_RCVBUF of accepted sockets; 0: kernel autotuning
  size_t max_connections =
      1024;  // at this, the stalest one gives its place (see above), else a new one is closed
  size_t max_per_peer = 256;  // the same, per peer address
  int prove_ms = 10000;       // time a connection has to prove itself; 0: no limit
  int idle_ms = 0;            // a proved connection idle this long is cut; 0: never
  int evict_idle_ms = 1000;   // a proved one idle this long may give its place to a new one; 0: never
  int protect_ms = 1000;      // a handshake begun (ConnState::spoke) keeps its place this long
};

// What a connection's handler tells its acceptor: that the peer proved itself, and whether it is serving
// a request or waiting for one (since when), so the acceptor can cut what sits idle.
class ConnState {
 public:
  ConnState() { idle(); }
  void prove() {
    idle();
    proved_.store(true);
  }
  // It began the protocol's handshake (a well-formed hello): for protect_ms no newcomer takes its place.
  void spoke() { spoke_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count()); }
  void busy() { idle_since_ns_.store(kBusy); }
  void idle() { idle_since_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count()); }
  bool proved() const { return proved_.load(); }
  // The acceptor cut it while it was idle and only stopped its reads: the handler may say goodbye (so
  // the peer knows nothing was lost) before it returns.
  bool closing() const { return closing_.load(); }
  void close_politely() { closing_.store(true); }
  // How long ago it began its handshake (nullopt: not yet).
  std::optional<std::chrono::nanoseconds> spoke_ago(std::chrono::steady_clock::time_point now) const {
    const int64_t at = spoke_ns_.load();
    if (at == 0) return std::nullopt;
    return std::chrono::nanoseconds(now.time_since_epoch().count() - at);
  }
  // How long it has been idle (0 while busy).
  std::chrono::nanoseconds idle_for(std::chrono::steady_clock::time_point now) const {
    const int64_t since = idle_since_ns_.load();
    if (since == kBusy) return std::chrono::nanoseconds(0);
    return std::chrono::nanoseconds(now.time_since_epoch().count() - since);
  }

 private:
  static constexpr int64_t kBusy = -1;
  std::atomic<bool> proved_{false};
  std::atomic<bool> closing_{false};
  std::atomic<int64_t> spoke_ns_{0};
  std::atomic<int64_t> idle_since_ns_{kBusy};
};

class Acceptor {
 public:
  // Serves one connection until it returns; `stopping` turns true when the acceptor stops (the socket
  // is also shut down then, so blocking reads end). The handler calls state.prove() once the peer has
  // shown it speaks the protocol (until then it may be cut), and state.busy() / state.idle() around the
  // requests it serves. The acceptor closes the socket afterwards.
  using Handler = std::function<void(int fd, const std::atomic<bool>& stopping, ConnState& state)>;

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
    ConnState state;
    std::atomic<bool> finished{false};
    bool cut = false;  // shut down by the bounds (its thread is ending)
    bool live() const { return !cut && !finished.load(); }
  };
  void accept_loop();
  void admit(int fd);
  void reap_finished();
  // Cuts the unproved connections past prove_ms and the proved ones idle past idle_ms.
  void cut_overdue();
  // Cuts the connection (of `peer`; nullptr: any) that should give its place to a new one, if any.
  bool make_room(const std::string* peer);
  // Which connections give their place first: 0 silent, 1 a handshake overdue, 2 a handshake in flight
  // when they hold half the share (`crowded`), 3 proved and idle; kKeep: none (a handshake in flight, a
  // request being served).
  static constexpr int kKeep = 4;
  int eviction_rank(const Conn& c, std::chrono::steady_clock::time_point now, bool crowded) const;
  bool in_flight(const Conn& c, std::chrono::steady_clock::time_point now) const;
  // Ends a connection: `politely` (an idle proved one) stops its reads only, so its handler can say
  // goodbye first; else it is shut down both ways.
  void cut(Conn& conn, const std::string& why, bool politely = false);
  void refuse(const std::string& peer, const std::string& why);
  void accept_failed(int error);

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
