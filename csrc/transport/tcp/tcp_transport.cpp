#include "transport/tcp/tcp_transport.h"

#include <sys/socket.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/net.h"
#include "transport/tcp/tcp_server.h"

namespace kvs::tcp {
namespace {

constexpr uint64_t kInlineWriteBytes = 256 << 10;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

Status recv_payload(int fd, char* dst, uint64_t length, const TcpConfig& config) {
  int stalled = 0;
  return recv_exact(fd, dst, length, [&](size_t) { return ++stalled < config.max_stalls(); });
}

}  // namespace

StatusOr<int> open_connection(const std::string& host, uint16_t port, uint64_t engine_id,
                              const TcpConfig& config) {
  auto fd = tcp_connect(host, port, config.connect_timeout_ms);
  if (!fd.ok()) return fd.status();
  tune_data_socket(fd.value(), config.poll_ms, config.socket_buffer);
  char raw[kHeaderSize];
  FrameHeader hello;
  hello.opcode = Opcode::kHello;
  encode_header(hello, raw);
  Status st = send_all(fd.value(), raw, kHeaderSize, config.max_stalls());
  int stalled = 0;
  auto keep_waiting = [&](size_t) { return ++stalled < config.max_stalls(); };
  if (st.ok()) st = recv_exact(fd.value(), raw, kHeaderSize, keep_waiting);
  if (st.ok()) {
    auto header = decode_header(raw, kHeaderSize, config.max_payload);
    uint64_t peer_id = 0;
    if (!header.ok()) {
      st = header.status();
    } else if (header.value().opcode != Opcode::kHelloAck || header.value().length != sizeof(peer_id)) {
      st = Status(Code::kProtocolError, "peer did not answer HELLO with its engine id");
    } else {
      st = recv_exact(fd.value(), &peer_id, sizeof(peer_id), keep_waiting);
      if (st.ok() && peer_id != engine_id) {
        st = Status(Code::kConnectionFailed, "peer " + host + ":" + std::to_string(port) + " restarted");
      }
    }
  }
  if (!st.ok()) {
    close(fd.value());
    return st;
  }
  return fd.value();
}

TcpConnection::TcpConnection(int fd, const TcpConfig& config) : fd_(fd), config_(config) {
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
      for (auto& s : slices) dispatch(std::move(s));
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
  for (auto& s : slices) finish(s, Status(Code::kConnectionFailed, "connection is down"));
  queue_cv_.notify_one();
}

void TcpConnection::finish(const Slice& slice, const Status& status) {
  load_bytes_.fetch_sub(slice.length);
  slice.done(status);
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
  shutdown(fd_, SHUT_RDWR);
  queue_cv_.notify_all();
  for (auto& s : queued) finish(s, status);
  for (auto& [id, s] : outstanding) finish(s, status);
}

void TcpConnection::send_loop() {
  for (;;) {
    Slice slice;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return dead_.load() || !queue_.empty(); });
      if (dead_.load()) return;
      slice = std::move(queue_.front());
      queue_.pop_front();
    }
    std::lock_guard<std::mutex> send_lock(send_mu_);
    dispatch(std::move(slice));
  }
}

void TcpConnection::dispatch(Slice&& slice) {
  if (!slice.batch->pending(slice.request)) {
    return finish(slice, Status(Code::kTimedOut, "request already over"));
  }
  uint64_t request_id;
  {
    std::lock_guard<std::mutex> lock(outstanding_mu_);
    if (dead_.load()) return finish(slice, Status(Code::kConnectionFailed, "connection is down"));
    request_id = next_request_id_++;
    if (outstanding_.empty()) last_progress_ns_.store(now_ns());
    outstanding_.emplace(request_id, slice);
  }
  Status st = send_slice(slice, request_id);
  if (!st.ok()) fail(st);
}

Status TcpConnection::send_slice(const Slice& slice, uint64_t request_id) {
  FrameHeader h;
  h.opcode = slice.op == TransferOp::kRead ? Opcode::kRead : Opcode::kWrite;
  h.request_id = request_id;
  h.region_id = slice.region_id;
  h.key = slice.key;
  h.offset = slice.offset;
  h.length = slice.length;
  h.fence_slot = slice.fence_slot;
  h.fence_gen = slice.fence_gen;
  char raw[kHeaderSize];
  encode_header(h, raw);
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
  iovec iov[2] = {{raw, kHeaderSize}, {slice.local, slice.length}};
  Status st = send_iov(fd_, iov, 2, config_.max_stalls());
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
      } else if (slice.batch->begin_copy(slice.request)) {
        stream = recv_payload(fd_, slice.local, h.length, config_);
        slice.batch->end_copy();
      } else {
        thread_local std::vector<char> scratch(1 << 16);
        for (uint64_t left = h.length; left > 0 && stream.ok();) {
          const size_t n = std::min<uint64_t>(left, scratch.size());
          stream = recv_payload(fd_, scratch.data(), n, config_);
          left -= n;
        }
      }
      break;
    default: stream = Status(Code::kProtocolError, "unexpected reply opcode");
  }
  finish(slice, stream.ok() ? result : stream);
  return stream;
}

TcpChannel::TcpChannel(std::vector<std::unique_ptr<TcpConnection>> connections)
    : conns_(std::move(connections)) {}

bool TcpChannel::healthy() const {
  bool alive = false;
  for (const auto& c : conns_) {
    if (c->unresponsive()) return false;  // the other connections reach the same stopped peer
    alive |= !c->dead();
  }
  return alive;
}

void TcpChannel::submit(std::vector<Slice>&& slices) {
  // Spread slices over live connections, each to the least loaded one.
  std::vector<std::vector<Slice>> per_conn(conns_.size());
  std::vector<uint64_t> load(conns_.size());
  for (size_t i = 0; i < conns_.size(); ++i) load[i] = conns_[i]->dead() ? UINT64_MAX : conns_[i]->load();
  for (auto& s : slices) {
    size_t best = 0;
    for (size_t i = 1; i < conns_.size(); ++i) {
      if (load[i] < load[best]) best = i;
    }
    if (load[best] != UINT64_MAX) load[best] += s.length;
    per_conn[best].push_back(std::move(s));
  }
  for (size_t i = 0; i < conns_.size(); ++i) {
    if (per_conn[i].empty()) continue;
    uint64_t bytes = 0;
    for (auto& s : per_conn[i]) bytes += s.length;
    conns_[i]->enqueue(std::move(per_conn[i]), bytes);
  }
}

std::vector<OptionSpec> TcpConfig::specs() {
  const int64_t gib = int64_t{1} << 30;
  return {
      {"connections", OptionKind::kInt, 2, 1, 64,
       "Data connections per peer; slices are spread over them (2 reach ~1.5x one on loopback)."},
      {"slice_size", OptionKind::kSize, 1 << 20, 4096, gib,
       "Requests are cut into slices of at most this many bytes, each moved as one frame."},
      {"max_payload", OptionKind::kSize, 64 << 20, 4096, gib,
       "Largest frame payload accepted from a peer; larger frames close the connection."},
      {"io_timeout", OptionKind::kDuration, 5000, 1, 3600000,
       "Without progress for this long, a busy connection is declared dead."},
      {"connect_timeout", OptionKind::kDuration, 3000, 1, 600000, "How long to wait for a peer to accept."},
      {"socket_buffer", OptionKind::kSize, 4 << 20, 0, gib,
       "SO_SNDBUF/SO_RCVBUF of data connections (capped by net.core.[rw]mem_max); 0 keeps the kernel's "
       "autotuning. 4 MiB lifts loopback throughput by ~15-20% on the reference machine."},
      {"busy_poll_us", OptionKind::kInt, 50, 0, 10000,
       "Microseconds to spin for a due reply or request before sleeping (a sleeping thread takes tens of "
       "microseconds to wake on a VM)."},
  };
}

TcpConfig TcpConfig::from(const Options& options) {
  TcpConfig c;
  c.connections = static_cast<int>(options.get("connections"));
  c.slice_size = static_cast<uint64_t>(options.get("slice_size"));
  c.max_payload = static_cast<uint64_t>(options.get("max_payload"));
  c.io_timeout_ms = static_cast<int>(options.get("io_timeout"));
  c.connect_timeout_ms = static_cast<int>(options.get("connect_timeout"));
  c.socket_buffer = static_cast<int>(options.get("socket_buffer"));
  c.busy_poll_us = static_cast<int>(options.get("busy_poll_us"));
  c.poll_ms = std::max(1, std::min(100, c.io_timeout_ms / 4));
  return c;
}

namespace {

// Section: u8 version, u16 port, string host.
constexpr uint8_t kSectionVersion = 1;

StatusOr<HostPort> decode_section(const std::vector<char>* section) {
  if (section == nullptr) return Status(Code::kNotSupported, "peer does not offer tcp");
  ByteReader r(section->data(), section->size());
  if (r.get<uint8_t>() != kSectionVersion) {
    return Status(Code::kProtocolError, "peer speaks another version of the tcp transport");
  }
  HostPort hp;
  hp.port = r.get<uint16_t>();
  hp.host = r.get_string(256);
  if (!r.ok() || !r.at_end() || hp.host.empty() || hp.port == 0) {
    return Status(Code::kProtocolError, "bad tcp section");
  }
  return hp;
}

class TcpTransport : public Transport {
 public:
  TcpTransport(const TransportContext& context, const Options& options)
      : context_(context), config_(TcpConfig::from(options)) {}
  ~TcpTransport() override { stop(); }

  Status start() override {
    server_ = std::make_unique<TcpServer>(context_.registry.get(), context_.engine_id, config_);
    return server_->start(context_.listen_host, 0);
  }
  void stop() override {
    if (server_) server_->stop();
  }
  std::vector<char> descriptor_section() const override {
    if (!server_) return {};
    ByteWriter w;
    w.put<uint8_t>(kSectionVersion);
    w.put<uint16_t>(server_->port());
    w.put_string(context_.listen_host);
    return std::move(w.bytes());
  }
  std::map<std::string, std::string> describe_section(const std::vector<char>& section) const override {
    auto hp = decode_section(&section);
    if (!hp.ok()) return {{"error", hp.status().message()}};
    const bool v6 = hp.value().host.find(':') != std::string::npos;
    const std::string host = v6 ? "[" + hp.value().host + "]" : hp.value().host;
    return {{"address", host + ":" + std::to_string(hp.value().port)}};
  }

  uint64_t slice_size() const override { return config_.slice_size; }
  bool reachable(const EngineDescriptor& peer) const override {
    return decode_section(peer.section("tcp")).ok();
  }
  StatusOr<std::shared_ptr<Channel>> connect(const EngineDescriptor& peer) override {
    auto hp = decode_section(peer.section("tcp"));
    if (!hp.ok()) return hp.status();
    std::vector<std::unique_ptr<TcpConnection>> conns;
    for (int i = 0; i < std::max(1, config_.connections); ++i) {
      auto fd = open_connection(hp.value().host, hp.value().port, peer.engine_id, config_);
      if (!fd.ok()) return fd.status();
      conns.push_back(std::make_unique<TcpConnection>(fd.value(), config_));
    }
    return std::shared_ptr<Channel>(std::make_shared<TcpChannel>(std::move(conns)));
  }

 private:
  TransportContext context_;
  TcpConfig config_;
  std::unique_ptr<TcpServer> server_;
};

}  // namespace
}  // namespace kvs::tcp

namespace kvs {

const TransportEntry& tcp_transport_entry() {
  static const TransportEntry entry{
      "tcp",
      // Serves file regions (read) and GPU regions (staged through host memory) besides host memory.
      Capabilities{100, kReachSameProcess | kReachSameHost | kReachRemote, kAllHostKinds,
                   kAllHostKinds | kind_bit(MemoryKind::kFile) | kind_bit(MemoryKind::kGpu)},
      tcp::TcpConfig::specs(),
      [](const TransportContext& context, const Options& options) -> std::unique_ptr<Transport> {
        return std::make_unique<tcp::TcpTransport>(context, options);
      },
  };
  return entry;
}

}  // namespace kvs
