#include "engine/engine.h"

#include <algorithm>
#include <unordered_map>

#include "engine/bootstrap.h"
#include "transport/registration.h"

namespace kvs {

// A request accepted by submit and not yet cut into slices (its local memory is pinned by the batch).
struct Engine::Waiting {
  std::shared_ptr<Batch> batch;
  uint32_t request = 0;
  TransferOp op = TransferOp::kRead;
  uint64_t local = 0;
  MemoryLocation local_location;
  uint64_t region_id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct Engine::Segment {
  std::string name;
  std::string transport_name;
  std::mutex mu;  // guards the fields below
  std::shared_ptr<const SegmentDescriptor> descriptor;
  Running* transport = nullptr;
  std::shared_ptr<Channel> channel;
  bool connecting = false;       // a reconnection runs on a connector thread
  std::vector<Waiting> waiting;  // requests it will send (or fail) when done
  // The peer restarted: its region ids now name other memory, so this handle never reconnects.
  bool stale = false;
};

Engine::Engine(EngineConfig config)
    : config_(std::move(config)),
      id_(random_u64()),
      host_id_(local_host_id()),
      registry_(std::make_shared<MemoryRegistry>()),
      pool_(std::make_unique<CopyPool>(std::max(1, config_.copy_threads))) {
  registry_->set_peer_pin_timeout_ms(config_.peer_pin_timeout_ms);
  for (const auto& [name, values] : config_.transport_options) {
    if (find_transport(name) == nullptr)
      config_error_ = Status(Code::kInvalidArgument, "unknown transport '" + name + "'");
  }
  TransportContext context{id_, host_id_, config_.host, registry_, pool_.get()};
  for (const TransportEntry* entry : registered_transports()) {
    auto it = config_.transport_options.find(entry->name);
    auto options =
        Options::make(entry->name, transport_options(*entry),
                      it == config_.transport_options.end() ? std::map<std::string, int64_t>{} : it->second);
    if (!options.ok()) {
      config_error_ = options.status();
      continue;
    }
    if (options.value().get("enabled") == 0) continue;
    transports_.push_back(Running{entry, entry->make(context, options.value())});
  }
  std::stable_sort(transports_.begin(), transports_.end(), [](const Running& a, const Running& b) {
    return a.entry->capabilities.cost < b.entry->capabilities.cost;
  });
}

Engine::~Engine() {
  stop();
  pool_.reset();
}

Status Engine::start() {
  if (running_.load()) return Status::OK();
  if (!config_error_.ok()) return config_error_;
  if (config_.transport != "auto") {
    bool known = false;
    for (auto& t : transports_) known |= config_.transport == t.entry->name;
    if (!known) {
      return Status(Code::kInvalidArgument, find_transport(config_.transport)
                                                ? "transport '" + config_.transport + "' is disabled"
                                                : "unknown transport '" + config_.transport + "'");
    }
  }
  bootstrap_ = std::make_unique<BootstrapServer>([this] { return encode_descriptor(descriptor()); },
                                                 config_.handshake_timeout_ms);
  Status st = bootstrap_->start(config_.host, config_.port);
  for (size_t i = 0; st.ok() && i < transports_.size(); ++i) {
    st = transports_[i].transport->start();
    if (!st.ok()) {
      for (size_t j = 0; j < i; ++j) transports_[j].transport->stop();
    }
  }
  if (!st.ok()) {
    bootstrap_->stop();
    return st;
  }
  const bool v6 = config_.host.find(':') != std::string::npos;
  name_ = (v6 ? "[" + config_.host + "]" : config_.host) + ":" + std::to_string(bootstrap_->port());
  running_.store(true);
  return Status::OK();
}

void Engine::stop() {
  if (!running_.exchange(false)) return;
  std::vector<Connector> connectors;
  {
    std::lock_guard<std::mutex> lock(connectors_mu_);
    connectors.swap(connectors_);
  }
  for (auto& c : connectors) c.thread.join();  // each is bounded by the handshake and connect timeouts
  bootstrap_->stop();
  for (auto& t : transports_) t.transport->stop();
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
  d.host_id = host_id_;
  d.name = name_;
  for (const auto& t : transports_) {
    auto section = t.transport->descriptor_section();
    if (!section.empty()) d.sections[t.entry->name] = std::move(section);
  }
  d.regions = registry_->exported();
  return d;
}

std::vector<std::string> Engine::transports() const {
  std::vector<std::string> names;
  for (const auto& t : transports_) names.emplace_back(t.entry->name);
  return names;
}

std::map<std::string, std::string> Engine::describe_section(const std::string& transport,
                                                            const std::vector<char>& section) const {
  for (const auto& t : transports_) {
    if (transport == t.entry->name) return t.transport->describe_section(section);
  }
  return {};
}

StatusOr<Engine::Running*> Engine::choose_transport(const SegmentDescriptor& peer,
                                                    const std::string& transport) const {
  for (const auto& t : transports_) {
    if (transport != "auto" && transport != t.entry->name) continue;
    if (t.transport->reachable(peer)) return const_cast<Running*>(&t);
  }
  if (transport == "auto") return Status(Code::kNotSupported, "no transport reaches " + peer.name);
  return Status(Code::kNotSupported, "transport '" + transport + "' cannot reach " + peer.name);
}

Status Engine::connect_segment(Segment& seg) {
  SegmentDescriptor fetched;
  if (seg.name == name_) {
    fetched = descriptor();
  } else {
    auto d = fetch_descriptor(seg.name, config_.handshake_timeout_ms);
    if (!d.ok()) return d.status();
    fetched = std::move(d.value());
  }
  {
    std::lock_guard<std::mutex> lock(seg.mu);
    if (seg.descriptor && fetched.engine_id != seg.descriptor->engine_id) {
      seg.stale = true;
      seg.channel.reset();
    }
    if (seg.stale)
      return Status(Code::kConnectionFailed, "peer " + seg.name + " restarted; open the segment again");
  }
  auto transport = choose_transport(fetched, seg.transport_name);
  if (!transport.ok()) return transport.status();
  auto channel = transport.value()->transport->connect(fetched);
  if (!channel.ok()) return channel.status();
  std::lock_guard<std::mutex> lock(seg.mu);
  seg.descriptor = std::make_shared<const SegmentDescriptor>(std::move(fetched));
  seg.transport = transport.value();
  seg.channel = std::move(channel.value());
  return Status::OK();
}

StatusOr<uint32_t> Engine::open_segment(const std::string& name, const std::string& transport) {
  if (!running_.load()) return Status(Code::kClosed, "engine is not running");
  const std::string chosen = transport.empty() ? config_.transport : transport;
  {
    std::lock_guard<std::mutex> lock(segments_mu_);
    for (size_t i = 0; i < segments_.size(); ++i) {
      const auto& s = segments_[i];
      std::lock_guard<std::mutex> seg_lock(s->mu);
      if (s->name == name && s->transport_name == chosen && !s->stale) return static_cast<uint32_t>(i);
    }
  }
  auto seg = std::make_shared<Segment>();
  seg->name = name;
  seg->transport_name = chosen;
  Status st = connect_segment(*seg);
  if (!st.ok()) return st;
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
  return connect_segment(*seg.value());
}

StatusOr<SegmentDescriptor> Engine::segment_descriptor(uint32_t handle) {
  auto seg = segment(handle);
  if (!seg.ok()) return seg.status();
  std::lock_guard<std::mutex> lock(seg.value()->mu);
  return *seg.value()->descriptor;
}

StatusOr<std::string> Engine::segment_transport(uint32_t handle) {
  auto seg = segment(handle);
  if (!seg.ok()) return seg.status();
  std::lock_guard<std::mutex> lock(seg.value()->mu);
  if (seg.value()->transport == nullptr) return Status(Code::kConnectionFailed, "segment is not connected");
  return std::string(seg.value()->transport->entry->name);
}

std::shared_ptr<Batch> Engine::submit(const BatchView& b, int64_t timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
  auto batch = std::make_shared<Batch>(b.count, deadline);
  if (!running_.load()) {
    for (size_t i = 0; i < b.count; ++i) batch->reject(i, Status(Code::kClosed, "engine is not running"));
    return batch;
  }
  std::unordered_map<uint32_t, std::vector<Waiting>> by_segment;
  for (size_t i = 0; i < b.count; ++i) {
    if (b.ops[i] > static_cast<uint8_t>(TransferOp::kWrite) || b.lengths[i] == 0) {
      batch->reject(i, Status(Code::kInvalidArgument, "bad op or empty length"));
      continue;
    }
    auto pin = registry_->pin_local(b.local_addrs[i], b.lengths[i]);
    if (!pin.ok()) {
      batch->reject(i, pin.status());
      continue;
    }
    const MemoryLocation location = pin.value().info().location;
    batch->hold_pin(std::move(pin.value()));
    by_segment[b.segments[i]].push_back(Waiting{batch, static_cast<uint32_t>(i),
                                                static_cast<TransferOp>(b.ops[i]), b.local_addrs[i], location,
                                                b.region_ids[i], b.offsets[i], b.lengths[i]});
  }
  for (auto& [handle, requests] : by_segment) {
    auto seg = segment(handle);
    if (!seg.ok()) {
      for (auto& w : requests) batch->reject(w.request, seg.status());
      continue;
    }
    Segment& s = *seg.value();
    std::unique_lock<std::mutex> lock(s.mu);
    if (s.stale) {
      lock.unlock();
      Status st(Code::kConnectionFailed, "peer " + s.name + " restarted; open the segment again");
      for (auto& w : requests) batch->reject(w.request, st);
      continue;
    }
    bool ready = s.channel && s.channel->healthy() && !s.connecting;
    for (size_t j = 0; ready && j < requests.size(); ++j)
      ready = s.descriptor->find_region(requests[j].region_id);
    if (ready) {
      lock.unlock();
      slice_and_send(s, requests);
      continue;
    }
    // The link is down or a region is new to us: a connector thread refreshes and reconnects, then sends
    // these requests (or fails them with its error). Submit itself never waits on the network.
    for (auto& w : requests) s.waiting.push_back(std::move(w));
    const bool launch = !s.connecting;
    s.connecting = true;
    lock.unlock();
    if (launch) reconnect_async(seg.value());
  }
  return batch;
}

void Engine::reconnect_async(std::shared_ptr<Segment> seg) {
  std::lock_guard<std::mutex> lock(connectors_mu_);
  for (auto it = connectors_.begin(); it != connectors_.end();) {
    if (it->finished->load()) {
      it->thread.join();
      it = connectors_.erase(it);
    } else {
      ++it;
    }
  }
  auto finished = std::make_shared<std::atomic<bool>>(false);
  auto work = [this, seg, finished] {
    Status st = running_.load() ? connect_segment(*seg) : Status(Code::kClosed, "engine is not running");
    std::vector<Waiting> waiting;
    {
      std::lock_guard<std::mutex> seg_lock(seg->mu);
      waiting.swap(seg->waiting);
      seg->connecting = false;
    }
    if (st.ok()) {
      slice_and_send(*seg, waiting);
    } else {
      for (auto& w : waiting) w.batch->reject(w.request, st);
    }
    finished->store(true);
  };
  if (!running_.load()) {  // stop() has taken (or is about to take) the list: do not add a thread to it
    work();
    return;
  }
  connectors_.push_back(Connector{std::thread(work), finished});
}

void Engine::slice_and_send(Segment& seg, std::vector<Waiting>& requests) {
  std::shared_ptr<const SegmentDescriptor> descriptor;
  std::shared_ptr<Channel> channel;
  Running* transport = nullptr;
  {
    std::lock_guard<std::mutex> lock(seg.mu);
    descriptor = seg.descriptor;
    channel = seg.channel;
    transport = seg.transport;
  }
  const Capabilities& caps = transport->entry->capabilities;
  const uint64_t step = std::max<uint64_t>(transport->transport->slice_size(), 4096);
  std::vector<Slice> slices;
  for (auto& w : requests) {
    const RegionInfo* region = descriptor->find_region(w.region_id);
    if (region == nullptr) {
      w.batch->reject(w.request, Status(Code::kNotFound, "peer has no such region"));
      continue;
    }
    if (!in_bounds(w.offset, w.length, region->length)) {
      w.batch->reject(w.request, Status(Code::kOutOfRange, "request outside the peer region"));
      continue;
    }
    if (!(caps.local_kinds & kind_bit(w.local_location.kind)) ||
        !(caps.remote_kinds & kind_bit(region->location.kind))) {
      w.batch->reject(w.request,
                      Status(Code::kNotSupported, std::string("transport ") + transport->entry->name +
                                                      " cannot move " + location_name(w.local_location) +
                                                      " <-> " + location_name(region->location) + " memory"));
      continue;
    }
    w.batch->set_slices(w.request, (w.length + step - 1) / step);
    for (uint64_t done = 0; done < w.length; done += step) {
      Slice s;
      s.batch = w.batch;
      s.request = w.request;
      s.op = w.op;
      s.local = reinterpret_cast<char*>(w.local + done);
      s.region_id = region->id;
      s.key = region->key;
      s.offset = w.offset + done;
      s.length = std::min(step, w.length - done);
      slices.push_back(std::move(s));
    }
  }
  if (!slices.empty()) channel->submit(std::move(slices));
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
