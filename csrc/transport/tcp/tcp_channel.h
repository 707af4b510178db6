// The TCP transport's link to one peer: one or more paths (tcp_paths.h), each with its own connections;
// MultiPathChannel chooses the path of each slice, fails over and probes; this class picks the least
// loaded connection of a path and (re)opens a path's connections.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "topology/topology.h"
#include "transport/path/multipath_channel.h"
#include "transport/tcp/tcp_connection.h"
#include "transport/tcp/tcp_paths.h"

namespace kvs::tcp {

class TcpChannel : public MultiPathChannel {
 public:
  // Opens every path's connections (MultiPathChannel::open_paths), each proving `session`.
  static StatusOr<std::shared_ptr<TcpChannel>> open(const TcpConfig& config, uint64_t peer_engine_id,
                                                    const Session& session, std::vector<PathPlan> plans,
                                                    const topology::Topology* topology);
  ~TcpChannel() override;

 private:
  struct Path {
    PathPlan plan;
    std::vector<std::shared_ptr<TcpConnection>> conns;
    std::shared_ptr<PathCounters> counters = std::make_shared<PathCounters>();
  };

  TcpChannel(const TcpConfig& config, uint64_t peer_engine_id, const Session& session,
             std::vector<PathPlan> plans, const topology::Topology* topology);
  static std::vector<PathSpec> specs(const std::vector<PathPlan>& plans);

  Status open_path(size_t path) override;
  bool path_live(size_t path) const override;
  uint64_t path_load(size_t path) const override;
  void send(size_t path, std::vector<Slice>&& slices) override;
  void describe_path(size_t path, PathStats& stats) const override;
  bool unresponsive() const override;

  // Opens again the connections of path `path` its peer closed while idle, before slices go on it.
  void reopen_idle(size_t path);

  const TcpConfig config_;
  const uint64_t peer_engine_id_;
  const Session session_;
  mutable std::mutex mu_;    // guards the connections
  std::vector<Path> paths_;  // (fixed in number)
  std::mutex reopening_;     // one reopen_idle at a time
};

}  // namespace kvs::tcp
