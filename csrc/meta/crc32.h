// CRC-32 (IEEE 802.3, reflected: zlib.crc32's): the adaptive eviction policy samples keys by it.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace kvs::meta {

inline const std::array<uint32_t, 256>& crc32_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

inline uint32_t crc32(std::string_view bytes) {
  const auto& t = crc32_table();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) c = t[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

}  // namespace kvs::meta
