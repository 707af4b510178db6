#include "engine/bootstrap.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "common/bytes.h"
#include "common/net.h"

namespace kvs {
namespace {

// Hello: u32 magic, u16 version, u16 zero. Reply: u32 magic, u32 length, then the descriptor.
constexpr uint32_t kHelloMagic = 0x4b565342;  // "KVSB"
constexpr uint16_t kHelloVersion = 1;
constexpr size_t kHelloSize = 8;
constexpr uint32_t kMaxDescriptor = 64u << 20;
constexpr size_t kMaxConnections = 64;
constexpr int kPollMs = 100;

bool keep_waiting_until(int* stalled, int timeout_ms) {
  return ++*stalled * kPollMs < timeout_ms;
}

}  // namespace

BootstrapServer::BootstrapServer(DescriptorFn descriptor, int timeout_ms)
    : descriptor_(std::move(descriptor)), timeout_ms_(timeout_ms) {}

Status BootstrapServer::start(const std::string& host, uint16_t port) {
  auto fd = tcp_listen(host, port, &port_);
  if (!fd.ok()) return fd.status();
  listen_fd_ = fd.value();
  acceptor_ = std::thread([this] { accept_loop(); });
  return Status::OK();
}

void BootstrapServer::stop() {
  if (stopping_.exchange(true)) return;
  if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : conns_) shutdown(c.fd, SHUT_RDWR);
  for (auto& c : conns_) {
    if (c.thread.joinable()) c.thread.join();
    close(c.fd);
  }
  conns_.clear();
}

void BootstrapServer::reap_finished() {
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

void BootstrapServer::accept_loop() {
  while (!stopping_.load()) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (poll(&pfd, 1, kPollMs) <= 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    tune_data_socket(fd, kPollMs, 0);
    std::lock_guard<std::mutex> lock(mu_);
    reap_finished();
    if (stopping_.load() || conns_.size() >= kMaxConnections) {
      close(fd);  // a flood of idle handshakes costs the flooder, not the engine
      continue;
    }
    conns_.emplace_back();
    Conn* conn = &conns_.back();
    conn->fd = fd;
    conn->thread = std::thread([this, conn] {
      serve(conn->fd);
      shutdown(conn->fd, SHUT_RDWR);
      conn->finished.store(true);
    });
  }
}

void BootstrapServer::serve(int fd) {
  char hello[kHelloSize];
  int stalled = 0;
  Status st = recv_exact(fd, hello, kHelloSize, [&](size_t) {
    return !stopping_.load() && keep_waiting_until(&stalled, timeout_ms_);
  });
  if (!st.ok()) return;
  ByteReader r(hello, kHelloSize);
  if (r.get<uint32_t>() != kHelloMagic || r.get<uint16_t>() != kHelloVersion || r.get<uint16_t>() != 0)
    return;
  const std::vector<char> body = descriptor_();
  ByteWriter w;
  w.put<uint32_t>(kHelloMagic);
  w.put<uint32_t>(static_cast<uint32_t>(body.size()));
  w.bytes().insert(w.bytes().end(), body.begin(), body.end());
  (void)send_all(fd, w.bytes().data(), w.bytes().size(), timeout_ms_ / kPollMs + 1);
}

StatusOr<EngineDescriptor> fetch_descriptor(const std::string& name, int timeout_ms) {
  auto hp = parse_host_port(name);
  if (!hp.ok()) return hp.status();
  auto fd = tcp_connect(hp.value().host, hp.value().port, timeout_ms);
  if (!fd.ok()) return fd.status();
  tune_data_socket(fd.value(), kPollMs, 0);
  ByteWriter hello;
  hello.put<uint32_t>(kHelloMagic);
  hello.put<uint16_t>(kHelloVersion);
  hello.put<uint16_t>(0);
  int stalled = 0;
  auto keep_waiting = [&](size_t) { return keep_waiting_until(&stalled, timeout_ms); };
  Status st = send_all(fd.value(), hello.bytes().data(), hello.bytes().size(), timeout_ms / kPollMs + 1);
  char head[8];
  if (st.ok()) st = recv_exact(fd.value(), head, sizeof(head), keep_waiting);
  StatusOr<EngineDescriptor> result = st;
  if (st.ok()) {
    ByteReader r(head, sizeof(head));
    const auto magic = r.get<uint32_t>();
    const auto length = r.get<uint32_t>();
    if (magic != kHelloMagic || length > kMaxDescriptor) {
      result = Status(Code::kProtocolError, name + " is not a kvstore engine (bad handshake reply)");
    } else {
      std::vector<char> body(length);
      st = recv_exact(fd.value(), body.data(), body.size(), keep_waiting);
      result = st.ok() ? decode_descriptor(body.data(), body.size()) : StatusOr<EngineDescriptor>(st);
    }
  }
  close(fd.value());
  if (!result.ok() && result.status().code() == Code::kTimedOut) {
    return Status(Code::kConnectionFailed, "handshake with " + name + " timed out");
  }
  return result;
}

}  // namespace kvs
