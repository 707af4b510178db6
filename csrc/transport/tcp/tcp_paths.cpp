#include "transport/tcp/tcp_paths.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "common/bytes.h"

namespace kvs::tcp {
namespace {

constexpr uint8_t kSectionVersion = 2;  // 2: one endpoint per NIC address
constexpr uint16_t kMaxEndpoints = 1024;

// The address as 16 bytes (IPv4 in the first 4) and its family; family 0 when it is not numeric.
int parse_address(const std::string& text, std::array<uint8_t, 16>* out) {
  out->fill(0);
  if (inet_pton(AF_INET, text.c_str(), out->data()) == 1) return AF_INET;
  if (inet_pton(AF_INET6, text.c_str(), out->data()) == 1) return AF_INET6;
  return 0;
}

}  // namespace

std::vector<char> encode_endpoints(const std::vector<Endpoint>& endpoints) {
  ByteWriter w;
  w.put<uint8_t>(kSectionVersion);
  w.put<uint16_t>(static_cast<uint16_t>(std::min<size_t>(endpoints.size(), kMaxEndpoints)));
  for (size_t i = 0; i < endpoints.size() && i < kMaxEndpoints; ++i) {
    w.put_string(endpoints[i].nic);
    w.put_string(endpoints[i].host);
    w.put<uint16_t>(endpoints[i].port);
  }
  return std::move(w.bytes());
}

StatusOr<std::vector<Endpoint>> decode_endpoints(const std::vector<char>* section) {
  if (section == nullptr) return Status(Code::kNotSupported, "peer does not offer tcp");
  ByteReader r(section->data(), section->size());
  if (r.get<uint8_t>() != kSectionVersion) {
    return Status(Code::kProtocolError, "peer speaks another version of the tcp transport");
  }
  const uint16_t count = r.get<uint16_t>();
  if (!r.ok() || count == 0 || count > kMaxEndpoints) return Status(Code::kProtocolError, "bad tcp section");
  std::vector<Endpoint> out(count);
  for (auto& e : out) {
    e.nic = r.get_string(256);
    e.host = r.get_string(256);
    e.port = r.get<uint16_t>();
    if (!r.ok() || e.host.empty() || e.port == 0) return Status(Code::kProtocolError, "bad tcp section");
  }
  if (!r.at_end()) return Status(Code::kProtocolError, "bad tcp section");
  return out;
}

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

std::vector<PathPlan> plan_paths(const std::vector<NicAddress>& local, const std::vector<Endpoint>& remote) {
  std::vector<PathPlan> plans;
  std::vector<int> used(remote.size(), 0);  // paths already ending at each endpoint
  for (const auto& nic : local) {
    const bool planned =
        std::any_of(plans.begin(), plans.end(), [&](const PathPlan& p) { return p.local_nic == nic.name; });
    if (planned) continue;  // one path per local NIC (its first address that reaches the peer)
    size_t best = remote.size();
    for (size_t i = 0; i < remote.size(); ++i) {
      if (!same_subnet(nic.address, remote[i].host, nic.prefix_len)) continue;
      if (best == remote.size() || used[i] < used[best]) best = i;
    }
    if (best == remote.size()) continue;
    used[best] += 1;
    plans.push_back(PathPlan{nic.name, nic.address, remote[best], nic.speed_mbps});
  }
  if (plans.empty() && !remote.empty()) plans.push_back(PathPlan{"", "", remote.front(), -1});
  return plans;
}

}  // namespace kvs::tcp
