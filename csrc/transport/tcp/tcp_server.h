// Target side of the TCP transport: admits a connection once it proved its session (wire.h), then serves
// READ and WRITE against the registry. Every request is checked (region exported, its key in that session,
// bounds) before any byte of memory is touched. Regions of kind file are read from their file (direct I/O)
// and never written.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/acceptor.h"
#include "common/net.h"
#include "common/status.h"
#include "core/fence.h"
#include "core/registry.h"
#include "transport/tcp/tcp_config.h"
#include "transport/tcp/wire.h"

namespace kvs::tcp {

// Replies to a run of reads, sent in one vector write: each keeps its region pinned and its allocation's
// fence entry held until its bytes are on the socket.
// Replies held to go out in one vector write: read data (its region pinned and its fence entry held until
// the bytes are on the socket) and write acknowledgements (a header alone).
struct ReadReplies {
  static constexpr size_t kMaxRun = 256;  // (two iovecs each: within IOV_MAX)
  std::vector<char> headers = std::vector<char>(kMaxRun * kHeaderSize);
  std::vector<iovec> iov;
  std::vector<RegionPin> pins;
  std::vector<std::unique_ptr<FenceEntry>> fences;
  size_t count = 0;
};

// One authenticated connection, as its requests see it.
struct Requester {
  int fd;
  const SessionKeys& keys;
  uint64_t writer;   // its session, as the fences know it (a write's resend is its own)
  std::string peer;  // its address, without the port
  ConnState& state;
  const std::atomic<bool>& stopping;
};

class TcpServer {
 public:
  // `secret`: the cluster secret sessions are derived under ("" : none).
  TcpServer(MemoryRegistry* registry, uint64_t engine_id, std::string secret, TcpConfig config);
  TcpServer(const TcpServer&) = delete;
  TcpServer& operator=(const TcpServer&) = delete;

  Status start(const std::string& host, uint16_t port) { return acceptor_.start(host, port); }
  void stop() { acceptor_.stop(); }
  uint16_t port() const { return acceptor_.port(); }

 private:
  void serve(int fd, const std::atomic<bool>& stopping, ConnState& state);
  // The connection's challenge-response; the session it proved.
  StatusOr<Session> admit(int fd, const std::atomic<bool>& stopping, ConnState& state);
  // A frame's header, read through `in` (the request loop) or exactly (the handshake).
  StatusOr<FrameHeader> receive_header(int fd, SocketReader& in, const std::atomic<bool>& stopping);
  StatusOr<FrameHeader> receive_header(int fd, const std::atomic<bool>& stopping);
  Status handle(const Requester& r, const FrameHeader& header, ReadReplies& replies);
  Status reply_error(int fd, const FrameHeader& request, const Status& status);
  Status send_from_file(int fd, const FrameHeader& request, const DiskFile& file);
  Status drain(SocketReader& in, uint64_t length);
  // Queues the reply to a read of plain memory. False: refused by its fence (`refused` says why), or
  // refused otherwise, a file or a GPU region (`refused` OK: handle() then answers it alone).
  bool add_reply(const Requester& r, const FrameHeader& header, ReadReplies& replies, Status* refused);
  // The request's fence entry in its pinned region; one that waits for its allocation to be announced
  // first sends the replies queued (nullptr: that failed, the connection is done). While it waits the
  // connection counts as idle (a newcomer may take its place, which ends the wait), and an address has
  // at most max_waits_per_peer waiting at once (the others are refused as stale at once): a member
  // naming allocations never announced pins no thread and holds no place.
  std::unique_ptr<FenceEntry> enter_fence(const Requester& r, const RegionPin& pin, const FrameHeader& h,
                                          ReadReplies& replies);
  std::unique_ptr<FenceEntry> wait_fence(const Requester& r, const RegionPin& pin, const FrameHeader& h);
  // Receives a write's payload into its region and queues its acknowledgement (a refusal is answered at
  // once, after the queued replies).
  Status receive_write(const Requester& r, SocketReader& in, const FrameHeader& header, ReadReplies& replies);
  Status send_replies(int fd, ReadReplies& replies);

  MemoryRegistry* registry_;
  uint64_t engine_id_;
  std::string secret_;
  TcpConfig config_;
  std::mutex waits_mu_;
  std::unordered_map<std::string, size_t> waits_;  // requests waiting for an announcement, per address
  Acceptor acceptor_;  // last: its threads call into the members above, so it stops first
};

}  // namespace kvs::tcp
