// A link to one peer over one or more paths (local NIC -> peer NIC), and the policy over them that every
// transport with NIC paths shares (tcp, ucx): a batch's slices are spread over the paths near each
// slice's local memory (the topology's preferred NICs for cpu:N / gpu:N), weighted by link speed and
// queued bytes. With two or more paths, a path that loses slices is marked down and the slices are sent
// again on another path (each path at most once per slice); a worker thread resends them and probes down
// paths, re-admitting each after a cooldown that grows while it keeps failing. A slice every path lost
// goes back to the engine (Slice::lost: another transport's link may take it). With one path there is no
// worker: a dead path makes the link unhealthy and the engine opens a new one.
//
// A transport derives from it and moves the bytes: it opens a path's connections, says how loaded and
// alive each path is, sends the slices it is given on a path, and reports what a dead connection lost
// through lost_handler(path). Its destructor calls stop() before its connections go.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/slice.h"
#include "topology/topology.h"
#include "transport/transport.h"

namespace kvs {

class MultiPathChannel : public Channel {
 public:
  void submit(std::vector<Slice>&& slices) final;
  bool healthy() const final;
  std::vector<PathStats> paths() const final;

 protected:
  struct PathSpec {
    std::string local_nic;  // "" : no NIC chosen
    int64_t speed_mbps = -1;
  };
  MultiPathChannel(const std::vector<PathSpec>& specs, const topology::Topology* topology);
  ~MultiPathChannel() override;

  // Opens every path; one that cannot open starts down (and is probed) as long as another opened.
  // Fails with the first error when none did. Starts the worker with two or more paths.
  Status open_paths();
  // Stops the worker; slices still waiting to be resent, and those lost_handler is given from now on, go
  // back to the engine. The derived destructor calls it first (the worker calls its methods).
  void stop();
  // What path `path`'s connections call with the slices they lost. Safe to call after the channel is
  // gone (the slices then go back to the engine).
  LostSlices lost_handler(size_t path);
  bool multipath() const { return multipath_; }

  // The transport's part. None is called with this class's lock held.
  virtual Status open_path(size_t path) = 0;  // opens the path's connections (again: those that died)
  virtual bool path_live(size_t path) const = 0;
  virtual uint64_t path_load(size_t path) const = 0;  // bytes queued or in flight
  // The path's slices: it chooses among the path's connections; a dead path fails or loses them.
  virtual void send(size_t path, std::vector<Slice>&& slices) = 0;
  // Addresses, live connections, bytes and slices moved (up, failures and failovers are filled here).
  virtual void describe_path(size_t path, PathStats& stats) const = 0;
  // One path only: whether the peer as a whole stopped answering (the link is then unhealthy).
  virtual bool unresponsive() const { return false; }

 private:
  using Clock = std::chrono::steady_clock;
  using Duration = Clock::duration;
  struct Path {
    std::string local_nic;
    double weight = 1;  // link speed
    bool up = false;
    Clock::time_point up_since{};
    Clock::time_point next_probe{};
    Duration cooldown{};
    uint64_t failures = 0;
    uint64_t failovers = 0;
  };
  // lost_handler's target, cut off by stop().
  struct Sink {
    std::mutex mu;
    MultiPathChannel* channel = nullptr;
  };

  // Queues the slices that have a path left to try and leaves in `slices` those that tried every path
  // (all of them when closing).
  void lost(size_t path, std::vector<Slice>& slices);
  void mark_down(Path& path);  // mu_ held
  void mark_up(size_t path);
  void work();
  // The paths near a slice's local memory (empty: no preference).
  const std::vector<size_t>& near(const Slice& slice) const;

  const bool multipath_;
  std::vector<std::vector<size_t>> near_cpu_;  // by NUMA node
  std::vector<std::vector<size_t>> near_gpu_;  // by GPU index
  std::shared_ptr<Sink> sink_ = std::make_shared<Sink>();

  mutable std::mutex mu_;  // guards the fields below
  std::condition_variable wake_;
  std::vector<Path> paths_;
  std::deque<Slice> lost_;  // slices to send again on another path
  bool closing_ = false;
  std::thread worker_;  // only with two or more paths
};

}  // namespace kvs
