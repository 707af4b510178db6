#include "engine/engine.h"

#include <algorithm>
#include <unordered_map>

#include "common/net.h"
#include "engine/bootstrap.h"
#include "engine/request_pieces.h"
#include "topology/addresses.h"
#include "topology/topology.h"
#include "transport/registration.h"

namespace kvs {

// A request accepted by submit and not yet cut into slices (its local memory is pinned by the batch).
struct Engine::Waiting {
  std::shared_ptr<Batch> batch;
  uint32_t request = 0;
  TransferOp op = TransferOp::kRead;
  uint64_t local = 0;
  MemoryLocation local_location;
  int32_t local_numa = -1;
  uint64_t region_id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t fence_slot = 0;
  uint64_t fence_gen = 0;
  size_t first_piece = 0;  // its pieces in the batch's (Batch::pieces), when it has several
  uint32_t piece_count = 0;
};

struct Engine::Peer {
  std::string name;
  std::string transport_name;
  std::mutex mu;  // guards the fields below
  std::shared_ptr<const EngineDescriptor> descriptor;
  // Cheapest first: links[0] is the peer's transport; a dearer one carries only what none before it moves.
  std::vector<Link> links;
  Status unlinked;  // why a transport that would move more kinds could not connect (for its requests' errors)
  bool connecting = false;       // a reconnection runs on a connector thread
  std::vector<Waiting> waiting;  // requests it will send (or fail) when done
  // The peer restarted: its region ids now name other memory, so this handle never reconnects.
  bool stale = false;
  // Known bad: the last reconnection failed. Requests fail at once (no caller waits on a dead peer)
  // while a probe reconnects in the background, at most once per back-off period.
  int failures = 0;
  Clock::time_point retry_after{};
  Status last_error;
  // Some links died and others live (ucx gone, tcp up): requests keep going (a dead link hands its
  // slices to the next that moves their kinds) while the dead ones are opened again in the background.
  bool relinking = false;
  int relinks = 0;
  Clock::time_point relink_after{};

  // Usable while one of its links is; degraded while another is not (one pass: each asks its channel).
  struct Health {
    bool usable = false;
    bool degraded = false;
  };
  Health health() const {
    Health h;
    for (const auto& link : links) {
      const bool up = link.channel->healthy();
      h.usable |= up;
      h.degraded |= !up;
    }
    return h;
  }
  bool healthy() const { return health().usable; }
};

namespace {

// The place of a transport that could not connect while a dearer one did (ucx refused, tcp up): never
// healthy, so the engine keeps opening it again in the background (relink_async), and whatever reaches it
// meanwhile is handed on to the next link that moves its kinds.
class UnconnectedChannel : public Channel {
 public:
  explicit UnconnectedChannel(Status why) : why_(std::move(why)) {}
  void submit(std::vector<Slice>&& slices) override {
    for (const auto& slice : slices) slice.lost(why_);
  }
  bool healthy() const override { return false; }

 private:
  Status why_;
};

// Bit (local kind, remote kind) for every pair of memory kinds a transport moves.
uint32_t kind_pairs(const Capabilities& caps) {
  uint32_t pairs = 0;
  for (int local = 0; local < kMemoryKinds; ++local) {
    for (int remote = 0; remote < kMemoryKinds; ++remote) {
      if ((caps.local_kinds >> local & 1) && (caps.remote_kinds >> remote & 1)) {
        pairs |= 1u << (local * kMemoryKinds + remote);
      }
    }
  }
  return pairs;
}

// Back-off between probes of a peer known bad: 50 ms, doubling up to 2 s.
Clock::duration backoff(int failures) {
  return std::chrono::milliseconds(std::min<int64_t>(2000, int64_t{50} << std::min(failures - 1, 6)));
}

// The NICs of this host the engine may use, once per address, as its descriptor advertises them.
std::vector<NicAddress> host_nics(const topology::Topology& t) {
  std::vector<NicAddress> out;
  for (const auto& a : topology::advertised(t, topology::interface_addresses())) {
    out.push_back(NicAddress{a.nic->name, a.nic->rdma_device, a.address.address,
                             static_cast<uint8_t>(a.address.prefix_len), a.nic->numa_node,
                             a.nic->speed_mbps});
  }
  return out;
}

}  // namespace

Engine::Engine(EngineConfig config)
    : config_(std::move(config)),
      id_(random_u64()),
      host_id_(local_host_id()),
      registry_(std::make_shared<MemoryRegistry>()),
      pool_(std::make_unique<CopyPool>(CopyPool::workers_for(config_.copy_threads))) {
  for (const auto& [name, values] : config_.transport_options) {
    if (find_transport(name) == nullptr)
      config_error_ = Status(Code::kInvalidArgument, "unknown transport '" + name + "'");
  }
  auto host = std::make_shared<const topology::Topology>(
      topology::discover(config_.sysfs_root, topology::NicSelection{config_.nic_names, config_.nic_exclude}));
  nics_ = host_nics(*host);
  TransportContext context;
  context.engine_id = id_;
  context.host_id = host_id_;
  context.listen_host = config_.host;
  context.registry = registry_;
  context.pool = pool_.get();
  context.nics = nics_;
  context.topology = host;
  context.transport = config_.transport;
  context.peer_pin_timeout_ms = config_.peer_pin_timeout_ms;
  context.cluster_secret = config_.cluster_secret;
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
    transports_.push_back(Running{entry, entry->make(context, options.value()), entry->capabilities});
  }
  std::stable_sort(transports_.begin(), transports_.end(), [](const Running& a, const Running& b) {
    return a.transport->cost(a.entry->capabilities.cost) < b.transport->cost(b.entry->capabilities.cost);
  });
  registry_->set_export_hooks(ExportHooks{
      [this](const RegionInfo& r) {
        for (auto& t : transports_) t.transport->on_region_exported(r);
      },
      [this](const RegionInfo& r) {
        for (auto& t : transports_) t.transport->on_region_revoked(r);
      },
  });
}

Engine::~Engine() {
  stop();
  registry_->set_export_hooks({});
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
  bootstrap_ = std::make_unique<BootstrapServer>(
      [this](const Session& session) { return encode_descriptor(descriptor(session)); },
      config_.handshake_timeout_ms, config_.cluster_secret);
  Status st = bootstrap_->start(config_.host, config_.port);
  for (size_t i = 0; st.ok() && i < transports_.size(); ++i) {
    st = transports_[i].transport->start();
    if (!st.ok()) {
      for (size_t j = 0; j < i; ++j) transports_[j].transport->stop();
    }
  }
  for (auto& t : transports_) t.caps = t.transport->capabilities(t.entry->capabilities);
  for (size_t i = 0; st.ok() && i < transports_.size(); ++i) {
    // The one transport this engine is told to use must work here (e.g. ucx with UCX installed).
    const std::string why = transports_[i].transport->unavailable();
    if (config_.transport == transports_[i].entry->name && !why.empty()) {
      st = Status(Code::kNotSupported, "transport '" + config_.transport + "' is unavailable: " + why);
      for (auto& t : transports_) t.transport->stop();
    }
  }
  if (!st.ok()) {
    bootstrap_->stop();
    return st;
  }
  name_ = format_host_port(config_.host, bootstrap_->port());
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
    std::lock_guard<std::mutex> lock(peers_mu_);
    peers_.clear();
  }
  while (pool_->run_one()) {
  }
  registry_->remove_all();
}

void Engine::set_owner(std::string owner) {
  std::lock_guard<std::mutex> lock(owner_mu_);
  owner_ = std::move(owner);
}

EngineDescriptor Engine::descriptor() const {
  const Session session = local_session(config_.cluster_secret);
  EngineDescriptor d = descriptor(session);
  d.session = session;
  return d;
}

EngineDescriptor Engine::descriptor(const Session& session) const {
  EngineDescriptor d;
  d.engine_id = id_;
  d.host_id = host_id_;
  d.name = name_;
  {
    std::lock_guard<std::mutex> lock(owner_mu_);
    d.owner = owner_;
  }
  for (const auto& t : transports_) {
    auto section = t.transport->descriptor_section();
    if (!section.empty()) d.sections[t.entry->name] = std::move(section);
  }
  d.regions = registry_->exported();
  const SessionKeys keys(session.key);
  for (auto& r : d.regions) r.key = keys.of(r.id, r.key);
  d.nics = nics_;
  for (const auto& r : d.regions) {
    for (const auto& t : transports_) {
      auto section = t.transport->region_section(r.id);
      if (!section.empty()) d.region_sections[r.id][t.entry->name] = std::move(section);
    }
  }
  return d;
}

std::vector<std::string> Engine::transports() const {
  std::vector<std::string> names;
  for (const auto& t : transports_) names.emplace_back(t.entry->name);
  return names;
}

bool Engine::transport_starts(const std::string& name) const {
  for (const auto& t : transports_) {
    if (name == t.entry->name) return t.transport->starts();
  }
  return false;
}

std::map<std::string, std::string> Engine::unavailable_transports() const {
  std::map<std::string, std::string> out;
  for (const auto& t : transports_) {
    std::string why = t.transport->unavailable();
    if (!why.empty()) out[t.entry->name] = std::move(why);
  }
  return out;
}

std::map<std::string, std::string> Engine::describe_section(const std::string& transport,
                                                            const std::vector<char>& section) const {
  for (const auto& t : transports_) {
    if (transport == t.entry->name) return t.transport->describe_section(section);
  }
  return {};
}

StatusOr<std::vector<Engine::Link>> Engine::connect_links(const EngineDescriptor& peer,
                                                          const std::string& transport, Status* unlinked) {
  // Pairs of kinds requests to this peer can name: any local kind, the kinds of the regions it exports.
  Capabilities exported;
  exported.local_kinds = ~KindMask{0};
  for (const auto& r : peer.regions) exported.remote_kinds |= kind_bit(r.location.kind);
  const uint32_t wanted = kind_pairs(exported);
  std::vector<Link> links;
  uint32_t covered = 0;
  bool fenced = false;     // a link so far checks allocation fences
  bool connected = false;  // some link is up (a placeholder alone is no link)
  Status first_failure;
  for (const auto& t : transports_) {
    if (transport != "auto" && transport != t.entry->name) continue;
    if (!t.transport->reachable(peer)) continue;
    const uint32_t pairs = kind_pairs(t.caps);
    // A dearer transport joins for kinds none before moves, or to carry requests naming a fenced
    // allocation when the links before cannot check fences (one-sided RMA).
    const bool fences_now = !fenced && !t.caps.one_sided;
    if (!links.empty() && (pairs & wanted & ~covered) == 0 && !fences_now) continue;
    auto channel = t.transport->connect(peer);
    if (!channel.ok()) {
      const Status why(channel.status().code(),
                       std::string(t.entry->name) + ": " + channel.status().message());
      if (links.empty()) {  // the peer's own transport: a dearer one may carry its requests meanwhile
        first_failure = why;
        links.push_back(Link{const_cast<Running*>(&t), std::make_shared<UnconnectedChannel>(why)});
      } else {
        *unlinked = why;
      }
      continue;
    }
    links.push_back(Link{const_cast<Running*>(&t), std::move(channel.value())});
    covered |= pairs;
    fenced |= !t.caps.one_sided;
    connected = true;
  }
  if (connected && !fenced && transport != "auto") link_fence_carrier(peer, links, unlinked);
  if (connected) {
    if (!first_failure.ok() && unlinked->ok()) *unlinked = first_failure;
    return links;
  }
  if (!first_failure.ok()) return first_failure;
  if (transport == "auto") return Status(Code::kNotSupported, "no transport reaches " + peer.name);
  return Status(Code::kNotSupported, "transport '" + transport + "' cannot reach " + peer.name);
}

void Engine::link_fence_carrier(const EngineDescriptor& peer, std::vector<Link>& links, Status* unlinked) {
  // The named transport is one-sided (ucx RMA): requests naming a fenced allocation would have no way to
  // the peer, so the cheapest transport that checks fences carries them (and only them).
  for (const auto& t : transports_) {
    if (t.caps.one_sided || !t.transport->reachable(peer)) continue;
    auto channel = t.transport->connect(peer);
    if (channel.ok()) {
      links.push_back(Link{const_cast<Running*>(&t), std::move(channel.value()), /*fenced_only=*/true});
      return;
    }
    *unlinked = Status(channel.status().code(),
                       std::string(t.entry->name) + " (for fenced requests): " + channel.status().message());
  }
}

Status Engine::connect_peer(Peer& peer) {
  EngineDescriptor fetched;
  if (peer.name == name_) {
    fetched = descriptor();
  } else {
    auto d = fetch_descriptor(peer.name, config_.handshake_timeout_ms, config_.cluster_secret);
    if (!d.ok()) return d.status();
    fetched = std::move(d.value());
  }
  {
    std::lock_guard<std::mutex> lock(peer.mu);
    if (peer.descriptor && fetched.engine_id != peer.descriptor->engine_id) {
      peer.stale = true;
      peer.links.clear();
    }
    if (peer.stale)
      return Status(Code::kConnectionFailed, "peer " + peer.name + " restarted; open the peer again");
  }
  Status unlinked;
  auto links = connect_links(fetched, peer.transport_name, &unlinked);
  if (!links.ok()) return links.status();
  std::lock_guard<std::mutex> lock(peer.mu);
  peer.descriptor = std::make_shared<const EngineDescriptor>(std::move(fetched));
  peer.links = std::move(links.value());
  peer.unlinked = unlinked;
  peer.failures = 0;
  return Status::OK();
}

StatusOr<uint32_t> Engine::open_peer(const std::string& name, const std::string& transport) {
  if (!running_.load()) return Status(Code::kClosed, "engine is not running");
  const std::string chosen = transport.empty() ? config_.transport : transport;
  std::shared_ptr<Peer> known;
  uint32_t known_handle = 0;
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    for (size_t i = 0; i < peers_.size() && !known; ++i) {
      const auto& s = peers_[i];
      std::lock_guard<std::mutex> peer_lock(s->mu);
      if (s->name != name || s->transport_name != chosen || s->stale) continue;
      if (s->failures == 0 && s->healthy()) return static_cast<uint32_t>(i);
      known = s;
      known_handle = static_cast<uint32_t>(i);
    }
  }
  if (known) {
    // Known bad (or its link died): opening it means trying now, so the caller hears the result; a peer
    // found restarted gets a new handle below.
    Status st = connect_peer(*known);
    if (st.ok()) return known_handle;
    std::lock_guard<std::mutex> peer_lock(known->mu);
    if (!known->stale) return st;
  }
  auto peer = std::make_shared<Peer>();
  peer->name = name;
  peer->transport_name = chosen;
  Status st = connect_peer(*peer);
  if (!st.ok()) return st;
  std::lock_guard<std::mutex> lock(peers_mu_);
  peers_.push_back(peer);
  return static_cast<uint32_t>(peers_.size() - 1);
}

StatusOr<std::shared_ptr<Engine::Peer>> Engine::peer_at(uint32_t handle) {
  std::lock_guard<std::mutex> lock(peers_mu_);
  if (handle >= peers_.size()) return Status(Code::kInvalidArgument, "unknown peer handle");
  return peers_[handle];
}

Status Engine::refresh_peer(uint32_t handle) {
  auto peer = peer_at(handle);
  if (!peer.ok()) return peer.status();
  return connect_peer(*peer.value());
}

StatusOr<EngineDescriptor> Engine::peer_descriptor(uint32_t handle) {
  auto peer = peer_at(handle);
  if (!peer.ok()) return peer.status();
  std::lock_guard<std::mutex> lock(peer.value()->mu);
  return *peer.value()->descriptor;
}

StatusOr<std::vector<std::string>> Engine::peer_transports(uint32_t handle) {
  auto peer = peer_at(handle);
  if (!peer.ok()) return peer.status();
  std::lock_guard<std::mutex> lock(peer.value()->mu);
  if (peer.value()->links.empty()) return Status(Code::kConnectionFailed, "peer is not connected");
  std::vector<std::string> names;
  for (const auto& link : peer.value()->links) names.emplace_back(link.transport->entry->name);
  return names;
}

StatusOr<std::vector<std::pair<std::string, PathStats>>> Engine::peer_paths(uint32_t handle) {
  auto peer = peer_at(handle);
  if (!peer.ok()) return peer.status();
  std::vector<Link> links;
  {
    std::lock_guard<std::mutex> lock(peer.value()->mu);
    links = peer.value()->links;
  }
  std::vector<std::pair<std::string, PathStats>> out;
  for (const auto& link : links) {
    for (auto& path : link.channel->paths()) out.emplace_back(link.transport->entry->name, std::move(path));
  }
  return out;
}

std::shared_ptr<Batch> Engine::submit(const BatchView& b, int64_t timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
  auto batch = std::make_shared<Batch>(b.count, deadline);
  if (!running_.load()) {
    for (size_t i = 0; i < b.count; ++i) batch->reject(i, Status(Code::kClosed, "engine is not running"));
    return batch;
  }
  std::unordered_map<uint32_t, std::vector<Waiting>> by_peer;
  BatchPins pins(*registry_, *batch);
  std::vector<Piece> pieces;
  if (b.piece_counts != nullptr) pieces.reserve(std::min<size_t>(b.piece_total, size_t{1} << 24));
  size_t next_piece = 0;  // pieces are taken in order, a rejected request's too
  for (size_t i = 0; i < b.count; ++i) {
    const uint32_t count = b.piece_counts != nullptr ? b.piece_counts[i] : 0;
    const size_t first = next_piece;
    next_piece += count;
    if (b.ops[i] > static_cast<uint8_t>(TransferOp::kWrite) || b.lengths[i] == 0) {
      batch->reject(i, Status(Code::kInvalidArgument, "bad op or empty length"));
      continue;
    }
    if (count > kMaxRequestPieces || next_piece > b.piece_total) {
      batch->reject(i, Status(Code::kInvalidArgument, "a request names more pieces than given (or than " +
                                                          std::to_string(kMaxRequestPieces) + ")"));
      continue;
    }
    const auto op = static_cast<TransferOp>(b.ops[i]);
    auto located = count == 0 ? pins.pin(op, b.local_addrs[i], b.lengths[i])
                              : pin_pieces(pins, op, b.piece_addrs + first, b.piece_lengths + first, count,
                                           b.lengths[i], pieces);
    if (!located.ok()) {
      batch->reject(i, located.status());
      continue;
    }
    const auto [location, numa] = located.value();
    Waiting w{batch,
              static_cast<uint32_t>(i),
              op,
              b.local_addrs[i],
              location,
              numa,
              b.region_ids[i],
              b.offsets[i],
              b.lengths[i],
              b.fence_slots ? b.fence_slots[i] : 0,
              b.fence_gens ? b.fence_gens[i] : 0};
    if (count != 0) {
      w.first_piece = pieces.size() - count;
      w.piece_count = count;
    }
    if (b.digests != nullptr && b.digests[i] != 0 && op == TransferOp::kRead &&
        location.kind != MemoryKind::kGpu) {
      batch->want_digest(i, reinterpret_cast<char*>(w.local), w.length, static_cast<uint32_t>(w.first_piece),
                         w.piece_count);
    }
    by_peer[b.peers[i]].push_back(std::move(w));
  }
  batch->set_pieces(std::move(pieces));  // (before any slice points into them)
  for (auto& [handle, requests] : by_peer) {
    auto peer = peer_at(handle);
    if (!peer.ok()) {
      for (auto& w : requests) batch->reject(w.request, peer.status());
      continue;
    }
    Peer& s = *peer.value();
    std::unique_lock<std::mutex> lock(s.mu);
    if (s.stale) {
      lock.unlock();
      Status st(Code::kConnectionFailed, "peer " + s.name + " restarted; open the peer again");
      for (auto& w : requests) batch->reject(w.request, st);
      continue;
    }
    const Peer::Health health = s.health();
    bool ready = health.usable && !s.connecting;
    for (size_t j = 0; ready && j < requests.size(); ++j)
      ready = s.descriptor->find_region(requests[j].region_id);
    if (ready) {
      const bool relink = health.degraded && !s.relinking && Clock::now() >= s.relink_after;
      s.relinking |= relink;
      if (!health.degraded) s.relinks = 0;
      lock.unlock();
      slice_and_send(s, requests);
      if (relink) relink_async(peer.value());
      continue;
    }
    if (!s.links.empty() && !health.usable && !s.connecting && s.failures == 0) {
      // The link just died (a reset, or a peer that stopped answering): treat the peer as bad at once,
      // so callers do not queue behind a reconnection that may take the whole handshake timeout.
      s.failures = 1;
      s.retry_after = Clock::now();
      s.last_error = Status(Code::kConnectionFailed, "connection lost");
    }
    if (s.failures > 0) {
      // Known bad: fail fast; probe in the background once the back-off has passed.
      const bool probe = !s.connecting && Clock::now() >= s.retry_after;
      s.connecting |= probe;
      Status st(Code::kConnectionFailed, "peer " + s.name + " is unreachable (" + s.last_error.message() +
                                             "); retrying in the background");
      lock.unlock();
      for (auto& w : requests) batch->reject(w.request, st);
      if (probe) reconnect_async(peer.value());
      continue;
    }
    // The link is down or a region is new to us: a connector thread refreshes and reconnects, then sends
    // these requests (or fails them with its error). Submit itself never waits on the network.
    for (auto& w : requests) s.waiting.push_back(std::move(w));
    const bool launch = !s.connecting;
    s.connecting = true;
    lock.unlock();
    if (launch) reconnect_async(peer.value());
  }
  return batch;
}

void Engine::relink_async(std::shared_ptr<Peer> peer) {
  launch_connector([this, peer] {
    std::shared_ptr<const EngineDescriptor> descriptor;
    std::vector<std::pair<size_t, Running*>> dead;
    {
      std::lock_guard<std::mutex> lock(peer->mu);
      descriptor = peer->descriptor;
      for (size_t i = 0; i < peer->links.size(); ++i) {
        if (!peer->links[i].channel->healthy()) dead.emplace_back(i, peer->links[i].transport);
      }
    }
    std::vector<std::pair<size_t, std::shared_ptr<Channel>>> fresh;
    for (auto& [i, t] : dead) {
      if (!running_.load()) break;
      auto channel = t->transport->connect(*descriptor);
      if (channel.ok()) fresh.emplace_back(i, std::move(channel.value()));
    }
    std::vector<std::shared_ptr<Channel>> replaced;  // dropped outside the lock (their threads end)
    std::lock_guard<std::mutex> lock(peer->mu);
    for (auto& [i, channel] : fresh) {
      if (i < peer->links.size() && !peer->links[i].channel->healthy()) {
        replaced.push_back(std::move(peer->links[i].channel));
        peer->links[i].channel = std::move(channel);
      }
    }
    peer->relinking = false;
    peer->relinks += 1;  // (a link that dies again soon waits longer: 50 ms doubling to 2 s)
    peer->relink_after = Clock::now() + backoff(peer->relinks);
  });
}

void Engine::launch_connector(std::function<void()> work) {
  std::lock_guard<std::mutex> lock(connectors_mu_);
  for (auto it = connectors_.begin(); it != connectors_.end();) {
    if (it->finished->load()) {
      it->thread.join();
      it = connectors_.erase(it);
    } else {
      ++it;
    }
  }
  if (!running_.load()) {  // stop() has taken (or is about to take) the list: do not add a thread to it
    work();
    return;
  }
  auto finished = std::make_shared<std::atomic<bool>>(false);
  connectors_.push_back(Connector{std::thread([work = std::move(work), finished] {
                                    work();
                                    finished->store(true);
                                  }),
                                  finished});
}

void Engine::reconnect_async(std::shared_ptr<Peer> peer) {
  launch_connector([this, peer] {
    Status st = running_.load() ? connect_peer(*peer) : Status(Code::kClosed, "engine is not running");
    std::vector<Waiting> waiting;
    {
      std::lock_guard<std::mutex> peer_lock(peer->mu);
      waiting.swap(peer->waiting);
      peer->connecting = false;
      if (st.ok()) {
        peer->failures = 0;
      } else {
        peer->failures += 1;
        peer->retry_after = Clock::now() + backoff(peer->failures);
        peer->last_error = st;
      }
    }
    if (st.ok()) {
      slice_and_send(*peer, waiting);
    } else {
      for (auto& w : waiting) w.batch->reject(w.request, st);
    }
  });
}

namespace {

// Whether a transport of these capabilities moves a request between these kinds of memory, checking the
// allocation it names (if any).
bool moves(const Capabilities& caps, MemoryKind local, MemoryKind remote, bool fenced) {
  return (caps.local_kinds & kind_bit(local)) && (caps.remote_kinds & kind_bit(remote)) &&
         (!fenced || !caps.one_sided);
}

// Sends a slice another link lost over this one.
class LinkFallback : public SliceFallback {
 public:
  explicit LinkFallback(std::shared_ptr<Channel> channel) : channel_(std::move(channel)) {}
  void take(Slice&& slice) override {
    std::vector<Slice> one;
    one.push_back(std::move(slice));
    channel_->submit(std::move(one));
  }

 private:
  std::shared_ptr<Channel> channel_;
};

}  // namespace

void Engine::slice_and_send(Peer& peer, std::vector<Waiting>& requests) {
  std::shared_ptr<const EngineDescriptor> descriptor;
  std::vector<Link> links;
  Status unlinked;
  {
    std::lock_guard<std::mutex> lock(peer.mu);
    descriptor = peer.descriptor;
    links = peer.links;
    unlinked = peer.unlinked;
  }
  std::vector<std::vector<Slice>> slices(links.size());
  std::vector<std::shared_ptr<SliceFallback>> fallbacks(links.size());
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
    const bool fenced = w.fence_gen != 0;
    auto can = [&](size_t link) {
      return (fenced || !links[link].fenced_only) &&
             moves(links[link].transport->caps, w.local_location.kind, region->location.kind, fenced);
    };
    size_t chosen = 0;
    while (chosen < links.size() && !can(chosen)) ++chosen;
    if (chosen == links.size()) {
      std::string why = "no transport to " + peer.name + " moves " + location_name(w.local_location) +
                        " <-> " + location_name(region->location) + " memory" +
                        (fenced ? " checking allocation fences" : "") + " (" +
                        links.front().transport->entry->name + " cannot";
      why += unlinked.ok() ? ")" : "; " + unlinked.message() + ")";
      w.batch->reject(w.request, Status(Code::kNotSupported, why));
      continue;
    }
    // The next link that moves the same kinds takes what this one loses (ucx over RDMA -> tcp).
    std::shared_ptr<SliceFallback> fallback;
    bool gathers = links[chosen].transport->caps.gathers;  // (and so does whoever may take its slices)
    for (size_t next = chosen + 1; next < links.size() && !fallback; ++next) {
      if (!can(next)) continue;
      if (!fallbacks[next]) fallbacks[next] = std::make_shared<LinkFallback>(links[next].channel);
      fallback = fallbacks[next];
      gathers = gathers && links[next].transport->caps.gathers;
    }
    const uint64_t step = std::max<uint64_t>(links[chosen].transport->transport->slice_size(), 4096);
    Slice proto;
    proto.batch = w.batch;
    proto.request = w.request;
    proto.op = w.op;
    proto.region_id = region->id;
    proto.key = region->key;
    proto.offset = w.offset;
    proto.fence_slot = w.fence_slot;
    proto.fence_gen = w.fence_gen;
    proto.local_location = w.local_location;
    proto.local_numa = w.local_numa;
    proto.fallback = fallback;
    std::vector<Slice>& out = slices[chosen];
    const size_t before = out.size();
    if (w.piece_count == 0) {
      cut(proto, reinterpret_cast<char*>(w.local), w.length, step, out);
    } else {
      cut_pieces(proto, w.batch->pieces() + w.first_piece, w.piece_count, step, gathers, out);
    }
    const size_t count = out.size() - before;
    w.batch->set_slices(w.request, count);
    if (count == 1 && w.batch->wants_digest(w.request)) out.back().digest = true;
  }
  for (size_t i = 0; i < links.size(); ++i) {
    if (!slices[i].empty()) links[i].channel->submit(std::move(slices[i]));
  }
}

}  // namespace kvs
