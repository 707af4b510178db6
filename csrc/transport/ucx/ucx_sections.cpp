#include "transport/ucx/ucx_sections.h"

#include <algorithm>

#include "common/bytes.h"

namespace kvs::ucx {
namespace {

constexpr uint8_t kRailsVersion = 2;  // 2: one worker per rail
constexpr uint8_t kRkeysVersion = 2;  // 2: one key per rail
constexpr uint16_t kMaxRails = 64;
constexpr uint32_t kMaxBlob = 1u << 16;  // a worker address or packed key (a few hundred bytes in practice)

}  // namespace

std::vector<char> encode_rails(const std::vector<RailAddress>& rails) {
  ByteWriter w;
  w.put<uint8_t>(kRailsVersion);
  const size_t count = std::min<size_t>(rails.size(), kMaxRails);
  w.put<uint16_t>(static_cast<uint16_t>(count));
  for (size_t i = 0; i < count; ++i) {
    w.put_string(rails[i].nic);
    w.put_string(rails[i].worker_address);
  }
  return std::move(w.bytes());
}

StatusOr<std::vector<RailAddress>> decode_rails(const std::vector<char>* section) {
  if (section == nullptr) return Status(Code::kNotSupported, "peer offers no ucx");
  ByteReader r(section->data(), section->size());
  if (r.get<uint8_t>() != kRailsVersion) {
    return Status(Code::kProtocolError, "peer speaks another version of the ucx transport");
  }
  const uint16_t count = r.get<uint16_t>();
  if (!r.ok() || count == 0 || count > kMaxRails) return Status(Code::kProtocolError, "bad ucx section");
  std::vector<RailAddress> rails(count);
  for (auto& rail : rails) {
    rail.nic = r.get_string(256);
    rail.worker_address = r.get_string(kMaxBlob);
    if (!r.ok() || rail.worker_address.empty()) return Status(Code::kProtocolError, "bad ucx section");
  }
  if (!r.at_end()) return Status(Code::kProtocolError, "bad ucx section");
  return rails;
}

std::vector<char> encode_rkeys(const std::vector<std::string>& rkeys) {
  ByteWriter w;
  w.put<uint8_t>(kRkeysVersion);
  const size_t count = std::min<size_t>(rkeys.size(), kMaxRails);
  w.put<uint16_t>(static_cast<uint16_t>(count));
  for (size_t i = 0; i < count; ++i) w.put_string(rkeys[i]);
  return std::move(w.bytes());
}

StatusOr<std::string> decode_rkey(const std::vector<char>* section, size_t rail) {
  if (section == nullptr) return Status(Code::kNotSupported, "the peer's region is not mapped for ucx");
  ByteReader r(section->data(), section->size());
  if (r.get<uint8_t>() != kRkeysVersion) return Status(Code::kProtocolError, "another version of ucx keys");
  const uint16_t count = r.get<uint16_t>();
  if (!r.ok() || count > kMaxRails) return Status(Code::kProtocolError, "bad ucx keys");
  std::string wanted;
  for (uint16_t i = 0; i < count; ++i) {
    std::string key = r.get_string(kMaxBlob);
    if (!r.ok()) return Status(Code::kProtocolError, "bad ucx keys");
    if (i == rail) wanted = std::move(key);
  }
  if (!r.at_end()) return Status(Code::kProtocolError, "bad ucx keys");
  if (wanted.empty()) return Status(Code::kNotSupported, "the peer's region is not mapped on that ucx rail");
  return wanted;
}

}  // namespace kvs::ucx
