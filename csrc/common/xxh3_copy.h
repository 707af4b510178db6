// Copy and XXH3-64 in one pass: each 64-byte stripe is loaded once, stored to the destination and folded
// into the hash from the same registers, so the hash costs no second read of the bytes (the copy was
// 83% and the hash of the just-copied chunk 17% of a same-host get's copy time). Copies of 64 KiB and
// more store around the cache (non-temporal): nothing reads them back to hash, and skipping the
// destination's read-for-ownership made the copy+hash faster than memcpy (512 KiB blocks over 512 MiB:
// 26.3 vs 24.9 GB/s on one thread, 50 vs 49 on two). From 256 KiB down to 64 KiB: batch gets of 64,
// 128 and 96 KiB values (one piece, or a paged cache's six 16 KiB pieces) took 5%, 10% and 14-24% less
// time (smaller values still go through the cache: not measured). The digests are XXH3-64
// with the default secret, the xxhash library's own: the secret is taken from that library, and
// enable() turns this path on only once it reproduces the library's digests.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvs::xxh3 {

// Takes the default secret (192 bytes) and checks this implementation against `reference` (the
// library's one-shot XXH3-64) over lengths that reach every branch. Returns whether it is enabled.
bool enable_fused(const unsigned char* secret, uint64_t (*reference)(const void*, size_t));
bool fused_enabled();

// The digest of `total` bytes (> kFusedMin) arriving as pieces in order, each copied by copy(); the copy
// of the last byte makes every piece's bytes visible (fences their non-temporal stores).
// Requires fused_enabled().
class FusedCopy {
 public:
  static constexpr size_t kFusedMin = 240;  // shorter inputs hash by other rules (the library's)

  explicit FusedCopy(uint64_t total);
  void copy(void* dst, const void* src, size_t n);
  uint64_t digest() const;

 private:
  void stripes(char* dst, const char* src, uint64_t count);
  void one_stripe(const unsigned char* stripe);
  void keep_tail(const char* src, size_t n);

  alignas(32) uint64_t acc_[8];
  alignas(32) unsigned char carry_[64];
  unsigned char tail_[64];  // the input's last 64 bytes, hashed again by the final step
  uint64_t total_;
  uint64_t seen_ = 0;    // bytes copied so far
  uint64_t stripe_ = 0;  // stripes folded so far
  uint64_t stripes_;     // how many stripes fold normally (the rest only feed the final step)
  size_t carry_len_ = 0;
  bool streamed_ = false;  // some stripes went around the cache: fenced once the last byte is copied
};

}  // namespace kvs::xxh3
