#include "common/copy_bytes.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVS_VECTOR_COPY 1
#endif

namespace kvs {

#ifdef KVS_VECTOR_COPY
namespace {

// glibc uses `rep movsb` between about 2 KiB and the L2 size (1 MiB on the Zen parts measured); outside
// that range its own vector loops are as fast as this one or faster.
constexpr size_t kVectorFrom = 2048;
constexpr size_t kVectorTo = 1 << 20;

// Copies whole 128-byte blocks from `s` to the 32-byte aligned `d` while n >= 128, storing each 32-byte
// line with `store` (a cached or a streaming store); returns the bytes left.
template <void (*store)(__m256i*, __m256i)>
__attribute__((target("avx2"), always_inline)) inline size_t copy_blocks(char*& d, const char*& s, size_t n) {
  for (; n >= 128; d += 128, s += 128, n -= 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    store(reinterpret_cast<__m256i*>(d), a);
    store(reinterpret_cast<__m256i*>(d + 32), b);
    store(reinterpret_cast<__m256i*>(d + 64), c);
    store(reinterpret_cast<__m256i*>(d + 96), e);
  }
  return n;
}

__attribute__((target("avx2"), always_inline)) inline void store_cached(__m256i* d, __m256i v) {
  _mm256_store_si256(d, v);
}

__attribute__((target("avx2"), always_inline)) inline void store_streaming(__m256i* d, __m256i v) {
  _mm256_stream_si256(d, v);
}

__attribute__((target("avx2"))) void copy_avx2(char* d, const char* s, size_t n) {
  // One unaligned store covers the head; then the destination is 32-byte aligned.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  const size_t head = 32 - (reinterpret_cast<uintptr_t>(d) & 31);
  d += head;
  s += head;
  n = copy_blocks<store_cached>(d, s, n - head);
  if (n > 0) std::memcpy(d, s, n);
}

constexpr size_t kStreamMin = 256;  // (shorter: a fence is not worth it)

// Whole 32-byte lines of the destination stored around the cache; the head up to the first aligned line
// and the tail after the last whole one are copied as usual.
__attribute__((target("avx2"))) void stream_avx2(char* d, const char* s, size_t n) {
  const size_t head = (32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n = copy_blocks<store_streaming>(d, s, n - head);
  for (; n >= 32; d += 32, s += 32, n -= 32) {
    store_streaming(reinterpret_cast<__m256i*>(d), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  }
  _mm_sfence();  // (the streamed lines are visible before anything this thread stores next)
  if (n > 0) std::memcpy(d, s, n);
}

bool has_avx2() {
  __builtin_cpu_init();  // needed before __builtin_cpu_supports in a static initializer
  return __builtin_cpu_supports("avx2");
}

const bool kHasAvx2 = has_avx2();

}  // namespace
#endif

void copy_bytes(void* dst, const void* src, size_t n) {
  if (n == 0) return;  // (an empty range may come with null pointers, which memcpy may not be given)
#ifdef KVS_VECTOR_COPY
  if (n >= kVectorFrom && n < kVectorTo && kHasAvx2) {
    copy_avx2(static_cast<char*>(dst), static_cast<const char*>(src), n);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

void copy_streaming(void* dst, const void* src, size_t n) {
#ifdef KVS_VECTOR_COPY
  if (n >= kStreamMin && kHasAvx2) {
    stream_avx2(static_cast<char*>(dst), static_cast<const char*>(src), n);
    return;
  }
#endif
  copy_bytes(dst, src, n);
}

}  // namespace kvs
