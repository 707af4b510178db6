#include "common/acceptor.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

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

void Acceptor::cut(Conn& conn, const char* why) {
  conn.cut = true;
  shutdown(conn.fd, SHUT_RDWR);  // its handler's reads end; the thread finishes and is reaped
  refuse(conn.peer, why);
}

void Acceptor::refuse(const std::string& peer, const char* why) {
  ++refused_;
  log_.log("cut a connection from " + peer + ": " + why);
}

void Acceptor::log_refusal(const std::string& what, int fd, const std::string& why) {
  const HostPort peer = peer_of(fd);
  log_.log("refused " + what + " from " + format_host_port(peer.host, peer.port) + ": " + why);
}

void Acceptor::cut_unproved_past_deadline() {
  if (config_.prove_ms <= 0) return;
  const auto deadline = std::chrono::steady_clock::now() - std::chrono::milliseconds(config_.prove_ms);
  for (auto& c : conns_) {
    if (!c.cut && !c.proved.load() && !c.finished.load() && c.accepted < deadline) {
      cut(c, "it did not speak the protocol in time");
    }
  }
}

bool Acceptor::cut_oldest_unproved(const std::string* peer) {
  for (auto& c : conns_) {  // (in the order accepted)
    if (!c.cut && !c.proved.load() && !c.finished.load() && (peer == nullptr || c.peer == *peer)) {
      cut(c, "a new connection needed its place and it had not spoken the protocol yet");
      return true;
    }
  }
  return false;
}

void Acceptor::admit(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  reap_finished();
  cut_unproved_past_deadline();
  const std::string peer = peer_of(fd).host;
  size_t live = 0, from_peer = 0;
  for (const auto& c : conns_) {
    if (c.cut || c.finished.load()) continue;
    ++live;
    from_peer += c.peer == peer;
  }
  // Full: an unproved connection (idle, half-open, or still speaking) gives its place, so a flood of them
  // never locks out a peer that speaks the protocol; only proved ones are a hard bound.
  const char* refusal = nullptr;
  if (stopping_.load()) {
    refusal = "";
  } else if (from_peer >= config_.max_per_peer) {
    if (cut_oldest_unproved(&peer)) {
      --live;
    } else {
      refusal = "too many connections from it";
    }
  }
  if (refusal == nullptr && live >= config_.max_connections && !cut_oldest_unproved(nullptr)) {
    refusal = "the server is full";
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
    handler_(conn->fd, stopping_, conn->proved);
    shutdown(conn->fd, SHUT_RDWR);
    conn->finished.store(true);
  });
}

void Acceptor::accept_loop() {
  while (!stopping_.load()) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (poll(&pfd, 1, config_.poll_ms) <= 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cut_unproved_past_deadline();
      continue;
    }
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    tune_data_socket(fd, config_.poll_ms, config_.socket_buffer);
    admit(fd);
  }
}

}  // namespace kvs
