#include "transport/tcp/tcp_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/net.h"
#include "cuda/driver.h"

namespace kvs::tcp {

// A request reader's buffer: 64 headers a recv, and little of a write's payload copied through it (the
// rest goes straight into the region).
constexpr size_t kReaderBytes = 4 << 10;

TcpServer::TcpServer(MemoryRegistry* registry, uint64_t engine_id, std::string secret, TcpConfig config)
    : registry_(registry),
      engine_id_(engine_id),
      secret_(std::move(secret)),
      config_(config),
      acceptor_(
          [this](int fd, const std::atomic<bool>& stopping, ConnState& state) { serve(fd, stopping, state); },
          AcceptorConfig{config.poll_ms, config.socket_buffer, config.max_connections,
                         config.max_connections_per_peer, config.prove_ms, config.idle_ms,
                         config.evict_idle_ms}) {}

void TcpServer::serve(int fd, const std::atomic<bool>& stopping, ConnState& state) {
  auto session = admit(fd, stopping, state);
  if (!session.ok()) {
    const Code code = session.status().code();
    if (code == Code::kPermissionDenied || code == Code::kProtocolError) {
      acceptor_.log_refusal("a data connection", fd, session.status().message());
    }
    return;
  }
  state.prove();  // (authenticated: a peer of this cluster, not an idle, half-open or foreign socket)
  const SessionKeys keys(session.value().key);
  uint64_t writer = 0;  // (the session key's first bytes: the session's, and no other's)
  std::memcpy(&writer, session.value().key.data(), sizeof(writer));
  const Requester r{fd, keys, writer == 0 ? 1 : writer, peer_of(fd).host, state, stopping};
  SocketReader in(fd, kReaderBytes);  // (a batch's request headers arrive together: one recv for many)
  ReadReplies replies;
  for (;;) {
    // Replies go out before waiting for more (never held while idle): they are held only while the
    // next request's header is already here (a run of requests answered in one write).
    if (in.buffered() < kHeaderSize && in.buffered() + readable_bytes(fd) < kHeaderSize &&
        !send_replies(fd, replies).ok()) {
      break;
    }
    // Requests come in bursts: right after serving one, the next is often a few microseconds away.
    if (in.buffered() == 0) spin_until_readable(fd, config_.busy_poll_us);
    // Idle while it waits for a request (the acceptor may cut it then), busy from its header on.
    const bool waits = in.buffered() < kHeaderSize;
    if (waits) state.idle();
    auto header = receive_header(fd, in, stopping);
    if (!header.ok()) {
      // Cut while idle: a goodbye tells the peer nothing it sent was lost (it opens another when it
      // needs one), unlike a peer that died.
      if (state.closing()) (void)reply_error(fd, FrameHeader{}, Status(Code::kClosed, "idle"));
      break;
    }
    if (waits) state.busy();
    const FrameHeader& h = header.value();
    if (h.opcode == Opcode::kRead) {
      Status refused;
      if (add_reply(r, h, replies, &refused)) {
        if (replies.count == ReadReplies::kMaxRun && !send_replies(fd, replies).ok()) break;
        continue;
      }
      if (!refused.ok()) {  // (its fence: answered after what came before)
        if (!send_replies(fd, replies).ok() || !reply_error(fd, h, refused).ok()) break;
        continue;
      }
    }
    if (h.opcode == Opcode::kWrite) {
      if (!receive_write(r, in, h, replies).ok()) break;
      continue;
    }
    if (!send_replies(fd, replies).ok()) break;  // (in order: what came before first)
    if (!handle(r, h, replies).ok()) break;
  }
}

std::unique_ptr<FenceEntry> TcpServer::enter_fence(const Requester& r, const RegionPin& pin,
                                                   const FrameHeader& h, ReadReplies& replies) {
  const bool write = h.opcode == Opcode::kWrite;
  auto fence = std::make_unique<FenceEntry>(pin.fence(), h.fence_slot, h.fence_gen, h.offset, h.length, write,
                                            /*wait_ms=*/0, r.writer);
  if (fence->status().code() != Code::kStale) return fence;
  // Not announced (yet): the wait for it must not hold back what is queued (nor its fence entries).
  fence.reset();
  if (!send_replies(r.fd, replies).ok()) return nullptr;
  return wait_fence(r, pin, h);
}

std::unique_ptr<FenceEntry> TcpServer::wait_fence(const Requester& r, const RegionPin& pin,
                                                  const FrameHeader& h) {
  const bool write = h.opcode == Opcode::kWrite;
  bool may_wait = false;
  {
    std::lock_guard<std::mutex> lock(waits_mu_);
    size_t& waiting = waits_[r.peer];
    may_wait = waiting < config_.max_waits_per_peer;
    waiting += may_wait;
    if (waiting == 0) waits_.erase(r.peer);
  }
  const int wait_ms = may_wait ? kAnnounceWaitMs : 0;
  auto abandon = [&r] { return r.stopping.load() || r.state.closing(); };
  r.state.idle();  // (an announcement, not bytes: a newcomer may take its place; it is told so)
  auto fence = std::make_unique<FenceEntry>(pin.fence(), h.fence_slot, h.fence_gen, h.offset, h.length, write,
                                            wait_ms, r.writer, abandon);
  r.state.busy();
  if (may_wait) {
    std::lock_guard<std::mutex> lock(waits_mu_);
    if (--waits_[r.peer] == 0) waits_.erase(r.peer);
  }
  return fence;
}

bool TcpServer::add_reply(const Requester& r, const FrameHeader& h, ReadReplies& replies, Status* refused) {
  auto pin = registry_->pin_remote(h.region_id, h.key, h.offset, h.length, r.keys);
  if (!pin.ok() || pin.value().file() != nullptr || pin.value().info().location.kind == MemoryKind::kGpu) {
    return false;  // (refused, a file or GPU region: handle() answers it alone)
  }
  auto fence = enter_fence(r, pin.value(), h, replies);
  if (fence == nullptr) {
    *refused = Status(Code::kConnectionFailed, "the peer stopped reading");
    return false;
  }
  if (!fence->status().ok()) {
    *refused = fence->status();
    return false;
  }
  FrameHeader reply;
  reply.request_id = h.request_id;
  reply.opcode = Opcode::kReadData;
  reply.length = h.length;
  char* raw = replies.headers.data() + replies.count * kHeaderSize;
  encode_header(reply, raw);
  replies.iov.push_back(iovec{raw, kHeaderSize});
  replies.iov.push_back(iovec{pin.value().at(h.offset), h.length});
  replies.pins.push_back(std::move(pin.value()));
  replies.fences.push_back(std::move(fence));
  replies.count += 1;
  return true;
}

Status TcpServer::send_replies(int fd, ReadReplies& replies) {
  if (replies.count == 0) return Status::OK();
  Status st = send_iov(fd, replies.iov.data(), static_cast<int>(replies.iov.size()), config_.max_stalls());
  replies.iov.clear();
  replies.fences.clear();  // (the bytes are on the socket: the allocation and region may go)
  replies.pins.clear();
  replies.count = 0;
  return st;
}

StatusOr<FrameHeader> TcpServer::receive_header(int fd, SocketReader& in, const std::atomic<bool>& stopping) {
  char raw[kHeaderSize];
  // Idle connections are fine; a frame started but not finished within the I/O timeout is not.
  int stalled = 0;
  Status st = in.read(raw, kHeaderSize, [&](size_t got) {
    return !stopping.load() && (got == 0 || ++stalled < config_.max_stalls());
  });
  if (!st.ok()) return st;
  auto header = decode_header(raw, kHeaderSize, config_.max_payload);
  if (!header.ok()) (void)reply_error(fd, FrameHeader{}, header.status());
  return header;
}

StatusOr<FrameHeader> TcpServer::receive_header(int fd, const std::atomic<bool>& stopping) {
  SocketReader exact(fd, kHeaderSize);  // (the handshake: nothing read past its frame)
  return receive_header(fd, exact, stopping);
}

StatusOr<Session> TcpServer::admit(int fd, const std::atomic<bool>& stopping, ConnState& state) {
  int stalled = 0;
  auto keep_waiting = [&](size_t) { return !stopping.load() && ++stalled < config_.max_stalls(); };
  auto hello = receive_header(fd, stopping);
  if (!hello.ok()) return hello.status();
  if (hello.value().opcode != Opcode::kHello) {
    const Status st(Code::kProtocolError,
                    "it did not open with HELLO (not a kvstore engine of this version)");
    (void)reply_error(fd, hello.value(), st);
    return st;
  }
  char body[kHelloPayload];
  Status st = recv_exact(fd, body, sizeof(body), keep_waiting);
  if (!st.ok()) return st;
  state.spoke();  // (a handshake in flight: a flood from its address does not take its place)
  const Session session = derive_session(secret_, std::string(body, kSessionIdSize));
  const std::string key = digest_bytes(session.key);
  const std::string theirs(body + kSessionIdSize, kNonceSize);
  const std::string ours = random_bytes(kNonceSize);
  const Digest mine = prove(key, "tcp target", theirs, ours);
  FrameHeader ack;
  ack.opcode = Opcode::kHelloAck;
  ack.length = kHelloAckPayload;
  char raw[kHeaderSize];
  encode_header(ack, raw);
  iovec iov[4] = {{raw, kHeaderSize},
                  {&engine_id_, sizeof(engine_id_)},
                  {const_cast<char*>(ours.data()), ours.size()},
                  {const_cast<uint8_t*>(mine.data()), mine.size()}};
  st = send_iov(fd, iov, 4, config_.max_stalls());
  if (!st.ok()) return st;
  auto proof = receive_header(fd, stopping);
  if (!proof.ok()) return proof.status();
  if (proof.value().opcode != Opcode::kProof) {
    st = Status(Code::kProtocolError, "it sent no PROOF after HELLO");
    (void)reply_error(fd, proof.value(), st);
    return st;
  }
  Digest answer{};
  st = recv_exact(fd, answer.data(), answer.size(), keep_waiting);
  if (!st.ok()) return st;
  if (!same_mac(answer, prove(key, "tcp initiator", ours, theirs))) {
    st = Status(Code::kPermissionDenied, "wrong session proof (not a peer of this cluster)");
    (void)reply_error(fd, proof.value(), st);
    return st;
  }
  FrameHeader admitted;
  admitted.opcode = Opcode::kProofAck;
  encode_header(admitted, raw);
  st = send_all(fd, raw, kHeaderSize, config_.max_stalls());
  if (!st.ok()) return st;
  return session;
}

Status TcpServer::reply_error(int fd, const FrameHeader& request, const Status& status) {
  FrameHeader reply;
  reply.opcode = Opcode::kError;
  reply.status = static_cast<int32_t>(status.code());
  reply.request_id = request.request_id;
  char raw[kHeaderSize];
  encode_header(reply, raw);
  return send_all(fd, raw, kHeaderSize, config_.max_stalls());
}

Status TcpServer::drain(SocketReader& in, uint64_t length) {
  thread_local std::vector<char> scratch(1 << 16);
  int stalled = 0;
  while (length > 0) {
    const size_t n = std::min<uint64_t>(length, scratch.size());
    Status st = in.read(scratch.data(), n, [&](size_t) { return ++stalled < config_.max_stalls(); });
    if (!st.ok()) return st;
    length -= n;
  }
  return Status::OK();
}

Status TcpServer::send_from_file(int fd, const FrameHeader& h, const DiskFile& file) {
  // Direct I/O reads whole aligned blocks: read the aligned span around the request, send its part.
  constexpr uint64_t kMaxFileRead = 64 << 20;
  const uint64_t a = file.alignment();
  const uint64_t start = h.offset / a * a;
  const uint64_t end = (h.offset + h.length + a - 1) / a * a;
  if (end - start > kMaxFileRead) {
    return reply_error(fd, h, Status(Code::kInvalidArgument, "a read of a file region is at most 64 MiB"));
  }
  thread_local std::unique_ptr<char, decltype(&std::free)> buffer(nullptr, &std::free);
  thread_local uint64_t capacity = 0;
  if (capacity < end - start) {
    void* p = nullptr;
    if (posix_memalign(&p, a, end - start) != 0) {
      return reply_error(fd, h, Status(Code::kNoMemory, "no memory to read a file region"));
    }
    buffer.reset(static_cast<char*>(p));
    capacity = end - start;
  }
  Status st = file.read_exact(buffer.get(), start, end - start);
  if (!st.ok()) return reply_error(fd, h, st);
  FrameHeader reply;
  reply.request_id = h.request_id;
  reply.opcode = Opcode::kReadData;
  reply.length = h.length;
  char raw[kHeaderSize];
  encode_header(reply, raw);
  iovec iov[2] = {{raw, kHeaderSize}, {buffer.get() + (h.offset - start), h.length}};
  return send_iov(fd, iov, 2, config_.max_stalls());
}

namespace {

// Host memory a GPU region's bytes pass through on their way to or from the socket (one per server thread).
char* device_bounce(uint64_t length) {
  thread_local std::vector<char> buffer;
  if (buffer.size() < length) buffer.resize(length);
  return buffer.data();
}

// Between a GPU region and host memory, one way or the other.
Status device_copy(const RegionPin& pin, uint64_t offset, char* host, uint64_t length, bool to_device) {
  const uint64_t gpu = reinterpret_cast<uint64_t>(pin.at(offset));
  const uint64_t cpu = reinterpret_cast<uint64_t>(host);
  const cuda::Copy copy{to_device ? gpu : cpu, to_device ? cpu : gpu, length};
  return cuda::copy(pin.info().location.device, &copy, 1);
}

}  // namespace

Status TcpServer::receive_write(const Requester& r, SocketReader& in, const FrameHeader& h,
                                ReadReplies& replies) {
  const int fd = r.fd;
  auto pin = registry_->pin_remote(h.region_id, h.key, h.offset, h.length, r.keys);
  Status refused = pin.ok() ? Status::OK() : pin.status();
  if (refused.ok() && pin.value().info().read_only) {
    refused = Status(Code::kPermissionDenied, "region is read-only");
  }
  std::unique_ptr<FenceEntry> fence;
  if (refused.ok()) {
    fence = enter_fence(r, pin.value(), h, replies);
    if (fence == nullptr) return Status(Code::kConnectionFailed, "the peer stopped reading");
    refused = fence->status();
  }
  if (!refused.ok()) {
    Status st = drain(in, h.length);  // keep the stream in step, then refuse (after what came before)
    if (st.ok()) st = send_replies(fd, replies);
    return st.ok() ? reply_error(fd, h, refused) : st;
  }
  const bool gpu = pin.value().info().location.kind == MemoryKind::kGpu;
  char* target = gpu ? device_bounce(h.length) : pin.value().at(h.offset);  // GPU: staged through host
  int stalled = 0;
  Status st = in.read(target, h.length, [&](size_t) { return ++stalled < config_.max_stalls(); });
  if (!st.ok()) {
    fence->failed();  // (its bytes are not all in: a resend, on another path too, writes them)
    return st;
  }
  if (gpu) {
    Status copied = device_copy(pin.value(), h.offset, target, h.length, /*to_device=*/true);
    if (!copied.ok()) {
      fence->failed();
      st = send_replies(fd, replies);
      return st.ok() ? reply_error(fd, h, copied) : st;
    }
  }
  fence.reset();
  pin.value().release();
  // The acknowledgement joins the held replies: a run of writes is answered in one write.
  FrameHeader ack;
  ack.request_id = h.request_id;
  ack.opcode = Opcode::kWriteAck;
  ack.length = 0;
  char* raw = replies.headers.data() + replies.count * kHeaderSize;
  encode_header(ack, raw);
  replies.iov.push_back(iovec{raw, kHeaderSize});
  replies.count += 1;
  return replies.count == ReadReplies::kMaxRun ? send_replies(fd, replies) : Status::OK();
}

Status TcpServer::handle(const Requester& r, const FrameHeader& h, ReadReplies& replies) {
  const int fd = r.fd;
  char raw[kHeaderSize];
  FrameHeader reply;
  reply.request_id = h.request_id;
  switch (h.opcode) {
    case Opcode::kRead: {
      auto pin = registry_->pin_remote(h.region_id, h.key, h.offset, h.length, r.keys);
      if (!pin.ok()) return reply_error(fd, h, pin.status());
      auto fence = enter_fence(r, pin.value(), h, replies);  // (replies: none queued by now)
      if (fence == nullptr) return Status(Code::kConnectionFailed, "the peer stopped reading");
      if (!fence->status().ok()) return reply_error(fd, h, fence->status());
      if (DiskFile* file = pin.value().file()) return send_from_file(fd, h, *file);
      char* source = pin.value().at(h.offset);
      if (pin.value().info().location.kind == MemoryKind::kGpu) {  // staged through host memory
        source = device_bounce(h.length);
        Status st = device_copy(pin.value(), h.offset, source, h.length, /*to_device=*/false);
        if (!st.ok()) return reply_error(fd, h, st);
      }
      reply.opcode = Opcode::kReadData;
      reply.length = h.length;
      encode_header(reply, raw);
      iovec iov[2] = {{raw, kHeaderSize}, {source, h.length}};
      return send_iov(fd, iov, 2, config_.max_stalls());
    }
    default: {
      // Replies and a second handshake are not requests: the peer is confused, stop talking to it.
      Status st(Code::kProtocolError, "unexpected opcode from initiator");
      (void)reply_error(fd, h, st);
      return st;
    }
  }
}

}  // namespace kvs::tcp
