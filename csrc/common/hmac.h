// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), and the nonces and proofs of the engines'
// challenge-response: small, no crypto library to find at build or run time. Not constant-time in the data
// (only the MAC comparison needs to be: same_mac).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvs {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  Digest finish();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes hashed
};

Digest hmac_sha256(const std::string& key, const std::string& message);

// What one side of a challenge-response proves: HMAC(key, label + first nonce + second nonce).
Digest prove(const std::string& key, const char* label, const std::string& first, const std::string& second);

// `size` bytes from the kernel's random source (aborts when it has none: nothing safe to do then).
std::string random_bytes(size_t size);

// A digest as bytes (to key another HMAC with it).
inline std::string digest_bytes(const Digest& d) {
  return std::string(d.begin(), d.end());
}

// Whether two MACs are equal, in time that does not depend on where they differ.
bool same_mac(const Digest& a, const Digest& b);

}  // namespace kvs
