// CRC-32 (IEEE 802.3, reflected: zlib.crc32's): the adaptive eviction policy samples keys by it.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace kvs::meta {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "crc32 reads eight bytes as little-endian words");

// tables[0] is the byte-at-a-time table; tables[k][b] is the CRC of byte b followed by k zero bytes, so
// eight bytes are folded in with eight independent lookups (a read of every key, the lookups of a byte
// at a time are one dependent chain: ~3x slower on a 30-byte key).
inline const std::array<std::array<uint32_t, 256>, 8>& crc32_tables() {
  static const std::array<std::array<uint32_t, 256>, 8> tables = [] {
    std::array<std::array<uint32_t, 256>, 8> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (size_t k = 1; k < 8; ++k) {
      for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
    }
    return t;
  }();
  return tables;
}

inline uint32_t crc32(std::string_view bytes) {
  const auto& t = crc32_tables();
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  uint32_t c = 0xFFFFFFFFu;
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t lo = 0, hi = 0;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) c = t[0][(c ^ *p) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

}  // namespace kvs::meta
