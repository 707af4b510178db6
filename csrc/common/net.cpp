#include "common/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace kvs {

StatusOr<HostPort> parse_host_port(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return Status(Code::kInvalidArgument, "expected HOST:PORT, got '" + text + "'");
  }
  HostPort hp;
  hp.host = text.substr(0, colon);
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  const std::string port = text.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
    return Status(Code::kInvalidArgument, "bad port in '" + text + "'");
  }
  const long value = std::stol(port);
  if (value <= 0 || value > 65535)
    return Status(Code::kInvalidArgument, "port out of range in '" + text + "'");
  hp.port = static_cast<uint16_t>(value);
  return hp;
}

namespace {

StatusOr<addrinfo*> resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0 || result == nullptr) {
    return Status(Code::kInvalidArgument, "cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  return result;
}

}  // namespace

std::string format_host_port(const std::string& host, uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

HostPort peer_of(int fd) {
  HostPort out{"?", 0};
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return out;
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    out.port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    out.port = ntohs(a->sin6_port);
  }
  out.host = host;
  return out;
}

StatusOr<int> tcp_listen(const std::string& host, uint16_t port, uint16_t* bound_port) {
  auto resolved = resolve(host, port, true);
  if (!resolved.ok()) return resolved.status();
  addrinfo* ai = resolved.value();
  const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(ai);
    return errno_status(Code::kIoError, "socket");
  }
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 256) != 0) {
    Status st = errno_status(Code::kIoError, "bind/listen on " + host + ":" + std::to_string(port));
    freeaddrinfo(ai);
    close(fd);
    return st;
  }
  freeaddrinfo(ai);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *bound_port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                           : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return fd;
}

StatusOr<int> tcp_connect(const std::string& host, uint16_t port, int timeout_ms, const std::string& source) {
  auto resolved = resolve(host, port, false);
  if (!resolved.ok()) return resolved.status();
  addrinfo* ai = resolved.value();
  const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    freeaddrinfo(ai);
    return errno_status(Code::kIoError, "socket");
  }
  if (!source.empty()) {
    // Leave from this address (a path's local NIC), on any free port.
    auto local = resolve(source, 0, true);
    Status st = local.ok() ? Status::OK() : local.status();
    if (st.ok()) {
      if (bind(fd, local.value()->ai_addr, local.value()->ai_addrlen) != 0) {
        st = errno_status(Code::kConnectionFailed, "bind to " + source);
      }
      freeaddrinfo(local.value());
    }
    if (!st.ok()) {
      freeaddrinfo(ai);
      close(fd);
      return st;
    }
  }
  int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  const std::string where = host + ":" + std::to_string(port);
  if (rc != 0 && errno != EINPROGRESS) {
    Status st = errno_status(Code::kConnectionFailed, "connect to " + where);
    close(fd);
    return st;
  }
  if (rc != 0) {
    pollfd pfd{fd, POLLOUT, 0};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    do {  // (again when a signal cuts the wait short)
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      rc = poll(&pfd, 1, static_cast<int>(std::max<int64_t>(0, left.count())));
    } while (rc < 0 && errno == EINTR);
    int err = 0;
    socklen_t len = sizeof(err);
    if (rc == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (rc != 1 || err != 0) {
      close(fd);
      return Status(Code::kConnectionFailed, "connect to " + where + ": " +
                                                 (rc == 0 ? "timed out" : std::strerror(err ? err : errno)));
    }
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

void tune_data_socket(int fd, int poll_ms, int buffer_bytes) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (buffer_bytes > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(buffer_bytes));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes));
  }
  timeval tv{};
  tv.tv_sec = poll_ms / 1000;
  tv.tv_usec = (poll_ms % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

Status send_iov(int fd, struct iovec* iov, int count, int max_stalls) {
  int stalls = 0;
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    const ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      // The send timeout is the poll interval; a peer that reads nothing for many of them is stuck.
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && ++stalls < max_stalls) continue;
      return errno_status(Code::kConnectionFailed, "send");
    }
    stalls = 0;
    size_t left = static_cast<size_t>(n);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return Status::OK();
}

Status send_all(int fd, const void* data, size_t len, int max_stalls) {
  iovec iov{const_cast<void*>(data), len};
  return send_iov(fd, &iov, 1, max_stalls);
}

bool spin_until_readable(int fd, int us) {
  if (us <= 0) return false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  char probe;
  do {
    const ssize_t n = recv(fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

size_t readable_bytes(int fd) {
  int n = 0;
  return ioctl(fd, FIONREAD, &n) == 0 && n > 0 ? static_cast<size_t>(n) : 0;
}

Status SocketReader::fill(size_t* got) {
  begin_ = end_ = 0;
  for (;;) {
    const ssize_t n = recv(fd_, buffer_.data(), buffer_.size(), 0);
    if (n > 0) {
      end_ = static_cast<size_t>(n);
      *got = end_;
      return Status::OK();
    }
    if (n == 0) return Status(Code::kConnectionFailed, "connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status(Code::kTimedOut, "no data");
    return errno_status(Code::kConnectionFailed, "recv");
  }
}

Status recv_once(int fd, char* buf, size_t len, size_t* got) {
  for (;;) {
    const ssize_t n = recv(fd, buf, len, MSG_WAITALL);  // one wake-up per frame part
    if (n > 0) {
      *got = static_cast<size_t>(n);
      return Status::OK();
    }
    if (n == 0) return Status(Code::kConnectionFailed, "connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status(Code::kTimedOut, "no data");
    return errno_status(Code::kConnectionFailed, "recv");
  }
}

}  // namespace kvs
