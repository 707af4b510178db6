// Small POSIX socket helpers shared by the transports.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvs {

// Runs a system call again while a signal interrupts it: a signal handler installed by Python (or any
// library in the process) makes whichever thread it lands on return EINTR from a blocking call.
template <typename Call>
auto retry_on_signal(Call call) {
  for (;;) {
    auto result = call();
    if (result >= 0 || errno != EINTR) return result;
  }
}

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

StatusOr<HostPort> parse_host_port(const std::string& text);
// "host:port", an IPv6 host in brackets (what parse_host_port reads).
std::string format_host_port(const std::string& host, uint16_t port);
// The connected peer of a socket ("?" and port 0 when it cannot be told), for log lines and limits.
HostPort peer_of(int fd);
StatusOr<int> tcp_listen(const std::string& host, uint16_t port, uint16_t* bound_port);
// source: the local address to leave from ("" lets the kernel choose).
StatusOr<int> tcp_connect(const std::string& host, uint16_t port, int timeout_ms,
                          const std::string& source = "");
// No delay, the poll interval as send/receive timeout, and socket buffers of buffer_bytes (0 leaves the
// kernel's autotuning; larger buffers lift loopback throughput ~15-20% here).
void tune_data_socket(int fd, int poll_ms, int buffer_bytes);

// Sends the whole iovec (modified in place). Fails on error or when the peer stops reading.
// max_stalls: how many send timeouts (poll intervals) in a row without progress are tolerated.
Status send_iov(int fd, struct iovec* iov, int count, int max_stalls);
Status send_all(int fd, const void* data, size_t len, int max_stalls);

// Receives exactly len bytes. Sockets carry a short receive timeout (the poll interval); keep_waiting
// is asked on each timeout whether to go on waiting. A closed peer is kConnectionFailed.
template <typename KeepWaiting>
Status recv_exact(int fd, void* buf, size_t len, KeepWaiting keep_waiting);

// One recv(MSG_WAITALL): all of len, or less when the poll interval expires (kTimedOut if nothing came).
Status recv_once(int fd, char* buf, size_t len, size_t* got);

// Polls a socket without sleeping for up to `us` microseconds; true once data (or EOF) is there.
// A sleeping thread takes tens of microseconds to wake on a VM; spinning briefly when a reply is
// due cuts round trips by more than half.
bool spin_until_readable(int fd, int us);
// Bytes the kernel holds for reading on `fd` now (0 on error).
size_t readable_bytes(int fd);

// A socket's incoming bytes through a buffer: a burst of small frames (a batch's request headers) costs one
// recv together; a read larger than the buffer goes straight into its destination past what is buffered.
class SocketReader {
 public:
  explicit SocketReader(int fd, size_t capacity = 64 << 10) : fd_(fd), buffer_(capacity) {}
  size_t buffered() const { return end_ - begin_; }
  // Exactly len bytes, with recv_exact's waiting rule.
  template <typename KeepWaiting>
  Status read(void* dst, size_t len, KeepWaiting keep_waiting);

 private:
  Status fill(size_t* got);  // one recv of what is there into the emptied buffer

  int fd_;
  std::vector<char> buffer_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

template <typename KeepWaiting>
Status SocketReader::read(void* dst, size_t len, KeepWaiting keep_waiting) {
  char* out = static_cast<char*>(dst);
  size_t done = std::min(len, buffered());
  std::memcpy(out, buffer_.data() + begin_, done);
  begin_ += done;
  while (done < len) {
    if (len - done >= buffer_.size() / 2) {  // (large: no copy through the buffer)
      size_t got = 0;
      Status st = recv_once(fd_, out + done, len - done, &got);
      if (st.code() == Code::kTimedOut && keep_waiting(done)) continue;
      if (!st.ok()) return st;
      done += got;
      continue;
    }
    size_t got = 0;
    Status st = fill(&got);
    if (st.code() == Code::kTimedOut && keep_waiting(done)) continue;
    if (!st.ok()) return st;
    const size_t take = std::min(len - done, got);
    std::memcpy(out + done, buffer_.data(), take);
    begin_ = take;
    done += take;
  }
  return Status::OK();
}

template <typename KeepWaiting>
Status recv_exact(int fd, void* buf, size_t len, KeepWaiting keep_waiting) {
  char* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < len) {
    size_t got = 0;
    Status st = recv_once(fd, p + done, len - done, &got);
    if (st.code() == Code::kTimedOut) {
      if (keep_waiting(done)) continue;
      return st;
    }
    if (!st.ok()) return st;
    done += got;
  }
  return Status::OK();
}

}  // namespace kvs
