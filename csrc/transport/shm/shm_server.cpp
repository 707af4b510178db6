#include "transport/shm/shm_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "common/bytes.h"

namespace kvs::shm {

int abstract_address(const std::string& name, void* out, unsigned* len) {
  auto* addr = static_cast<sockaddr_un*>(out);
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof(addr->sun_path)) return -1;
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  *len = static_cast<unsigned>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return 0;
}

Status ShmServer::start(const std::string& name) {
  sockaddr_un addr{};
  unsigned len = 0;
  if (abstract_address(name, &addr, &len) != 0)
    return Status(Code::kInvalidArgument, "shm socket name too long");
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return errno_status(Code::kIoError, "unix socket");
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listen_fd_, 64) != 0) {
    Status st = errno_status(Code::kIoError, "bind shm socket");
    close(listen_fd_);
    listen_fd_ = -1;
    return st;
  }
  thread_ = std::thread([this] { loop(); });
  return Status::OK();
}

void ShmServer::stop() {
  if (stopping_.exchange(true)) return;
  if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);  // wakes the poll at once
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
}

void ShmServer::loop() {
  while (!stopping_.load()) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    timeval tv{1, 0};  // a request is one small datagram; never wait long on a peer
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    serve(fd);
    close(fd);
  }
}

void ShmServer::serve(int fd) {
  std::vector<char> request(4 + 16 * kMaxRegionsPerRequest);
  const ssize_t n = recv(fd, request.data(), request.size(), 0);
  if (n < 4) return;
  ByteReader r(request.data(), static_cast<size_t>(n));
  const auto count = r.get<uint32_t>();
  if (count > kMaxRegionsPerRequest || static_cast<size_t>(n) != 4 + 16ull * count) return;
  // First datagram: the pin table (region id 0); then one per requested region.
  for (uint32_t i = 0; i <= count; ++i) {
    const uint64_t id = i == 0 ? 0 : r.get<uint64_t>();
    const uint64_t key = i == 0 ? 0 : r.get<uint64_t>();
    const int table = registry_->pin_table_fd();
    // A region's memfd, then its fence table's when it has one (both in one SCM_RIGHTS message).
    int fds[2] = {
        i == 0 ? (table >= 0 ? fcntl(table, F_DUPFD_CLOEXEC, 0) : -1) : registry_->dup_memfd(id, key), -1};
    if (i > 0 && fds[0] >= 0) fds[1] = registry_->dup_fence_fd(id, key);
    const size_t nfds = fds[0] < 0 ? 0 : (fds[1] < 0 ? 1 : 2);
    char reply[9];
    std::memcpy(reply, &id, 8);
    reply[8] = nfds > 0 ? 1 : 0;
    iovec iov{reply, sizeof(reply)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(fds))];
    if (nfds > 0) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
      cmsghdr* cm = CMSG_FIRSTHDR(&msg);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
      std::memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
    }
    const ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
    for (int f : fds) {
      if (f >= 0) close(f);
    }
    if (sent < 0) return;
  }
}

}  // namespace kvs::shm
