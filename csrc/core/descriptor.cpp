#include "core/descriptor.h"

#include <unistd.h>

#include <fstream>
#include <unordered_set>

#include "common/bytes.h"

namespace kvs {
namespace {
constexpr uint32_t kDescriptorMagic = 0x4b565344;  // "KVSD"
constexpr uint32_t kMaxRegions = 1u << 16;
constexpr uint32_t kMaxSections = 64;
constexpr uint32_t kMaxString = 4096;
constexpr uint32_t kMaxSection = 1u << 16;
constexpr uint32_t kMaxNics = 1024;
constexpr uint32_t kMaxName = 256;
}  // namespace

const RegionInfo* EngineDescriptor::find_region(uint64_t id) const {
  for (const auto& r : regions) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

const std::vector<char>* EngineDescriptor::section(const std::string& transport) const {
  auto it = sections.find(transport);
  return it == sections.end() ? nullptr : &it->second;
}

const std::vector<char>* EngineDescriptor::region_section(uint64_t region,
                                                          const std::string& transport) const {
  auto it = region_sections.find(region);
  if (it == region_sections.end()) return nullptr;
  auto found = it->second.find(transport);
  return found == it->second.end() ? nullptr : &found->second;
}

std::vector<char> encode_descriptor(const EngineDescriptor& d) {
  ByteWriter w;
  w.put<uint32_t>(kDescriptorMagic);
  w.put<uint16_t>(kDescriptorVersion);
  w.put<uint64_t>(d.engine_id);
  w.put_string(d.host_id);
  w.put_string(d.name);
  w.put<uint32_t>(static_cast<uint32_t>(d.regions.size()));
  for (const auto& r : d.regions) {
    w.put<uint64_t>(r.id);
    w.put<uint64_t>(r.key);
    w.put<uint64_t>(r.base);
    w.put<uint64_t>(r.length);
    w.put<uint8_t>(static_cast<uint8_t>(r.location.kind));
    w.put<int32_t>(r.location.device);
    w.put<uint8_t>(r.shareable ? 1 : 0);
  }
  w.put<uint32_t>(static_cast<uint32_t>(d.sections.size()));
  for (const auto& [name, body] : d.sections) {
    w.put_string(name);
    w.put_string(std::string(body.begin(), body.end()));
  }
  w.put<uint32_t>(static_cast<uint32_t>(d.nics.size()));
  for (const auto& nic : d.nics) {
    w.put_string(nic.name);
    w.put_string(nic.rdma_device);
    w.put_string(nic.address);
    w.put<uint8_t>(nic.prefix_len);
    w.put<int32_t>(nic.numa_node);
    w.put<int64_t>(nic.speed_mbps);
  }
  uint32_t pieces = 0;
  for (const auto& [id, by_transport] : d.region_sections)
    pieces += static_cast<uint32_t>(by_transport.size());
  w.put<uint32_t>(pieces);
  for (const auto& [id, by_transport] : d.region_sections) {
    for (const auto& [name, body] : by_transport) {
      w.put<uint64_t>(id);
      w.put_string(name);
      w.put_string(std::string(body.begin(), body.end()));
    }
  }
  w.put_string(d.owner);
  return std::move(w.bytes());
}

StatusOr<EngineDescriptor> decode_descriptor(const char* data, size_t size) {
  ByteReader r(data, size);
  EngineDescriptor d;
  if (r.get<uint32_t>() != kDescriptorMagic) return Status(Code::kProtocolError, "bad descriptor magic");
  const auto version = r.get<uint16_t>();
  if (r.ok() && version != kDescriptorVersion) {
    return Status(Code::kProtocolError, "peer engine descriptor version " + std::to_string(version) +
                                            " is not supported (this engine speaks version " +
                                            std::to_string(kDescriptorVersion) +
                                            "); run one release on both sides");
  }
  d.engine_id = r.get<uint64_t>();
  d.host_id = r.get_string(kMaxString);
  d.name = r.get_string(kMaxString);
  const auto count = r.get<uint32_t>();
  if (!r.ok() || count > kMaxRegions) return Status(Code::kProtocolError, "malformed descriptor header");
  d.regions.reserve(count);
  for (uint32_t i = 0; i < count && r.ok(); ++i) {
    RegionInfo info;
    info.id = r.get<uint64_t>();
    info.key = r.get<uint64_t>();
    info.base = r.get<uint64_t>();
    info.length = r.get<uint64_t>();
    const auto kind = r.get<uint8_t>();
    info.location.device = r.get<int32_t>();
    info.shareable = r.get<uint8_t>() != 0;
    if (kind >= kMemoryKinds) return Status(Code::kProtocolError, "unknown memory kind in descriptor");
    info.location.kind = static_cast<MemoryKind>(kind);
    info.exported = true;
    d.regions.push_back(std::move(info));
  }
  const auto sections = r.get<uint32_t>();
  if (!r.ok() || sections > kMaxSections) return Status(Code::kProtocolError, "malformed descriptor body");
  for (uint32_t i = 0; i < sections && r.ok(); ++i) {
    std::string name = r.get_string(kMaxString);
    std::string body = r.get_string(kMaxSection);
    d.sections[name] = std::vector<char>(body.begin(), body.end());
  }
  const auto nics = r.get<uint32_t>();
  if (!r.ok() || nics > kMaxNics) return Status(Code::kProtocolError, "malformed descriptor NIC list");
  for (uint32_t i = 0; i < nics && r.ok(); ++i) {
    NicAddress nic;
    nic.name = r.get_string(kMaxName);
    nic.rdma_device = r.get_string(kMaxName);
    nic.address = r.get_string(kMaxName);
    nic.prefix_len = r.get<uint8_t>();
    nic.numa_node = r.get<int32_t>();
    nic.speed_mbps = r.get<int64_t>();
    if (nic.prefix_len > 128) return Status(Code::kProtocolError, "descriptor NIC prefix length over 128");
    d.nics.push_back(std::move(nic));
  }
  const auto pieces = r.get<uint32_t>();
  if (!r.ok() || pieces > uint64_t{kMaxRegions} * kMaxSections) {
    return Status(Code::kProtocolError, "malformed descriptor region sections");
  }
  std::unordered_set<uint64_t> ids;
  for (const auto& region : d.regions) ids.insert(region.id);
  for (uint32_t i = 0; i < pieces && r.ok(); ++i) {
    const auto id = r.get<uint64_t>();
    std::string name = r.get_string(kMaxString);
    std::string body = r.get_string(kMaxSection);
    if (r.ok() && ids.count(id) == 0) return Status(Code::kProtocolError, "a region section names no region");
    d.region_sections[id][name] = std::vector<char>(body.begin(), body.end());
  }
  d.owner = r.get_string(kMaxName);
  if (!r.ok() || !r.at_end()) return Status(Code::kProtocolError, "malformed descriptor body");
  return d;
}

std::string local_host_id() {
  std::string boot_id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot_id);
  char netns[256] = {0};
  ssize_t n = readlink("/proc/self/ns/net", netns, sizeof(netns) - 1);
  if (n < 0) n = 0;
  return boot_id + "/" + std::string(netns, static_cast<size_t>(n));
}

}  // namespace kvs
