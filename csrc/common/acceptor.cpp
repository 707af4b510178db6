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

void Acceptor::accept_loop() {
  while (!stopping_.load()) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (poll(&pfd, 1, config_.poll_ms) <= 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    tune_data_socket(fd, config_.poll_ms, config_.socket_buffer);
    std::lock_guard<std::mutex> lock(mu_);
    reap_finished();
    if (stopping_.load() || conns_.size() >= config_.max_connections) {
      close(fd);  // a flood of idle connections costs the flooder, not this server
      continue;
    }
    conns_.emplace_back();
    Conn* conn = &conns_.back();
    conn->fd = fd;
    conn->thread = std::thread([this, conn] {
      handler_(conn->fd, stopping_);
      shutdown(conn->fd, SHUT_RDWR);
      conn->finished.store(true);
    });
  }
}

}  // namespace kvs
