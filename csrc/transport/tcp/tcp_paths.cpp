#include "transport/tcp/tcp_paths.h"

#include <algorithm>

#include "common/bytes.h"
#include "transport/path/path_plan.h"

namespace kvs::tcp {
namespace {

constexpr uint8_t kSectionVersion = 2;  // 2: one endpoint per NIC address
constexpr uint16_t kMaxEndpoints = 1024;

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

std::vector<PathPlan> plan_paths(const std::vector<NicAddress>& local, const std::vector<Endpoint>& remote) {
  std::vector<std::string> hosts;
  for (const auto& e : remote) hosts.push_back(e.host);
  std::vector<PathPlan> plans;
  for (auto& p : kvs::plan_paths(local, hosts)) {
    plans.push_back(
        PathPlan{std::move(p.local_nic), std::move(p.local_address), remote[p.remote], p.speed_mbps});
  }
  return plans;
}

}  // namespace kvs::tcp
