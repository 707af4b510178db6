// A TCP peer's endpoints (one per NIC address it serves on, as its descriptor section lists them) and the
// paths to them from this host's NICs (transport/path/path_plan.h pairs them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/descriptor.h"

namespace kvs::tcp {

struct Endpoint {
  std::string nic;  // the peer's net device ("" when it listens on an address of no listed NIC)
  std::string host;
  uint16_t port = 0;
};

// The tcp descriptor section: u8 version, u16 count, then per endpoint: string nic, string host, u16
// port. The first endpoint is the engine's main address.
std::vector<char> encode_endpoints(const std::vector<Endpoint>& endpoints);
StatusOr<std::vector<Endpoint>> decode_endpoints(const std::vector<char>* section);

struct PathPlan {
  std::string local_nic;      // "" : no NIC chosen (leave as the kernel routes)
  std::string local_address;  // the address to leave from ("" with no NIC)
  Endpoint remote;
  int64_t speed_mbps = -1;  // the local NIC's link speed (-1: unknown)
};

std::vector<PathPlan> plan_paths(const std::vector<NicAddress>& local, const std::vector<Endpoint>& remote);

}  // namespace kvs::tcp
