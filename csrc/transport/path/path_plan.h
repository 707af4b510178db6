// Which paths reach a peer over the network: each of this host's NICs paired with a peer address on its
// subnet (a different one per local NIC where there are enough: rails). Without any shared subnet there
// is one path, to the peer's first address, and the kernel (or UCX) picks the route. Transports with
// NIC paths (tcp, ucx) plan with it; what a remote address is (a listening socket, a UCX worker) is
// theirs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/descriptor.h"

namespace kvs {

struct PlannedPath {
  std::string local_nic;      // "" : no NIC chosen (leave as the kernel routes)
  std::string local_address;  // the address to leave from ("" with no NIC)
  size_t remote = 0;          // index into the peer's addresses
  int64_t speed_mbps = -1;    // the local NIC's link speed (-1: unknown)
};

// Whether a and b (numeric IPv4 or IPv6) share their first prefix_len bits; false across families.
bool same_subnet(const std::string& a, const std::string& b, int prefix_len);

// `remote`: the peer's addresses (numeric hosts), in its order of preference. Empty when it has none.
std::vector<PlannedPath> plan_paths(const std::vector<NicAddress>& local,
                                    const std::vector<std::string>& remote);

}  // namespace kvs
