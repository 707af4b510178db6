#include "transport/tcp/tcp_connection.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "common/net.h"
#include "common/xxh3.h"
#include "transport/copy.h"

namespace kvs::tcp {
namespace {

constexpr uint64_t kInlineWriteBytes = 256 << 10;
constexpr size_t kMaxHeaderRun = 256;                // queued slices the sender takes at once
constexpr uint64_t kCoalescedWriteBytes = 64 << 10;  // writes up to this size join a run's vector write
constexpr size_t kMaxRunIovecs = 1024;               // IOV_MAX on Linux

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// Waits up to poll_ms for bytes (or the peer's close) on fd; false when none came.
bool wait_readable(int fd, int poll_ms) {
  pollfd pfd{fd, POLLIN, 0};
  const int rc = poll(&pfd, 1, poll_ms);
  return rc > 0 || (rc < 0 && errno == EINTR);
}

Status recv_bytes(int fd, char* dst, uint64_t length, const TcpConfig& config) {
  int stalled = 0;
  return recv_exact(fd, dst, length, [&](size_t) { return ++stalled < config.max_stalls(); });
}

// The next frame's header, which must be `expected` (an ERROR frame: the peer's refusal, as a status).
StatusOr<FrameHeader> expect_frame(int fd, Opcode expected, const TcpConfig& config,
                                   const std::string& peer) {
  char raw[kHeaderSize];
  Status st = recv_bytes(fd, raw, kHeaderSize, config);
  if (!st.ok()) return st;
  auto header = decode_header(raw, kHeaderSize, config.max_payload);
  if (!header.ok()) return header.status();
  if (header.value().opcode == Opcode::kError && header.value().status == int32_t(Code::kPermissionDenied)) {
    return Status(Code::kPermissionDenied, "peer " + peer + " refused this session's proof");
  }
  if (header.value().opcode != expected) {
    return Status(Code::kProtocolError, "peer " + peer + " broke the connection handshake");
  }
  return header;
}

}  // namespace

StatusOr<int> open_connection(const std::string& host, uint16_t port, uint64_t engine_id,
                              const Session& session, const TcpConfig& config, const std::string& source) {
  auto fd = tcp_connect(host, port, config.connect_timeout_ms, source);
  if (!fd.ok()) return fd.status();
  tune_data_socket(fd.value(), config.poll_ms, config.socket_buffer);
  const std::string peer = host + ":" + std::to_string(port);
  const std::string key = digest_bytes(session.key);
  const std::string ours = random_bytes(kNonceSize);
  char raw[kHeaderSize];
  FrameHeader hello;
  hello.opcode = Opcode::kHello;
  hello.length = kHelloPayload;
  encode_header(hello, raw);
  iovec iov[3] = {{raw, kHeaderSize},
                  {const_cast<char*>(session.id.data()), session.id.size()},
                  {const_cast<char*>(ours.data()), ours.size()}};
  Status st = session.id.size() == kSessionIdSize
                  ? send_iov(fd.value(), iov, 3, config.max_stalls())
                  : Status(Code::kInvalidArgument, "no handshake session for " + peer);
  char ack[kHelloAckPayload];
  if (st.ok()) st = expect_frame(fd.value(), Opcode::kHelloAck, config, peer).status();
  if (st.ok()) st = recv_bytes(fd.value(), ack, sizeof(ack), config);
  const std::string theirs(ack + 8, kNonceSize);
  if (st.ok()) {
    uint64_t peer_id = 0;
    std::memcpy(&peer_id, ack, sizeof(peer_id));
    Digest claimed;
    std::memcpy(claimed.data(), ack + 8 + kNonceSize, claimed.size());
    if (peer_id != engine_id) {
      st = Status(Code::kConnectionFailed, "peer " + peer + " restarted");
    } else if (!same_mac(claimed, prove(key, "tcp target", ours, theirs))) {
      st = Status(Code::kPermissionDenied, "peer " + peer + " does not know this session (another cluster)");
    }
  }
  if (st.ok()) {
    const Digest mine = prove(key, "tcp initiator", theirs, ours);
    FrameHeader proof;
    proof.opcode = Opcode::kProof;
    proof.length = kProofPayload;
    encode_header(proof, raw);
    iovec out[2] = {{raw, kHeaderSize}, {const_cast<uint8_t*>(mine.data()), mine.size()}};
    st = send_iov(fd.value(), out, 2, config.max_stalls());
  }
  if (st.ok()) st = expect_frame(fd.value(), Opcode::kProofAck, config, peer).status();
  if (!st.ok()) {
    close(fd.value());
    return st;
  }
  return fd.value();
}

TcpConnection::TcpConnection(int fd, const TcpConfig& config, std::shared_ptr<PathCounters> counters,
                             LostSlices on_lost)
    : fd_(fd), config_(config), counters_(std::move(counters)), on_lost_(std::move(on_lost)) {
  last_progress_ns_.store(now_ns());
  sender_ = std::thread([this] { send_loop(); });
  receiver_ = std::thread([this] { recv_loop(); });
}

TcpConnection::~TcpConnection() {
  stopping_.store(true);
  fail(Status(Code::kClosed, "engine closed"));
  queue_cv_.notify_all();
  sender_.join();
  receiver_.join();
  close(fd_);
}

void TcpConnection::enqueue(std::vector<Slice>&& slices, uint64_t bytes) {
  load_bytes_.fetch_add(bytes);
  // Small work on an idle connection is sent from the submitting thread: no wake-up on the way out.
  uint64_t write_bytes = 0;
  for (const auto& s : slices) write_bytes += s.op == TransferOp::kWrite ? s.length : 0;
  if (write_bytes <= kInlineWriteBytes) {
    std::unique_lock<std::mutex> send_lock(send_mu_, std::try_to_lock);
    bool idle = false;
    if (send_lock.owns_lock()) {
      std::lock_guard<std::mutex> lock(queue_mu_);
      idle = queue_.empty();
    }
    if (idle) {
      dispatch_all(slices);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (!dead_.load()) {
      for (auto& s : slices) queue_.push_back(std::move(s));
      slices.clear();
    }
  }
  lose(std::move(slices), Status(Code::kConnectionFailed, "connection is down"));
  queue_cv_.notify_one();
}

void TcpConnection::finish(const Slice& slice, const Status& status) {
  load_bytes_.fetch_sub(slice.length);
  if (status.ok() && counters_) {
    counters_->bytes.fetch_add(slice.length, std::memory_order_relaxed);
    counters_->slices.fetch_add(1, std::memory_order_relaxed);
  }
  slice.done(status);
}

void TcpConnection::lose(std::vector<Slice>&& slices, const Status& status) {
  if (slices.empty()) return;
  if (stopping_.load()) {
    for (auto& s : slices) finish(s, status);
    return;
  }
  if (!on_lost_) {  // (one path: another transport's link may take them)
    for (auto& s : slices) {
      load_bytes_.fetch_sub(s.length);
      s.lost(status);
    }
    return;
  }
  for (auto& s : slices) load_bytes_.fetch_sub(s.length);
  on_lost_(std::move(slices), status);
}

void TcpConnection::fail(const Status& status) {
  std::deque<Slice> queued;
  std::unordered_map<uint64_t, Slice> outstanding;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    dead_.store(true);
    queued.swap(queue_);
  }
  {
    std::lock_guard<std::mutex> lock(outstanding_mu_);
    outstanding.swap(outstanding_);
  }
  if (!outstanding.empty() || !queued.empty() || status.code() != Code::kClosed) {
    // Reset now and drop what the kernel still holds to send: a write payload queued on a path that went
    // down must not reach the peer after its request ended (it may have been sent again on another path,
    // and the caller may have written the place again since). connect(AF_UNSPEC) resets a TCP socket and
    // keeps the descriptor valid for the threads still using it.
    const linger reset{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    sockaddr unspecified{};
    unspecified.sa_family = AF_UNSPEC;
    connect(fd_, &unspecified, sizeof(unspecified));
  }
  shutdown(fd_, SHUT_RDWR);
  queue_cv_.notify_all();
  std::vector<Slice> lost;
  lost.reserve(queued.size() + outstanding.size());
  for (auto& s : queued) lost.push_back(std::move(s));
  for (auto& [id, s] : outstanding) lost.push_back(std::move(s));
  lose(std::move(lost), status);
}

void TcpConnection::send_loop() {
  std::vector<Slice> taken;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return dead_.load() || !queue_.empty(); });
      if (dead_.load()) return;
      // What is queued goes out together (a batch's read headers in one write), a bounded run at a time.
      for (size_t n = 0; n < kMaxHeaderRun && !queue_.empty(); ++n) {
        taken.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    std::lock_guard<std::mutex> send_lock(send_mu_);
    dispatch_all(taken);
    taken.clear();
  }
}

void TcpConnection::dispatch_all(std::vector<Slice>& slices) {
  // A run of slices goes out in one vector write: a read's header, a small write's header and payload
  // (read from the caller's memory under its request's copy guard, held until the write returns). A
  // large write goes alone, after what came before it.
  thread_local std::vector<char> headers;
  thread_local std::vector<iovec> iov;
  thread_local std::vector<std::shared_ptr<Batch>> guarded;  // writes whose copy guard is held
  headers.resize(slices.size() * kHeaderSize);               // (never grown below: the iovecs point into it)
  iov.clear();
  size_t used = 0;
  auto flush = [&] {
    if (iov.empty()) return true;
    Status st = send_iov(fd_, iov.data(), static_cast<int>(iov.size()), config_.max_stalls());
    for (auto& batch : guarded) batch->end_copy();
    guarded.clear();
    iov.clear();
    if (!st.ok()) fail(st);
    return st.ok();
  };
  for (auto& slice : slices) {
    const bool write = slice.op == TransferOp::kWrite;
    if (write && slice.length > kCoalescedWriteBytes) {
      if (!flush()) return;
      dispatch(std::move(slice));
      continue;
    }
    const size_t parts = 1 + (write ? std::max<size_t>(slice.piece_count, 1) : 0);
    if (iov.size() + parts > kMaxRunIovecs && !flush()) return;
    std::shared_ptr<Batch> batch = slice.batch;
    if (write && !batch->begin_copy(slice.request)) {  // (over: its memory is not read, nothing is sent)
      finish(slice, Status(Code::kTimedOut, "request already over"));
      continue;
    }
    const uint64_t request_id = register_slice(slice);
    if (request_id == 0) {
      if (write) batch->end_copy();
      continue;
    }
    char* raw = headers.data() + used;
    used += kHeaderSize;
    encode_header(frame_header(slice, request_id), raw);
    iov.push_back(iovec{raw, kHeaderSize});
    if (!write) continue;
    guarded.push_back(std::move(batch));
    if (slice.piece_count == 0) {
      iov.push_back(iovec{slice.local, slice.length});
    } else {
      for (uint32_t k = 0; k < slice.piece_count; ++k) {
        iov.push_back(iovec{slice.pieces[k].addr, slice.pieces[k].length});
      }
    }
  }
  flush();
}

uint64_t TcpConnection::register_slice(Slice& slice) {
  if (!slice.batch->pending(slice.request)) {
    finish(slice, Status(Code::kTimedOut, "request already over"));
    return 0;
  }
  uint64_t request_id = 0;
  {
    std::lock_guard<std::mutex> lock(outstanding_mu_);
    if (!dead_.load()) {
      request_id = next_request_id_++;
      if (outstanding_.empty()) last_progress_ns_.store(now_ns());
      outstanding_.emplace(request_id, slice);
    }
  }
  if (request_id == 0) {
    std::vector<Slice> lost;
    lost.push_back(std::move(slice));
    lose(std::move(lost), Status(Code::kConnectionFailed, "connection is down"));
  }
  return request_id;
}

FrameHeader TcpConnection::frame_header(const Slice& slice, uint64_t request_id) {
  FrameHeader h;
  h.opcode = slice.op == TransferOp::kRead ? Opcode::kRead : Opcode::kWrite;
  h.request_id = request_id;
  h.region_id = slice.region_id;
  h.key = slice.key;
  h.offset = slice.offset;
  h.length = slice.length;
  h.fence_slot = slice.fence_slot;
  h.fence_gen = slice.fence_gen;
  return h;
}

void TcpConnection::dispatch(Slice&& slice) {
  const uint64_t request_id = register_slice(slice);
  if (request_id == 0) return;
  Status st = send_slice(slice, request_id);
  if (!st.ok()) fail(st);
}

Status TcpConnection::send_slice(const Slice& slice, uint64_t request_id) {
  char raw[kHeaderSize];
  encode_header(frame_header(slice, request_id), raw);
  if (slice.op == TransferOp::kRead) return send_all(fd_, raw, kHeaderSize, config_.max_stalls());
  // A write's payload is read from the caller's memory: only while the request is still live.
  if (!slice.batch->begin_copy(slice.request)) {
    // The header is not sent yet, so the stream stays in step; the slice is finished here.
    std::lock_guard<std::mutex> lock(outstanding_mu_);
    if (outstanding_.erase(request_id) != 0) {
      load_bytes_.fetch_sub(slice.length);
      slice.done(Status(Code::kTimedOut, "request already over"));
    }
    return Status::OK();
  }
  // Header and payload in one vector write; a gathered slice's pieces follow one another.
  thread_local std::vector<iovec> iov;
  iov.assign(1, iovec{raw, kHeaderSize});
  if (slice.piece_count == 0) {
    iov.push_back(iovec{slice.local, slice.length});
  } else {
    for (uint32_t k = 0; k < slice.piece_count; ++k)
      iov.push_back(iovec{slice.pieces[k].addr, slice.pieces[k].length});
  }
  Status st = send_iov(fd_, iov.data(), static_cast<int>(iov.size()), config_.max_stalls());
  slice.batch->end_copy();
  return st;
}

void TcpConnection::recv_loop() {
  char raw[kHeaderSize];
  while (!dead_.load()) {
    bool waiting_for_reply;
    {
      std::lock_guard<std::mutex> lock(outstanding_mu_);
      waiting_for_reply = !outstanding_.empty();
    }
    if (waiting_for_reply) spin_until_readable(fd_, config_.busy_poll_us);
    Status st = recv_exact(fd_, raw, kHeaderSize, [&](size_t got) {
      if (dead_.load()) return false;
      bool idle;
      {
        std::lock_guard<std::mutex> lock(outstanding_mu_);
        idle = outstanding_.empty();
      }
      if (idle && got == 0) return true;
      return now_ns() - last_progress_ns_.load() < int64_t{config_.io_timeout_ms} * 1000000;
    });
    if (st.ok()) {
      auto header = decode_header(raw, kHeaderSize, config_.max_payload);
      if (header.ok() && is_goodbye(header.value())) {
        closed_idle_.store(carries_nothing());  // (else what it carries is lost as on any dead connection)
        fail(Status(Code::kClosed, "the peer closed the connection while it was idle"));
        return;
      }
      st = header.ok() ? receive_reply(header.value()) : header.status();
    }
    if (!st.ok()) {
      if (st.code() == Code::kTimedOut) {
        st = Status(Code::kTimedOut, "peer stopped answering");
        unresponsive_.store(true);
      }
      fail(st);
      return;
    }
    last_progress_ns_.store(now_ns());
  }
}

bool TcpConnection::carries_nothing() {
  std::lock_guard<std::mutex> queued(queue_mu_);
  std::lock_guard<std::mutex> outstanding(outstanding_mu_);
  return queue_.empty() && outstanding_.empty();
}

Status TcpConnection::receive_into(const Slice& slice, bool* landed) {
  const Piece one{slice.local, slice.length};
  const Piece* pieces = slice.piece_count == 0 ? &one : slice.pieces;
  const bool hashing = slice.digest && xxh3::loaded();
  // Hashed as it lands, while in cache; unhashed, the bound on what one recv moves under the copy guard.
  const uint64_t chunk = hashing ? 64 << 10 : 512 << 10;
  thread_local std::vector<char> scratch(1 << 16);
  // Made only when hashing: a stream calls into XXH3, which a C++ caller may not have loaded (the read is
  // then unchecked and its caller verifies, engine.h's kReadUnchecked).
  std::optional<xxh3::Stream> hash;
  if (hashing) hash.emplace();
  bool live = true;  // the request still owns the memory; once over, the rest is drained
  uint32_t k = 0;
  uint64_t at = 0;  // into pieces[k]
  int stalled = 0;
  for (uint64_t left = slice.length; left > 0;) {
    for (; live && at == pieces[k].length; ++k) at = 0;
    char* dst = live ? pieces[k].addr + at : scratch.data();
    const uint64_t want =
        live ? std::min(chunk, pieces[k].length - at) : std::min<uint64_t>(left, scratch.size());
    if (live && !begin_copy_in_time(slice)) {
      live = false;
      continue;
    }
    // The guard is held only while bytes already here are copied, never while the peer is waited for:
    // a request that ends (its deadline) is fenced off within one such recv.
    const ssize_t got = recv(fd_, dst, want, MSG_DONTWAIT);
    if (live) {
      if (got > 0 && hashing) hash->update(dst, static_cast<size_t>(got));
      slice.batch->end_copy();
    }
    if (got > 0) {
      left -= static_cast<uint64_t>(got);
      at += live ? static_cast<uint64_t>(got) : 0;
      stalled = 0;
      continue;
    }
    if (got == 0) return Status(Code::kConnectionFailed, "connection closed by peer");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno_status(Code::kConnectionFailed, "recv");
    if (!wait_readable(fd_, config_.poll_ms) && ++stalled >= config_.max_stalls()) {
      return Status(Code::kTimedOut, "peer stopped sending");
    }
  }
  if (live && hashing) slice.batch->set_digest(slice.request, hash->digest());
  *landed = live;
  return Status::OK();
}

Status TcpConnection::receive_reply(const FrameHeader& h) {
  Slice slice;
  {
    std::lock_guard<std::mutex> lock(outstanding_mu_);
    auto it = outstanding_.find(h.request_id);
    if (it == outstanding_.end()) return Status(Code::kProtocolError, "reply to an unknown request");
    slice = std::move(it->second);
    outstanding_.erase(it);
  }
  Status result;
  Status stream;  // a failure here breaks the connection, not only this slice
  switch (h.opcode) {
    case Opcode::kError: result = Status(static_cast<Code>(h.status), "refused by peer"); break;
    case Opcode::kWriteAck:
      if (slice.op != TransferOp::kWrite) stream = Status(Code::kProtocolError, "write ack for a read");
      break;
    case Opcode::kReadData:
      if (slice.op != TransferOp::kRead || h.length != slice.length) {
        stream = Status(Code::kProtocolError, "read data does not match the request");
      } else {
        bool landed = false;
        stream = receive_into(slice, &landed);
        if (!landed) {  // (drained: what came is not in its memory, and the request is over for its caller)
          result = Status(Code::kTimedOut, "request over (or past its deadline) as its bytes came");
        }
      }
      break;
    default: stream = Status(Code::kProtocolError, "unexpected reply opcode");
  }
  if (stream.ok()) {
    finish(slice, result);
  } else {
    std::vector<Slice> lost;
    lost.push_back(std::move(slice));
    lose(std::move(lost), stream);
  }
  return stream;
}

}  // namespace kvs::tcp
