#include "engine/engine.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "transport/local/local_transport.h"
#include "transport/shm/shm_server.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_server.h"
#include "transport/tcp/tcp_transport.h"

namespace kvs {

struct Engine::Segment {
  std::string name;
  std::string protocol;
  std::mutex mu;  // guards the fields below
  SegmentDescriptor descriptor;
  Transport* transport = nullptr;
  std::shared_ptr<Channel> channel;
  // The peer restarted: its region ids now name other memory, so this handle never reconnects.
  std::atomic<bool> stale{false};
};

Engine::Engine(EngineConfig config)
    : config_(std::move(config)),
      id_(random_u64()),
      host_id_(local_host_id()),
      registry_(std::make_shared<MemoryRegistry>()),
      pool_(std::make_unique<CopyPool>(std::max(1, config_.copy_threads))) {
  registry_->set_peer_pin_timeout_ms(config_.tcp.io_timeout_ms);
  transports_.push_back(std::make_unique<LocalTransport>(pool_.get(), config_.copy_slice_size));
  transports_.push_back(std::make_unique<shm::ShmTransport>(pool_.get(), host_id_, config_.copy_slice_size));
  transports_.push_back(std::make_unique<tcp::TcpTransport>(config_.tcp));
  std::sort(transports_.begin(), transports_.end(),
            [](const auto& a, const auto& b) { return a->cost() < b->cost(); });
}

Engine::~Engine() {
  stop();
  pool_.reset();
}

Status Engine::start() {
  if (running_.load()) return Status::OK();
  if (config_.protocol != "auto") {
    bool known = false;
    for (auto& t : transports_) known |= config_.protocol == t->name();
    if (!known) return Status(Code::kInvalidArgument, "unknown protocol '" + config_.protocol + "'");
  }
  tcp_server_ = std::make_unique<tcp::TcpServer>(
      registry_.get(), [this] { return encode_descriptor(descriptor()); }, config_.tcp);
  Status st = tcp_server_->start(config_.host, config_.port);
  if (!st.ok()) return st;
  const bool v6 = config_.host.find(':') != std::string::npos;
  name_ = (v6 ? "[" + config_.host + "]" : config_.host) + ":" + std::to_string(tcp_server_->port());
  if (config_.enable_shm) {
    char sock[64];
    std::snprintf(sock, sizeof(sock), "kvstore-%016llx", static_cast<unsigned long long>(id_));
    shm_server_ = std::make_unique<shm::ShmServer>(registry_.get());
    st = shm_server_->start(sock);
    if (!st.ok()) {
      tcp_server_->stop();
      return st;
    }
  }
  local_directory_add(id_, registry_);
  running_.store(true);
  return Status::OK();
}

void Engine::stop() {
  if (!running_.exchange(false)) return;
  local_directory_remove(id_);
  tcp_server_->stop();
  if (shm_server_) shm_server_->stop();
  {
    // Dropping the channels fails whatever they still carry.
    std::lock_guard<std::mutex> lock(segments_mu_);
    segments_.clear();
  }
  while (pool_->run_one()) {
  }
  registry_->remove_all();
}

SegmentDescriptor Engine::descriptor() const {
  SegmentDescriptor d;
  d.engine_id = id_;
  d.pid = static_cast<uint32_t>(getpid());
  d.host_id = host_id_;
  d.name = name_;
  d.transports = kTransportLocal | kTransportTcp;
  if (shm_server_) {
    char sock[64];
    std::snprintf(sock, sizeof(sock), "kvstore-%016llx", static_cast<unsigned long long>(id_));
    d.shm_socket = sock;
    d.transports |= kTransportShm;
  }
  d.regions = registry_->exported();
  return d;
}

StatusOr<Transport*> Engine::choose_transport(const SegmentDescriptor& peer,
                                              const std::string& protocol) const {
  for (const auto& t : transports_) {
    if (protocol != "auto" && protocol != t->name()) continue;
    if (t->reachable(peer)) return t.get();
  }
  if (protocol == "auto") return Status(Code::kNotSupported, "no transport reaches " + peer.name);
  return Status(Code::kNotSupported, "protocol '" + protocol + "' cannot reach " + peer.name);
}

Status Engine::connect_segment(Segment& seg, bool refresh_descriptor) {
  if (refresh_descriptor || seg.descriptor.engine_id == 0) {
    if (seg.name == name_) {
      seg.descriptor = descriptor();
    } else {
      auto d = tcp::handshake(seg.name, config_.tcp, nullptr);
      if (!d.ok()) return d.status();
      if (seg.descriptor.engine_id != 0 && d.value().engine_id != seg.descriptor.engine_id) {
        seg.stale.store(true);
        seg.channel.reset();
      }
      if (seg.stale.load()) {
        return Status(Code::kConnectionFailed, "peer " + seg.name + " restarted; open the segment again");
      }
      seg.descriptor = std::move(d.value());
    }
  }
  auto transport = choose_transport(seg.descriptor, seg.protocol);
  if (!transport.ok()) return transport.status();
  auto channel = transport.value()->connect(seg.descriptor);
  if (!channel.ok()) return channel.status();
  seg.transport = transport.value();
  seg.channel = std::move(channel.value());
  return Status::OK();
}

StatusOr<uint32_t> Engine::open_segment(const std::string& name, const std::string& protocol) {
  if (!running_.load()) return Status(Code::kClosed, "engine is not running");
  const std::string proto = protocol.empty() ? config_.protocol : protocol;
  {
    std::lock_guard<std::mutex> lock(segments_mu_);
    for (size_t i = 0; i < segments_.size(); ++i) {
      const auto& s = segments_[i];
      if (s->name == name && s->protocol == proto && !s->stale.load()) return static_cast<uint32_t>(i);
    }
  }
  auto seg = std::make_shared<Segment>();
  seg->name = name;
  seg->protocol = proto;
  {
    std::lock_guard<std::mutex> lock(seg->mu);
    Status st = connect_segment(*seg, true);
    if (!st.ok()) return st;
  }
  std::lock_guard<std::mutex> lock(segments_mu_);
  segments_.push_back(seg);
  return static_cast<uint32_t>(segments_.size() - 1);
}

StatusOr<std::shared_ptr<Engine::Segment>> Engine::segment(uint32_t handle) {
  std::lock_guard<std::mutex> lock(segments_mu_);
  if (handle >= segments_.size()) return Status(Code::kInvalidArgument, "unknown segment handle");
  return segments_[handle];
}

Status Engine::refresh_segment(uint32_t handle) {
  auto seg = segment(handle);
  if (!seg.ok()) return seg.status();
  std::lock_guard<std::mutex> lock(seg.value()->mu);
  return connect_segment(*seg.value(), true);
}

StatusOr<SegmentDescriptor> Engine::segment_descriptor(uint32_t handle) {
  auto seg = segment(handle);
  if (!seg.ok()) return seg.status();
  std::lock_guard<std::mutex> lock(seg.value()->mu);
  return seg.value()->descriptor;
}

StatusOr<std::string> Engine::segment_transport(uint32_t handle) {
  auto seg = segment(handle);
  if (!seg.ok()) return seg.status();
  std::lock_guard<std::mutex> lock(seg.value()->mu);
  return std::string(seg.value()->transport->name());
}

namespace {

struct Target {
  std::shared_ptr<Channel> channel;
  uint64_t slice_size = 0;
  SegmentDescriptor descriptor;
  Status error;
  std::vector<Slice> slices;
};

}  // namespace

std::shared_ptr<Batch> Engine::submit(const BatchView& b, int64_t timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
  auto batch = std::make_shared<Batch>(b.count, deadline);
  if (!running_.load()) {
    for (size_t i = 0; i < b.count; ++i) batch->reject(i, Status(Code::kClosed, "engine is not running"));
    return batch;
  }
  // Resolve each segment once per batch: reconnect broken links, refresh for unknown regions.
  std::unordered_map<uint32_t, Target> targets;
  for (size_t i = 0; i < b.count; ++i) {
    auto [it, added] = targets.try_emplace(b.segments[i]);
    if (!added) continue;
    Target& t = it->second;
    auto seg = segment(b.segments[i]);
    if (!seg.ok()) {
      t.error = seg.status();
      continue;
    }
    bool unknown_region = false;
    std::lock_guard<std::mutex> lock(seg.value()->mu);
    for (size_t j = i; j < b.count && !unknown_region; ++j) {
      unknown_region =
          b.segments[j] == b.segments[i] && !seg.value()->descriptor.find_region(b.region_ids[j]);
    }
    if (unknown_region || !seg.value()->channel || !seg.value()->channel->healthy()) {
      t.error = connect_segment(*seg.value(), true);
    }
    t.channel = seg.value()->channel;
    t.slice_size = seg.value()->transport ? seg.value()->transport->slice_size() : 0;
    t.descriptor = seg.value()->descriptor;
  }
  for (size_t i = 0; i < b.count; ++i) {
    Target& t = targets[b.segments[i]];
    if (!t.error.ok()) {
      batch->reject(i, t.error);
      continue;
    }
    if (b.ops[i] > static_cast<uint8_t>(TransferOp::kWrite) || b.lengths[i] == 0) {
      batch->reject(i, Status(Code::kInvalidArgument, "bad op or empty length"));
      continue;
    }
    const RegionInfo* region = t.descriptor.find_region(b.region_ids[i]);
    if (region == nullptr) {
      batch->reject(i, Status(Code::kNotFound, "peer has no such region"));
      continue;
    }
    if (!in_bounds(b.offsets[i], b.lengths[i], region->length)) {
      batch->reject(i, Status(Code::kOutOfRange, "request outside the peer region"));
      continue;
    }
    auto pin = registry_->pin_local(b.local_addrs[i], b.lengths[i]);
    if (!pin.ok()) {
      batch->reject(i, pin.status());
      continue;
    }
    batch->hold_pin(std::move(pin.value()));
    const uint64_t step = std::max<uint64_t>(t.slice_size, 4096);
    batch->set_slices(i, (b.lengths[i] + step - 1) / step);
    for (uint64_t done = 0; done < b.lengths[i]; done += step) {
      Slice s;
      s.batch = batch;
      s.request = static_cast<uint32_t>(i);
      s.op = static_cast<TransferOp>(b.ops[i]);
      s.local = reinterpret_cast<char*>(b.local_addrs[i] + done);
      s.region_id = region->id;
      s.key = region->key;
      s.offset = b.offsets[i] + done;
      s.length = std::min(step, b.lengths[i] - done);
      t.slices.push_back(std::move(s));
    }
  }
  for (auto& [handle, t] : targets) {
    if (!t.slices.empty()) t.channel->submit(std::move(t.slices));
  }
  return batch;
}

bool Engine::wait(Batch& batch, int64_t timeout_ms, bool help) {
  while (help && !batch.done() && pool_->run_one()) {
  }
  // Replies often land within tens of microseconds, sooner than a sleeping thread wakes: spin briefly.
  const auto spin = std::chrono::microseconds(timeout_ms < 0 ? 40 : std::min<int64_t>(40, timeout_ms * 1000));
  const auto spin_until = Clock::now() + spin;
  while (Clock::now() < spin_until) {
    if (batch.done()) return true;
  }
  return batch.wait(timeout_ms);
}

}  // namespace kvs
