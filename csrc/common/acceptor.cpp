#include "common/acceptor.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/net.h"

namespace kvs {
Status Acceptor::start(const std::string& host, uint16_t port) {
  auto fd = tcp_listen(host, port, &port_);
  if (!fd.ok()) return fd.status();
  listen_fd_ = fd.value();
  thread_ = std::thread([this] { accept_loop(); });
  return Status::OK();
}

void Acceptor::stop() {
  if (stopping_.exchange(true)) return;
  if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);  // wakes the poll at once
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : conns_) shutdown(c.fd, SHUT_RDWR);
  for (auto& c : conns_) {
    if (c.thread.joinable()) c.thread.join();
    close(c.fd);
  }
  conns_.clear();
}

void Acceptor::reap_finished() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->finished.load()) {
      it->thread.join();
      close(it->fd);
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void Acceptor::cut(Conn& conn, const std::string& why, bool politely) {
  conn.cut = true;
  if (politely) conn.state.close_politely();
  shutdown(conn.fd, politely ? SHUT_RD : SHUT_RDWR);  // its handler's reads end; its thread finishes
  refuse(conn.peer, why);
}

void Acceptor::refuse(const std::string& peer, const std::string& why) {
  ++refused_;
  log_.log("cut a connection from " + peer + ": " + why);
}

void Acceptor::log_refusal(const std::string& what, int fd, const std::string& why) {
  const HostPort peer = peer_of(fd);
  log_.log("refused " + what + " from " + format_host_port(peer.host, peer.port) + ": " + why);
}

void Acceptor::accept_failed(int error) {
  // Out of descriptors or memory: the listening socket stays readable, so back off instead of spinning,
  // and say so once a second (the pending peers wait in the backlog).
  if (stopping_.load() || error == EINTR || error == EAGAIN || error == ECONNABORTED) return;
  log_.log(std::string("accepting a connection failed (") + std::strerror(error) + "); retrying");
  std::this_thread::sleep_for(std::chrono::milliseconds(config_.poll_ms));
}

void Acceptor::cut_overdue() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& c : conns_) {
    if (!c.live()) continue;
    if (!c.state.proved()) {
      if (config_.prove_ms > 0 && now - c.accepted > std::chrono::milliseconds(config_.prove_ms)) {
        cut(c, "it did not speak the protocol in time");
      }
    } else if (config_.idle_ms > 0 && c.state.idle_for(now) > std::chrono::milliseconds(config_.idle_ms)) {
      cut(c, "idle for longer than " + std::to_string(config_.idle_ms) + " ms", /*politely=*/true);
    }
  }
}

bool Acceptor::in_flight(const Conn& c, std::chrono::steady_clock::time_point now) const {
  if (c.state.proved()) return false;
  const auto spoke = c.state.spoke_ago(now);
  return spoke && *spoke < std::chrono::milliseconds(config_.protect_ms);
}

int Acceptor::eviction_rank(const Conn& c, std::chrono::steady_clock::time_point now, bool crowded) const {
  using std::chrono::milliseconds;
  if (c.state.proved()) {
    const bool idle_long =
        config_.evict_idle_ms > 0 && c.state.idle_for(now) >= milliseconds(config_.evict_idle_ms);
    return idle_long ? 3 : kKeep;  // (one serving a request is never idle)
  }
  if (!c.state.spoke_ago(now)) return 0;
  if (!in_flight(c, now)) return 1;
  return crowded ? 2 : kKeep;
}

bool Acceptor::make_room(const std::string* peer) {
  // The lowest rank gives its place (eviction_rank), the one silent the longest among equals (for a
  // handshake: the one accepted first).
  const auto now = std::chrono::steady_clock::now();
  size_t in_flight_count = 0;
  for (const auto& c : conns_) {
    if (c.live() && (peer == nullptr || c.peer == *peer)) in_flight_count += in_flight(c, now);
  }
  const size_t share = peer != nullptr ? config_.max_per_peer : config_.max_connections;
  const bool crowded = in_flight_count * 2 >= share;
  Conn* victim = nullptr;
  int best = kKeep;
  auto stalest = std::chrono::nanoseconds::min();
  for (auto& c : conns_) {
    if (!c.live() || (peer != nullptr && c.peer != *peer)) continue;
    const int rank = eviction_rank(c, now, crowded);
    const auto idle = c.state.idle_for(now);
    if (rank < best || (rank == best && rank != kKeep && idle > stalest)) {
      best = rank;
      stalest = idle;
      victim = &c;
    }
  }
  if (victim == nullptr) return false;
  static const char* const why[] = {
      "a new connection needed its place and it had not spoken the protocol yet",
      "a new connection needed its place and it had not finished its handshake in time",
      "a new connection needed its place and handshakes in flight held half the share, it the oldest",
      "a new connection needed its place and it was the one idle the longest"};
  cut(*victim, why[best], /*politely=*/best == 3);
  return true;
}

void Acceptor::admit(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  reap_finished();
  cut_overdue();
  const std::string peer = peer_of(fd).host;
  size_t live = 0, from_peer = 0;
  for (const auto& c : conns_) {
    if (!c.live()) continue;
    ++live;
    from_peer += c.peer == peer;
  }
  // Full: the stalest connection gives its place (make_room), so a flood of idle sockets or of idle
  // authenticated connections never locks out a peer that is using its own.
  const char* refusal = nullptr;
  if (stopping_.load()) {
    refusal = "";
  } else if (from_peer >= config_.max_per_peer) {
    if (make_room(&peer)) {
      --live;
    } else {
      refusal = "too many connections from it, all in use";
    }
  }
  if (refusal == nullptr && live >= config_.max_connections && !make_room(nullptr)) {
    refusal = "the server is full, every connection in use";
  }
  if (refusal != nullptr) {
    close(fd);
    if (*refusal != '\0') refuse(peer, refusal);
    return;
  }
  conns_.emplace_back();
  Conn* conn = &conns_.back();
  conn->fd = fd;
  conn->peer = peer;
  conn->accepted = std::chrono::steady_clock::now();
  conn->thread = std::thread([this, conn] {
    handler_(conn->fd, stopping_, conn->state);
    shutdown(conn->fd, SHUT_RDWR);
    conn->finished.store(true);
  });
}

void Acceptor::accept_loop() {
  while (!stopping_.load()) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (poll(&pfd, 1, config_.poll_ms) <= 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cut_overdue();
      continue;
    }
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      accept_failed(errno);
      continue;
    }
    tune_data_socket(fd, config_.poll_ms, config_.socket_buffer);
    admit(fd);
  }
}

}  // namespace kvs
