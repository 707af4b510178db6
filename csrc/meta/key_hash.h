// The metadata side's key hash: 64 bits, keyed by a seed the master draws at random, so a client that
// cannot know it cannot choose keys that pile onto one probe chain (hash flooding).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace kvs::meta {

inline uint64_t fold(uint64_t a, uint64_t b) {
  const __uint128_t r = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

inline uint64_t hash_key(std::string_view key, uint64_t seed) {
  const char* p = key.data();
  size_t n = key.size();
  uint64_t h = seed ^ (n * 0xBF58476D1CE4E5B9ull);
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = fold(h ^ w, 0x94D049BB133111EBull);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p, n);
  return fold(h ^ tail ^ (static_cast<uint64_t>(key.size()) << 56), 0x2545F4914F6CDD1Dull);
}

}  // namespace kvs::meta
