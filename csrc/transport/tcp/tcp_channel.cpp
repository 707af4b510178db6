#include "transport/tcp/tcp_channel.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string>

#include "common/net.h"

namespace kvs::tcp {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kFirstCooldown{100};
constexpr milliseconds kLongestCooldown{10000};
constexpr int64_t kUnknownSpeedMbps = 10000;

// "cpu:3" -> 3 for prefix "cpu:"; -1 otherwise.
int location_index(const std::string& name, const std::string& prefix) {
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  try {
    return std::stoi(name.substr(prefix.size()));
  } catch (...) {
    return -1;
  }
}

}  // namespace

StatusOr<std::shared_ptr<TcpChannel>> TcpChannel::open(const TcpConfig& config, uint64_t peer_engine_id,
                                                       std::vector<PathPlan> plans,
                                                       const topology::Topology* topology) {
  if (plans.empty()) return Status(Code::kInvalidArgument, "no path to the peer");
  std::shared_ptr<TcpChannel> channel(new TcpChannel(config, peer_engine_id, std::move(plans), topology));
  Status first;
  bool any = false;
  const size_t count = channel->paths_.size();
  for (size_t i = 0; i < count; ++i) {
    Status st = channel->connect_path(i);
    if (st.ok()) {
      any = true;
      continue;
    }
    if (first.ok()) first = st;
    std::lock_guard<std::mutex> lock(channel->mu_);
    channel->paths_[i].next_probe = Clock::now() + channel->paths_[i].cooldown;
  }
  if (!any) return first;
  if (channel->multipath_) channel->worker_ = std::thread([c = channel.get()] { c->work(); });
  return channel;
}

TcpChannel::TcpChannel(const TcpConfig& config, uint64_t peer_engine_id, std::vector<PathPlan> plans,
                       const topology::Topology* topology)
    : config_(config), peer_engine_id_(peer_engine_id), multipath_(plans.size() > 1) {
  const int total = std::max(1, config.connections);
  conns_per_path_ =
      std::max<int>(1, (total + static_cast<int>(plans.size()) - 1) / static_cast<int>(plans.size()));
  for (auto& plan : plans) {
    Path p;
    p.weight = static_cast<double>(plan.speed_mbps > 0 ? plan.speed_mbps : kUnknownSpeedMbps);
    p.plan = std::move(plan);
    p.cooldown = kFirstCooldown;
    p.conns.resize(conns_per_path_);
    paths_.push_back(std::move(p));
  }
  if (topology == nullptr || !multipath_) return;
  for (const auto& location : topology->locations) {
    std::set<std::string> nics;
    for (size_t n : location.preferred) nics.insert(topology->nics[n].name);
    std::vector<size_t> near;
    for (size_t i = 0; i < paths_.size(); ++i) {
      if (nics.count(paths_[i].plan.local_nic) != 0) near.push_back(i);
    }
    if (near.empty() || near.size() == paths_.size()) continue;  // no preference among these paths
    const int cpu = location_index(location.name, "cpu:");
    const int gpu = location_index(location.name, "gpu:");
    auto& table = cpu >= 0 ? near_cpu_ : near_gpu_;
    const int index = cpu >= 0 ? cpu : gpu;
    if (index < 0 || index > 4096) continue;
    if (table.size() <= static_cast<size_t>(index)) table.resize(index + 1);
    table[index] = std::move(near);
  }
}

TcpChannel::~TcpChannel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::vector<Path> paths;
  {
    std::lock_guard<std::mutex> lock(mu_);
    paths.swap(paths_);
  }
  // Dropping the connections (outside the lock: their threads may be reporting lost slices) fails
  // whatever they still carry.
}

Status TcpChannel::connect_path(size_t i) {
  std::vector<size_t> missing;
  PathPlan plan;
  std::shared_ptr<PathCounters> counters;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Path& p = paths_[i];
    for (size_t j = 0; j < p.conns.size(); ++j) {
      if (!p.conns[j] || p.conns[j]->dead()) missing.push_back(j);
    }
    plan = p.plan;
    counters = p.counters;
  }
  LostSlices report;
  if (multipath_) {
    report = [this, i](std::vector<Slice>&& slices, const Status& st) { on_lost(i, std::move(slices), st); };
  }
  std::vector<std::shared_ptr<TcpConnection>> fresh;
  for (size_t k = 0; k < missing.size(); ++k) {
    auto fd =
        open_connection(plan.remote.host, plan.remote.port, peer_engine_id_, config_, plan.local_address);
    if (!fd.ok()) return fd.status();  // (the connections opened so far close with `fresh`)
    fresh.push_back(std::make_shared<TcpConnection>(fd.value(), config_, counters, report));
  }
  std::vector<std::shared_ptr<TcpConnection>> old;  // dead ones, dropped outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return Status(Code::kClosed, "channel closed");
    Path& p = paths_[i];
    for (size_t k = 0; k < missing.size(); ++k) {
      old.push_back(std::move(p.conns[missing[k]]));
      p.conns[missing[k]] = std::move(fresh[k]);
    }
    p.up = true;
    p.up_since = Clock::now();
  }
  return Status::OK();
}

void TcpChannel::mark_down(Path& path) {
  if (!path.up) return;
  path.up = false;
  path.failures += 1;
  const auto now = Clock::now();
  // A path that fails again soon after coming back waits longer each time; one that held for a while
  // starts over.
  path.cooldown = now - path.up_since < kLongestCooldown
                      ? std::min<Duration>(path.cooldown * 2, kLongestCooldown)
                      : Duration(kFirstCooldown);
  path.next_probe = now + path.cooldown;
}

void TcpChannel::on_lost(size_t path, std::vector<Slice>&& slices, const Status& status) {
  std::vector<Slice> failed;
  bool closing = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing = closing_;
    if (closing_) {
      failed = std::move(slices);
    } else {
      Path& p = paths_[path];
      mark_down(p);
      for (auto& s : slices) {
        // Each slice tries each path at most once (give or take a path that came back meanwhile).
        if (++s.attempts >= paths_.size()) {
          failed.push_back(std::move(s));
        } else {
          p.failovers += 1;
          lost_.push_back(std::move(s));
        }
      }
    }
  }
  wake_.notify_all();
  for (auto& s : failed) {
    if (closing) {
      s.done(status);
    } else {
      s.lost(status);  // every path tried: another transport's link may take it
    }
  }
}

const std::vector<size_t>& TcpChannel::near(const Slice& slice) const {
  static const std::vector<size_t> kNone;
  if (slice.local_location.kind == MemoryKind::kGpu) {
    const auto d = static_cast<size_t>(slice.local_location.device);
    return d < near_gpu_.size() ? near_gpu_[d] : kNone;
  }
  if (slice.local_numa >= 0 && static_cast<size_t>(slice.local_numa) < near_cpu_.size()) {
    return near_cpu_[slice.local_numa];
  }
  return kNone;
}

void TcpChannel::submit(std::vector<Slice>&& slices) {
  struct Conn {
    std::shared_ptr<TcpConnection> conn;
    size_t path;
    uint64_t load;
    std::vector<Slice> slices;
    uint64_t bytes = 0;
  };
  std::vector<Conn> conns;
  std::vector<uint64_t> path_load(0);
  std::vector<char> usable;
  std::vector<double> weight;
  {
    std::lock_guard<std::mutex> lock(mu_);
    path_load.assign(paths_.size(), 0);
    usable.assign(paths_.size(), 0);
    for (size_t p = 0; p < paths_.size(); ++p) {
      weight.push_back(paths_[p].weight);
      for (const auto& c : paths_[p].conns) {
        if (!c) continue;
        const bool live = !c->dead();
        conns.push_back(Conn{c, p, live ? c->load() : std::numeric_limits<uint64_t>::max(), {}});
        if (live) {
          path_load[p] += c->load();
          usable[p] |= paths_[p].up || !multipath_;
        }
      }
    }
  }
  std::vector<Slice> unroutable;
  for (auto& s : slices) {
    size_t best = usable.size();
    double best_score = 0;
    auto consider = [&](size_t p) {
      if (!usable[p]) return;
      const double score = static_cast<double>(path_load[p] + s.length) / weight[p];
      if (best == usable.size() || score < best_score) {
        best = p;
        best_score = score;
      }
    };
    for (size_t p : near(s)) consider(p);
    if (best == usable.size()) {
      for (size_t p = 0; p < usable.size(); ++p) consider(p);
    }
    if (best == usable.size() && multipath_) {
      unroutable.push_back(std::move(s));
      continue;
    }
    if (best == usable.size()) best = 0;  // one path, no live connection: its connection fails the slice
    size_t chosen = conns.size();
    for (size_t c = 0; c < conns.size(); ++c) {
      if (conns[c].path == best && (chosen == conns.size() || conns[c].load < conns[chosen].load)) chosen = c;
    }
    if (chosen == conns.size()) {
      unroutable.push_back(std::move(s));
      continue;
    }
    path_load[best] += s.length;
    if (conns[chosen].load != std::numeric_limits<uint64_t>::max()) conns[chosen].load += s.length;
    conns[chosen].bytes += s.length;
    conns[chosen].slices.push_back(std::move(s));
  }
  for (auto& c : conns) {
    if (!c.slices.empty()) c.conn->enqueue(std::move(c.slices), c.bytes);
  }
  for (auto& s : unroutable) s.lost(Status(Code::kConnectionFailed, "every path to the peer is down"));
}

bool TcpChannel::healthy() const {
  std::lock_guard<std::mutex> lock(mu_);
  bool alive = false;
  for (const auto& p : paths_) {
    for (const auto& c : p.conns) {
      if (!c) continue;
      // One link: a connection that stopped hearing from the peer means the peer as a whole stopped.
      if (!multipath_ && c->unresponsive()) return false;
      alive |= !c->dead() && (p.up || !multipath_);
    }
  }
  return alive;
}

std::vector<PathStats> TcpChannel::paths() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PathStats> out;
  for (const auto& p : paths_) {
    PathStats s;
    s.local_nic = p.plan.local_nic;
    s.local_address = p.plan.local_address;
    s.remote_nic = p.plan.remote.nic;
    s.remote_address = format_host_port(p.plan.remote.host, p.plan.remote.port);
    for (const auto& c : p.conns) s.connections += c && !c->dead() ? 1 : 0;
    s.up = p.up && s.connections > 0;
    s.bytes = p.counters->bytes.load(std::memory_order_relaxed);
    s.slices = p.counters->slices.load(std::memory_order_relaxed);
    s.failures = p.failures;
    s.failovers = p.failovers;
    out.push_back(std::move(s));
  }
  return out;
}

void TcpChannel::work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!closing_) {
    if (!lost_.empty()) {
      std::vector<Slice> resend(std::make_move_iterator(lost_.begin()), std::make_move_iterator(lost_.end()));
      lost_.clear();
      lock.unlock();
      submit(std::move(resend));
      lock.lock();
      continue;
    }
    const auto now = Clock::now();
    auto wake_at = now + std::chrono::seconds(1);
    size_t due = paths_.size();
    for (size_t i = 0; i < paths_.size(); ++i) {
      if (paths_[i].up) continue;
      if (paths_[i].next_probe <= now) {
        due = i;
        break;
      }
      wake_at = std::min(wake_at, paths_[i].next_probe);
    }
    if (due == paths_.size()) {
      wake_.wait_until(lock, wake_at);
      continue;
    }
    lock.unlock();
    const Status st = connect_path(due);
    lock.lock();
    if (!st.ok() && !closing_) {
      Path& p = paths_[due];
      p.cooldown = std::min<Duration>(p.cooldown * 2, kLongestCooldown);
      p.next_probe = Clock::now() + p.cooldown;
    }
  }
  std::deque<Slice> left;
  left.swap(lost_);
  lock.unlock();
  for (auto& s : left) s.done(Status(Code::kClosed, "engine closed"));
}

}  // namespace kvs::tcp
