// XXH3-64, the store's object checksum, over pieces of memory in one call that needs no interpreter
// lock. The hash functions are the ones the xxhash Python package (a kvstore dependency) exports from its
// extension module, looked up at run time: nothing is needed to build, and the digests are the very ones
// Python's xxhash.xxh3_64 gives. Until load() succeeds, callers hash in Python.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace kvs::xxh3 {

// Loads the functions from `library` (a shared object exporting the XXH3 streaming API). Idempotent.
Status load(const std::string& library);
bool loaded();

// Digest of the concatenation of n pieces. Requires loaded().
uint64_t hash_pieces(const uint64_t* addrs, const uint64_t* lengths, size_t n);

// hash_pieces() of each of `values` values (value v: the next counts[v] pieces) into out[v]. A large
// batch is split over a few threads: one thread hashing from memory reaches about half the memory
// bandwidth. Requires loaded().
void hash_values(const uint64_t* addrs, const uint64_t* lengths, const uint64_t* counts, size_t values,
                 uint64_t* out);

// A digest over bytes given in order, on this thread's hashing state (one stream at a time per thread).
// Requires loaded().
class Stream {
 public:
  Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  void* state_;
};

// Copies n bytes and returns their digest, hashing each chunk of the destination just after copying it
// (still in cache): one pass over memory where a copy and then a hash took two. Requires loaded().
uint64_t copy_and_hash(void* dst, const void* src, size_t n);
// The same, adding the bytes to `hash` (a digest over several pieces, copied in order).
void copy_and_hash(void* dst, const void* src, size_t n, Stream& hash);

}  // namespace kvs::xxh3
