// The TCP transport's link to one peer: one or more paths (local NIC -> peer NIC, tcp_paths.h), each
// with its own connections. A batch's slices are spread over the paths near the slice's local memory
// (the topology's preferred NICs for cpu:N / gpu:N), weighted by link speed and queued bytes. With two or
// more paths, a path whose connection dies is marked down and the slices it lost are sent again on
// another path (at most once per path); a worker thread resends them and probes down paths, re-admitting
// each after a cooldown that grows while it keeps failing. With one path, a dead connection fails its
// slices, as a single link always did, and the engine reconnects.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "topology/topology.h"
#include "transport/tcp/tcp_connection.h"
#include "transport/tcp/tcp_paths.h"
#include "transport/transport.h"

namespace kvs::tcp {

class TcpChannel : public Channel {
 public:
  // Opens every path's connections; a path that cannot connect starts down (and is probed) as long as
  // another one connected. Fails with the first error when none did.
  static StatusOr<std::shared_ptr<TcpChannel>> open(const TcpConfig& config, uint64_t peer_engine_id,
                                                    std::vector<PathPlan> plans,
                                                    const topology::Topology* topology);
  ~TcpChannel() override;

  void submit(std::vector<Slice>&& slices) override;
  bool healthy() const override;
  std::vector<PathStats> paths() const override;

 private:
  using Duration = std::chrono::steady_clock::duration;
  struct Path {
    PathPlan plan;
    double weight = 1;  // link speed
    std::vector<std::shared_ptr<TcpConnection>> conns;
    std::shared_ptr<PathCounters> counters = std::make_shared<PathCounters>();
    bool up = false;
    Clock::time_point up_since{};
    Clock::time_point next_probe{};
    Duration cooldown{};
    uint64_t failures = 0;
    uint64_t failovers = 0;
  };

  TcpChannel(const TcpConfig& config, uint64_t peer_engine_id, std::vector<PathPlan> plans,
             const topology::Topology* topology);
  // Opens the connections path i lacks (none yet, or dead ones); the caller does not hold mu_.
  Status connect_path(size_t i);
  void on_lost(size_t path, std::vector<Slice>&& slices, const Status& status);
  void mark_down(Path& path);  // mu_ held
  void work();                 // the worker: resends lost slices, probes down paths
  // The paths near a slice's local memory (empty: no preference).
  const std::vector<size_t>& near(const Slice& slice) const;

  const TcpConfig config_;
  const uint64_t peer_engine_id_;
  const bool multipath_;
  int conns_per_path_ = 1;
  std::vector<std::vector<size_t>> near_cpu_;  // by NUMA node
  std::vector<std::vector<size_t>> near_gpu_;  // by GPU index

  mutable std::mutex mu_;  // guards the fields below
  std::condition_variable wake_;
  std::vector<Path> paths_;
  std::deque<Slice> lost_;  // slices to send again on another path
  bool closing_ = false;
  std::thread worker_;  // only with two or more paths
};

}  // namespace kvs::tcp
