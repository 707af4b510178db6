#include "transport/path/multipath_channel.h"

#include <algorithm>
#include <set>

namespace kvs {
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

MultiPathChannel::MultiPathChannel(const std::vector<PathSpec>& specs, const topology::Topology* topology)
    : multipath_(specs.size() > 1) {
  for (const auto& spec : specs) {
    Path p;
    p.local_nic = spec.local_nic;
    p.weight = static_cast<double>(spec.speed_mbps > 0 ? spec.speed_mbps : kUnknownSpeedMbps);
    p.cooldown = kFirstCooldown;
    paths_.push_back(std::move(p));
  }
  sink_->channel = this;
  if (topology == nullptr || !multipath_) return;
  for (const auto& location : topology->locations) {
    std::set<std::string> nics;
    for (size_t n : location.preferred) nics.insert(topology->nics[n].name);
    std::vector<size_t> near;
    for (size_t i = 0; i < paths_.size(); ++i) {
      if (nics.count(paths_[i].local_nic) != 0) near.push_back(i);
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

MultiPathChannel::~MultiPathChannel() {
  stop();
}

Status MultiPathChannel::open_paths() {
  Status first;
  bool any = false;
  for (size_t i = 0; i < paths_.size(); ++i) {  // (the size is fixed once constructed)
    Status st = open_path(i);
    if (st.ok()) {
      mark_up(i);
      any = true;
      continue;
    }
    if (first.ok()) first = st;
    std::lock_guard<std::mutex> lock(mu_);
    paths_[i].next_probe = Clock::now() + paths_[i].cooldown;
  }
  if (!any) return first.ok() ? Status(Code::kInvalidArgument, "no path to the peer") : first;
  if (multipath_) worker_ = std::thread([this] { work(); });
  return Status::OK();
}

void MultiPathChannel::stop() {
  {
    std::lock_guard<std::mutex> lock(sink_->mu);  // (waits for a report in progress)
    sink_->channel = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
    closing_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::deque<Slice> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(lost_);
  }
  // (the engine replaced the link, or is closing: another transport's link may take them)
  for (auto& s : left) s.lost(Status(Code::kConnectionFailed, "link closed"));
}

LostSlices MultiPathChannel::lost_handler(size_t path) {
  return [sink = sink_, path](std::vector<Slice>&& slices, const Status& status) {
    {
      std::lock_guard<std::mutex> lock(sink->mu);
      if (sink->channel != nullptr) sink->channel->lost(path, slices);
    }
    // Those every path lost, or all when the channel is gone (the engine replaced or closed it): another
    // transport's link may take them. (Outside the lock: a slice's end may drop the channel.)
    for (auto& s : slices) s.lost(status);
  };
}

void MultiPathChannel::mark_up(size_t path) {
  std::lock_guard<std::mutex> lock(mu_);
  paths_[path].up = true;
  paths_[path].up_since = Clock::now();
}

void MultiPathChannel::mark_down(Path& path) {
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

void MultiPathChannel::lost(size_t path, std::vector<Slice>& slices) {
  std::vector<Slice> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) return;
    Path& p = paths_[path];
    mark_down(p);
    for (auto& s : slices) {
      // Each slice tries each path at most once (give or take a path that came back meanwhile).
      if (++s.attempts >= paths_.size()) {
        left.push_back(std::move(s));
      } else {
        p.failovers += 1;
        lost_.push_back(std::move(s));
      }
    }
  }
  wake_.notify_all();
  slices = std::move(left);
}

const std::vector<size_t>& MultiPathChannel::near(const Slice& slice) const {
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

void MultiPathChannel::submit(std::vector<Slice>&& slices) {
  const size_t count = paths_.size();
  std::vector<char> usable(count, 0);
  std::vector<double> weight(count);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t p = 0; p < count; ++p) {
      usable[p] = paths_[p].up || !multipath_;
      weight[p] = paths_[p].weight;
    }
  }
  std::vector<uint64_t> load(count, 0);
  for (size_t p = 0; p < count; ++p) {
    usable[p] = usable[p] && path_live(p);
    load[p] = usable[p] ? path_load(p) : 0;
  }
  std::vector<std::vector<Slice>> routed(count);
  std::vector<Slice> unroutable;
  for (auto& s : slices) {
    size_t best = count;
    double best_score = 0;
    auto consider = [&](size_t p) {
      if (!usable[p]) return;
      const double score = static_cast<double>(load[p] + s.length) / weight[p];
      if (best == count || score < best_score) {
        best = p;
        best_score = score;
      }
    };
    for (size_t p : near(s)) consider(p);
    if (best == count) {
      for (size_t p = 0; p < count; ++p) consider(p);
    }
    if (best == count && !multipath_) best = 0;  // one path, not live: it fails or loses the slice
    if (best == count) {
      unroutable.push_back(std::move(s));
      continue;
    }
    load[best] += s.length;
    routed[best].push_back(std::move(s));
  }
  for (size_t p = 0; p < count; ++p) {
    if (!routed[p].empty()) send(p, std::move(routed[p]));
  }
  for (auto& s : unroutable) s.lost(Status(Code::kConnectionFailed, "every path to the peer is down"));
}

bool MultiPathChannel::healthy() const {
  if (!multipath_) return path_live(0) && !unresponsive();
  std::vector<char> up(paths_.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t p = 0; p < paths_.size(); ++p) up[p] = paths_[p].up;
  }
  for (size_t p = 0; p < up.size(); ++p) {
    if (up[p] && path_live(p)) return true;
  }
  return false;
}

std::vector<PathStats> MultiPathChannel::paths() const {
  std::vector<PathStats> out(paths_.size());
  for (size_t p = 0; p < out.size(); ++p) describe_path(p, out[p]);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t p = 0; p < out.size(); ++p) {
    out[p].up = paths_[p].up && out[p].connections > 0;
    out[p].failures = paths_[p].failures;
    out[p].failovers = paths_[p].failovers;
  }
  return out;
}

void MultiPathChannel::work() {
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
    const Status st = open_path(due);
    if (st.ok()) mark_up(due);
    lock.lock();
    if (!st.ok() && !closing_) {
      Path& p = paths_[due];
      p.cooldown = std::min<Duration>(p.cooldown * 2, kLongestCooldown);
      p.next_probe = Clock::now() + p.cooldown;
    }
  }
}

}  // namespace kvs
