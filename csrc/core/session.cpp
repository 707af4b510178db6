#include "core/session.h"

#include <cstring>

namespace kvs {

Session derive_session(const std::string& secret, const std::string& id) {
  return Session{id, hmac_sha256(secret, "session" + id)};
}

Session local_session(const std::string& secret) {
  return derive_session(secret, random_bytes(kSessionIdSize));
}

uint64_t SessionKeys::of(uint64_t region_id, uint64_t region_key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(region_id);
  if (it != cache_.end() && it->second.first == region_key) return it->second.second;
  char message[16];
  std::memcpy(message, &region_id, 8);
  std::memcpy(message + 8, &region_key, 8);
  const Digest d = hmac_sha256(key_, "region" + std::string(message, sizeof(message)));
  uint64_t derived = 0;
  std::memcpy(&derived, d.data(), sizeof(derived));
  if (cache_.size() >= 4096) cache_.clear();  // (a peer naming ever more regions: recompute, never grow)
  cache_[region_id] = {region_key, derived};
  return derived;
}

}  // namespace kvs
