#include "common/xxh3_copy.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "common/copy_bytes.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVS_FUSED_XXH3 1
#endif

namespace kvs::xxh3 {
namespace {

// XXH3's long-input rules (the xxhash specification, doc/xxhash_spec.md): 64-byte stripes, each folded
// with the secret at 8 bytes further on; after 16 stripes (a block) the accumulators are scrambled with
// the secret's last 64 bytes; the input's last 64 bytes fold once more with the secret 7 bytes earlier;
// the eight accumulators merge with the secret from byte 11 and the length.
constexpr size_t kSecretSize = 192;
constexpr size_t kStripe = 64;
constexpr uint64_t kStripesPerBlock = (kSecretSize - kStripe) / 8;
constexpr size_t kScrambleAt = kSecretSize - kStripe;
constexpr size_t kLastStripeAt = kSecretSize - kStripe - 7;
constexpr size_t kMergeAt = 11;
constexpr uint64_t kStreamFrom = 64 << 10;

constexpr uint64_t kPrime32_1 = 0x9E3779B1U;
constexpr uint64_t kPrime32_2 = 0x85EBCA77U;
constexpr uint64_t kPrime32_3 = 0xC2B2AE3DU;
constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime64_3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kPrime64_4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kPrime64_5 = 0x27D4EB2F165667C5ULL;

alignas(64) unsigned char secret[kSecretSize];
std::atomic<bool> enabled{false};

uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // little-endian hosts only: the fused path is x86-64
  return v;
}

#ifdef KVS_FUSED_XXH3

__attribute__((target("avx2"))) inline void fold(__m256i& acc, __m256i data, const unsigned char* key) {
  const __m256i mixed = _mm256_xor_si256(data, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key)));
  const __m256i product = _mm256_mul_epu32(mixed, _mm256_srli_epi64(mixed, 32));
  const __m256i swapped = _mm256_shuffle_epi32(data, 0x4E);  // each lane pair's two 64-bit words swapped
  acc = _mm256_add_epi64(acc, _mm256_add_epi64(product, swapped));
}

__attribute__((target("avx2"))) inline void scramble(__m256i& acc, const unsigned char* key) {
  const __m256i prime = _mm256_set1_epi32(static_cast<int>(kPrime32_1));
  __m256i a = _mm256_xor_si256(acc, _mm256_srli_epi64(acc, 47));
  a = _mm256_xor_si256(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key)));
  const __m256i low = _mm256_mul_epu32(a, prime);
  const __m256i high = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), prime);
  acc = _mm256_add_epi64(low, _mm256_slli_epi64(high, 32));
}

// Folds `count` stripes from `src`, numbered from `first`, copying each to `dst` (when set) from the same
// registers; with `stream`, in non-temporal stores (dst 32-byte aligned), which the caller fences
// (store_fence) before the copy is reported done.
__attribute__((target("avx2"))) void fold_stripes(uint64_t* acc, char* dst, const char* src, uint64_t count,
                                                  uint64_t first, bool stream) {
  __m256i a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc));
  __m256i a1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc + 4));
  for (uint64_t n = first; n < first + count; ++n, src += kStripe) {
    const __m256i d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    const __m256i d1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32));
    if (stream) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), d0);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 32), d1);
      dst += kStripe;
    } else if (dst != nullptr) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), d0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), d1);
      dst += kStripe;
    }
    const unsigned char* key = secret + (n % kStripesPerBlock) * 8;
    fold(a0, d0, key);
    fold(a1, d1, key + 32);
    if (n % kStripesPerBlock == kStripesPerBlock - 1) {
      scramble(a0, secret + kScrambleAt);
      scramble(a1, secret + kScrambleAt + 32);
    }
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc), a0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc + 4), a1);
}

void store_fence() {
  _mm_sfence();
}

__attribute__((target("avx2"))) void fold_last(uint64_t* acc, const unsigned char* stripe) {
  __m256i a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc));
  __m256i a1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(acc + 4));
  fold(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(stripe)), secret + kLastStripeAt);
  fold(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(stripe + 32)), secret + kLastStripeAt + 32);
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc), a0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(acc + 4), a1);
}

bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}

#else

void fold_stripes(uint64_t*, char*, const char*, uint64_t, uint64_t, bool) {}
void fold_last(uint64_t*, const unsigned char*) {}
void store_fence() {}
bool has_avx2() {
  return false;
}

#endif

uint64_t fold128(uint64_t a, uint64_t b) {
  const unsigned __int128 product = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(product) ^ static_cast<uint64_t>(product >> 64);
}

uint64_t avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= 0x165667919E3779F9ULL;
  return h ^ (h >> 32);
}

// Every length class the long rules treat apart (one stripe short of a block, a block exactly, a
// scramble, the last stripe overlapping folded ones), in pieces that split stripes and ones that do not.
bool matches_reference(uint64_t (*reference)(const void*, size_t)) {
  const size_t lengths[] = {241,  255,  256,  1000, 1023,  1024,   1025,
                            1087, 1088, 2048, 5000, 65536, 262144, 262147};
  const size_t piece_sizes[] = {1, 7, 63, 64, 65, 1000, 4096, 1 << 20};
  std::vector<char> src(262147), dst_memory(262147 + 64);
  // An aligned destination: large copies then take the non-temporal stores too.
  char* dst = dst_memory.data() + (64 - reinterpret_cast<uintptr_t>(dst_memory.data()) % 64) % 64;
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (auto& c : src) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<char>(x);
  }
  for (size_t length : lengths) {
    for (size_t piece : piece_sizes) {
      if (length / piece > 4096) continue;  // enough: the small pieces are checked on the short lengths
      std::fill(dst, dst + length, 0);
      FusedCopy copy(length);
      for (size_t at = 0; at < length; at += piece) {
        copy.copy(dst + at, src.data() + at, std::min(piece, length - at));
      }
      if (copy.digest() != reference(src.data(), length)) return false;
      if (std::memcmp(dst, src.data(), length) != 0) return false;
    }
  }
  return true;
}

}  // namespace

bool enable_fused(const unsigned char* library_secret, uint64_t (*reference)(const void*, size_t)) {
  if (enabled.load()) return true;
  if (!has_avx2()) return false;
  std::memcpy(secret, library_secret, kSecretSize);
  enabled.store(matches_reference(reference));
  return enabled.load();
}

bool fused_enabled() {
  return enabled.load();
}

FusedCopy::FusedCopy(uint64_t total)
    : acc_{kPrime32_3, kPrime64_1, kPrime64_2, kPrime64_3, kPrime64_4, kPrime32_2, kPrime64_5, kPrime32_1},
      total_(total),
      stripes_((total - 1) / kStripe) {}

void FusedCopy::keep_tail(const char* src, size_t n) {
  const uint64_t tail_from = total_ - kStripe;
  const uint64_t from = std::max(seen_, tail_from);
  const uint64_t to = std::min(seen_ + n, total_);
  if (from < to) std::memcpy(tail_ + (from - tail_from), src + (from - seen_), to - from);
}

void FusedCopy::copy(void* dst, const void* src, size_t n) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  keep_tail(s, n);
  // Bytes up to stripes_ * 64 fold as stripes; the rest feed only the final step (kept in tail_).
  const uint64_t striped_end = stripes_ * kStripe;
  size_t striped = seen_ < striped_end ? static_cast<size_t>(std::min<uint64_t>(n, striped_end - seen_)) : 0;
  seen_ += n;
  n -= striped;
  if (carry_len_ > 0) {  // a stripe begun by the previous piece
    const size_t take = std::min(kStripe - carry_len_, striped);
    std::memcpy(d, s, take);
    std::memcpy(carry_ + carry_len_, s, take);
    carry_len_ += take;
    d += take, s += take, striped -= take;
    if (carry_len_ == kStripe) {
      fold_stripes(acc_, nullptr, reinterpret_cast<const char*>(carry_), 1, stripe_++, false);
      carry_len_ = 0;
    }
  }
  const uint64_t whole = striped / kStripe;
  if (whole > 0) {
    // Large copies store around the cache: the hash needs no second read, and a destination written
    // through the cache is read first (a third of the memory traffic).
    const bool stream = total_ >= kStreamFrom && (reinterpret_cast<uintptr_t>(d) & 31) == 0;
    fold_stripes(acc_, d, s, whole, stripe_, stream);
    streamed_ = streamed_ || stream;
    stripe_ += whole;
    d += whole * kStripe, s += whole * kStripe, striped -= whole * kStripe;
  }
  if (striped > 0) {  // a stripe the next piece finishes
    std::memcpy(d, s, striped);
    std::memcpy(carry_, s, striped);
    carry_len_ = striped;
    d += striped, s += striped;
  }
  if (n > 0) copy_bytes(d, s, n);
  // One fence for every piece's non-temporal stores, after the last byte (a value of 32 paged pieces
  // was fenced 32 times): the bytes are visible before the copy is reported done.
  if (streamed_ && seen_ == total_) store_fence();
}

uint64_t FusedCopy::digest() const {
  alignas(32) uint64_t acc[8];
  std::memcpy(acc, acc_, sizeof(acc));
  fold_last(acc, tail_);
  uint64_t h = total_ * kPrime64_1;
  for (size_t i = 0; i < 4; ++i) {
    h += fold128(acc[2 * i] ^ read64(secret + kMergeAt + 16 * i),
                 acc[2 * i + 1] ^ read64(secret + kMergeAt + 16 * i + 8));
  }
  return avalanche(h);
}

}  // namespace kvs::xxh3
