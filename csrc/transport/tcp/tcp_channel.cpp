#include "transport/tcp/tcp_channel.h"

#include <algorithm>
#include <limits>
#include <string>

#include "common/net.h"

namespace kvs::tcp {

StatusOr<std::shared_ptr<TcpChannel>> TcpChannel::open(const TcpConfig& config, uint64_t peer_engine_id,
                                                       const Session& session, std::vector<PathPlan> plans,
                                                       const topology::Topology* topology) {
  if (plans.empty()) return Status(Code::kInvalidArgument, "no path to the peer");
  std::shared_ptr<TcpChannel> channel(
      new TcpChannel(config, peer_engine_id, session, std::move(plans), topology));
  Status st = channel->open_paths();
  if (!st.ok()) return st;
  return channel;
}

std::vector<MultiPathChannel::PathSpec> TcpChannel::specs(const std::vector<PathPlan>& plans) {
  std::vector<PathSpec> out;
  for (const auto& plan : plans) out.push_back(PathSpec{plan.local_nic, plan.speed_mbps});
  return out;
}

TcpChannel::TcpChannel(const TcpConfig& config, uint64_t peer_engine_id, const Session& session,
                       std::vector<PathPlan> plans, const topology::Topology* topology)
    : MultiPathChannel(specs(plans), topology),
      config_(config),
      peer_engine_id_(peer_engine_id),
      session_(session) {
  const int total = std::max(1, config.connections);
  const int count = static_cast<int>(plans.size());
  const int per_path = std::max<int>(1, (total + count - 1) / count);
  for (auto& plan : plans) {
    Path p;
    p.plan = std::move(plan);
    p.conns.resize(per_path);
    paths_.push_back(std::move(p));
  }
}

TcpChannel::~TcpChannel() {
  stop();
  std::vector<Path> paths;
  {
    std::lock_guard<std::mutex> lock(mu_);
    paths.swap(paths_);
  }
  // Dropping the connections (outside the lock: their threads may be reporting lost slices) fails
  // whatever they still carry.
}

Status TcpChannel::open_path(size_t i) {
  std::vector<size_t> missing;
  PathPlan plan;
  std::shared_ptr<PathCounters> counters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (i >= paths_.size()) return Status(Code::kClosed, "channel closed");
    const Path& p = paths_[i];
    for (size_t j = 0; j < p.conns.size(); ++j) {
      if (!p.conns[j] || p.conns[j]->dead()) missing.push_back(j);
    }
    plan = p.plan;
    counters = p.counters;
  }
  std::vector<std::shared_ptr<TcpConnection>> fresh;
  for (size_t k = 0; k < missing.size(); ++k) {
    auto fd = open_connection(plan.remote.host, plan.remote.port, peer_engine_id_, session_, config_,
                              plan.local_address);
    if (!fd.ok()) return fd.status();  // (the connections opened so far close with `fresh`)
    fresh.push_back(std::make_shared<TcpConnection>(fd.value(), config_, counters, lost_handler(i)));
  }
  std::vector<std::shared_ptr<TcpConnection>> old;  // dead ones, dropped outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  if (i >= paths_.size()) return Status(Code::kClosed, "channel closed");
  Path& p = paths_[i];
  for (size_t k = 0; k < missing.size(); ++k) {
    old.push_back(std::move(p.conns[missing[k]]));
    p.conns[missing[k]] = std::move(fresh[k]);
  }
  return Status::OK();
}

bool TcpChannel::path_live(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (i >= paths_.size()) return false;
  return std::any_of(paths_[i].conns.begin(), paths_[i].conns.end(),
                     [](const auto& c) { return c && (!c->dead() || c->closed_idle()); });
}

void TcpChannel::reopen_idle(size_t i) {
  auto idle_closed = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return i < paths_.size() && std::any_of(
                                    paths_[i].conns.begin(), paths_[i].conns.end(),
                                    [](const auto& c) { return c && c->closed_idle(); });
  };
  if (!idle_closed()) return;
  std::lock_guard<std::mutex> one(reopening_);
  // (a failure leaves them closed: the slices then fail or go to another path as with any dead connection)
  if (idle_closed()) (void)open_path(i);
}

uint64_t TcpChannel::path_load(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t load = 0;
  if (i >= paths_.size()) return load;
  for (const auto& c : paths_[i].conns) load += c && !c->dead() ? c->load() : 0;
  return load;
}

bool TcpChannel::unresponsive() const {
  // One link: a connection that stopped hearing from the peer means the peer as a whole stopped.
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& p : paths_) {
    for (const auto& c : p.conns) {
      if (c && c->unresponsive()) return true;
    }
  }
  return false;
}

void TcpChannel::send(size_t i, std::vector<Slice>&& slices) {
  reopen_idle(i);
  struct Conn {
    std::shared_ptr<TcpConnection> conn;
    uint64_t load;
    std::vector<Slice> slices;
    uint64_t bytes = 0;
  };
  std::vector<Conn> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (i < paths_.size()) {
      for (const auto& c : paths_[i].conns) {
        if (!c) continue;
        conns.push_back(Conn{c, c->dead() ? std::numeric_limits<uint64_t>::max() : c->load(), {}});
      }
    }
  }
  if (conns.empty()) {
    for (auto& s : slices) s.lost(Status(Code::kConnectionFailed, "no connection on this path"));
    return;
  }
  for (auto& s : slices) {
    // The least loaded connection (a dead one only when none is live: it fails or hands back the slice).
    auto chosen = std::min_element(conns.begin(), conns.end(),
                                   [](const Conn& a, const Conn& b) { return a.load < b.load; });
    if (chosen->load != std::numeric_limits<uint64_t>::max()) chosen->load += s.length;
    chosen->bytes += s.length;
    chosen->slices.push_back(std::move(s));
  }
  for (auto& c : conns) {
    if (!c.slices.empty()) c.conn->enqueue(std::move(c.slices), c.bytes);
  }
}

void TcpChannel::describe_path(size_t i, PathStats& s) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (i >= paths_.size()) return;
  const Path& p = paths_[i];
  s.local_nic = p.plan.local_nic;
  s.local_address = p.plan.local_address;
  s.remote_nic = p.plan.remote.nic;
  s.remote_address = format_host_port(p.plan.remote.host, p.plan.remote.port);
  for (const auto& c : p.conns) s.connections += c && !c->dead() ? 1 : 0;
  s.bytes = p.counters->bytes.load(std::memory_order_relaxed);
  s.slices = p.counters->slices.load(std::memory_order_relaxed);
}

}  // namespace kvs::tcp
