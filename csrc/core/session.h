// A peer's session with an engine. Both ends derive it from the handshake (the cluster secret and a nonce
// from each side; the key never crosses the wire), every data connection of the peer proves it, and the
// region keys the peer is handed are scoped to it: a key learned in one session is refused in another.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/hmac.h"

namespace kvs {

constexpr size_t kNonceSize = 32;
constexpr size_t kSessionIdSize = 2 * kNonceSize;

struct Session {
  std::string id;  // what a data connection names: the peer's handshake nonce, then the engine's
  Digest key{};    // HMAC(secret, "session" + id): only the two ends (and the cluster) can compute it
};

// The session named `id` (kSessionIdSize bytes) under this cluster secret.
Session derive_session(const std::string& secret, const std::string& id);
// A fresh session no handshake made (an engine reaching its own regions).
Session local_session(const std::string& secret);

// The keys a peer of one session presents for regions: HMAC(session key, region id + the region's own
// key), cut to 64 bits; the region's own key never leaves its engine. Thread-safe; each region's key is
// computed once.
class SessionKeys {
 public:
  explicit SessionKeys(const Digest& session_key) : key_(digest_bytes(session_key)) {}
  SessionKeys(const SessionKeys&) = delete;
  SessionKeys& operator=(const SessionKeys&) = delete;

  uint64_t of(uint64_t region_id, uint64_t region_key) const;

 private:
  std::string key_;
  mutable std::mutex mu_;
  mutable std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> cache_;  // id -> (own key, derived)
};

}  // namespace kvs
