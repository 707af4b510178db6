// The ucx transport's link to one peer: a path per pair of rails (this engine's worker on a NIC -> the
// peer's worker on a NIC of the same subnet), each an endpoint; MultiPathChannel spreads the slices,
// fails over between paths and probes, as it does for tcp. A slice every path lost goes back to the
// engine, whose tcp link may take it.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/descriptor.h"
#include "transport/path/multipath_channel.h"
#include "transport/ucx/ucx_endpoint.h"
#include "transport/ucx/ucx_sections.h"
#include "transport/ucx/ucx_worker.h"

namespace kvs::ucx {

// A UCX context and worker on one NIC (or on every device UCX picks) and the endpoints it holds.
struct Rail {
  std::string nic;  // "" : UCX's choice
  std::string net_devices;
  std::vector<NicAddress> addresses;
  std::vector<std::weak_ptr<Endpoint>> endpoints;  // (its worker thread only) timed out and closed at stop
  std::unique_ptr<UcxWorker> worker;               // (last: its thread ends before the rest goes)
};

// What a channel needs of its transport.
class Rails {
 public:
  virtual ~Rails() = default;
  // The rail; null once the transport stopped.
  virtual Rail* rail(size_t index) const = 0;
};

struct UcxPath {
  size_t local_rail = 0;
  size_t remote_rail = 0;
  std::string local_nic;  // "" : UCX's choice of devices
  std::string local_address;
  std::string remote_nic;
  std::string remote_address;
  int64_t speed_mbps = -1;
};

class UcxChannel : public MultiPathChannel {
 public:
  // `remote`: the peer's rails; `same_host`: no error handling on the endpoints (UCX's shared-memory
  // transports cannot report a peer's failure, and asking for it leaves only tcp's software RMA).
  static StatusOr<std::shared_ptr<UcxChannel>> open(Rails* rails, EngineDescriptor peer,
                                                    std::vector<RailAddress> remote,
                                                    std::vector<UcxPath> paths, bool same_host,
                                                    const topology::Topology* topology);
  ~UcxChannel() override;

 private:
  UcxChannel(Rails* rails, EngineDescriptor peer, std::vector<RailAddress> remote, std::vector<UcxPath> paths,
             bool same_host, const topology::Topology* topology);
  static std::vector<PathSpec> specs(const std::vector<UcxPath>& paths);
  std::shared_ptr<Endpoint> endpoint(size_t path) const;

  Status open_path(size_t path) override;
  bool path_live(size_t path) const override;
  uint64_t path_load(size_t path) const override;
  void send(size_t path, std::vector<Slice>&& slices) override;
  void describe_path(size_t path, PathStats& stats) const override;

  Rails* const rails_;
  const std::shared_ptr<const EngineDescriptor> peer_;
  const std::vector<RailAddress> remote_;
  const std::vector<UcxPath> paths_;
  const bool same_host_;
  mutable std::mutex mu_;                                // guards endpoints_
  std::vector<std::shared_ptr<Endpoint>> endpoints_;     // by path; null until opened
  std::vector<std::shared_ptr<PathCounters>> counters_;  // by path
};

}  // namespace kvs::ucx
