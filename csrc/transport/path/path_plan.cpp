#include "transport/path/path_plan.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace kvs {
namespace {

// The address as 16 bytes (IPv4 in the first 4) and its family; family 0 when it is not numeric.
int parse_address(const std::string& text, std::array<uint8_t, 16>* out) {
  out->fill(0);
  if (inet_pton(AF_INET, text.c_str(), out->data()) == 1) return AF_INET;
  if (inet_pton(AF_INET6, text.c_str(), out->data()) == 1) return AF_INET6;
  return 0;
}

}  // namespace

bool same_subnet(const std::string& a, const std::string& b, int prefix_len) {
  std::array<uint8_t, 16> x, y;
  const int family = parse_address(a, &x);
  if (family == 0 || parse_address(b, &y) != family) return false;
  const int bits = family == AF_INET ? 32 : 128;
  if (prefix_len <= 0 || prefix_len > bits) return false;
  const int whole = prefix_len / 8;
  if (std::memcmp(x.data(), y.data(), whole) != 0) return false;
  const int rest = prefix_len % 8;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xFF << (8 - rest));
  return (x[whole] & mask) == (y[whole] & mask);
}

std::vector<PlannedPath> plan_paths(const std::vector<NicAddress>& local,
                                    const std::vector<std::string>& remote) {
  std::vector<PlannedPath> plans;
  std::vector<int> used(remote.size(), 0);  // paths already ending at each remote address
  for (const auto& nic : local) {
    const bool planned = std::any_of(plans.begin(), plans.end(),
                                     [&](const PlannedPath& p) { return p.local_nic == nic.name; });
    if (planned) continue;  // one path per local NIC (its first address that reaches the peer)
    size_t best = remote.size();
    for (size_t i = 0; i < remote.size(); ++i) {
      if (!same_subnet(nic.address, remote[i], nic.prefix_len)) continue;
      if (best == remote.size() || used[i] < used[best]) best = i;
    }
    if (best == remote.size()) continue;
    used[best] += 1;
    plans.push_back(PlannedPath{nic.name, nic.address, best, nic.speed_mbps});
  }
  if (plans.empty() && !remote.empty()) plans.push_back(PlannedPath{"", "", 0, -1});
  return plans;
}

}  // namespace kvs
