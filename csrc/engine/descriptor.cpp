#include "engine/descriptor.h"

#include <unistd.h>

#include <fstream>

#include "common/bytes.h"

namespace kvs {
namespace {
constexpr uint32_t kDescriptorMagic = 0x4b565344;  // "KVSD"
constexpr uint32_t kMaxRegions = 1u << 16;
constexpr uint32_t kMaxString = 4096;
}  // namespace

const RegionInfo* SegmentDescriptor::find_region(uint64_t id) const {
  for (const auto& r : regions) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

std::vector<char> encode_descriptor(const SegmentDescriptor& d) {
  ByteWriter w;
  w.put<uint32_t>(kDescriptorMagic);
  w.put<uint64_t>(d.engine_id);
  w.put<uint32_t>(d.pid);
  w.put_string(d.host_id);
  w.put_string(d.name);
  w.put_string(d.shm_socket);
  w.put<uint32_t>(d.transports);
  w.put<uint32_t>(static_cast<uint32_t>(d.regions.size()));
  for (const auto& r : d.regions) {
    w.put<uint64_t>(r.id);
    w.put<uint64_t>(r.key);
    w.put<uint64_t>(r.base);
    w.put<uint64_t>(r.length);
    w.put<uint8_t>(r.shareable ? 1 : 0);
    w.put<uint32_t>(r.slot);
    w.put_string(r.location);
  }
  return std::move(w.bytes());
}

StatusOr<SegmentDescriptor> decode_descriptor(const char* data, size_t size) {
  ByteReader r(data, size);
  SegmentDescriptor d;
  if (r.get<uint32_t>() != kDescriptorMagic) return Status(Code::kProtocolError, "bad descriptor magic");
  d.engine_id = r.get<uint64_t>();
  d.pid = r.get<uint32_t>();
  d.host_id = r.get_string(kMaxString);
  d.name = r.get_string(kMaxString);
  d.shm_socket = r.get_string(kMaxString);
  d.transports = r.get<uint32_t>();
  const auto count = r.get<uint32_t>();
  if (!r.ok() || count > kMaxRegions) return Status(Code::kProtocolError, "malformed descriptor header");
  d.regions.reserve(count);
  for (uint32_t i = 0; i < count && r.ok(); ++i) {
    RegionInfo info;
    info.id = r.get<uint64_t>();
    info.key = r.get<uint64_t>();
    info.base = r.get<uint64_t>();
    info.length = r.get<uint64_t>();
    info.shareable = r.get<uint8_t>() != 0;
    info.slot = r.get<uint32_t>();
    info.location = r.get_string(kMaxString);
    info.exported = true;
    d.regions.push_back(std::move(info));
  }
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
