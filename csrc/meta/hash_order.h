// An ordered set of keys held by their 64-bit hashes, first to go first: the eviction policies' sampled
// shadow caches and ghost lists (kvstore.master.eviction). ~24 bytes an entry in flat arrays, none of it
// a Python object (a collection walked millions of Python entries: ~450 ms a full collection at 10M
// objects). Two keys with the same hash count as one: these orders only estimate hit rates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace kvs::meta {

class HashOrder {
 public:
  HashOrder();

  // Puts `h` last (or first), moving it if present.
  void add(uint64_t h, bool front);
  // Moves `h` last if present; false if absent.
  bool touch(uint64_t h);
  // Removes `h`; false if absent.
  bool discard(uint64_t h);
  bool contains(uint64_t h) const { return find(h) != kNone; }
  // Removes and returns the first entry (none when empty).
  std::optional<uint64_t> pop_first();
  // pop_first until at most `limit` entries are left (a ghost list cut to its bound once per batch of
  // removals); the number removed.
  size_t trim(size_t limit);
  size_t size() const { return size_; }
  size_t memory_bytes() const;

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Node {
    uint64_t h = 0;
    uint32_t prev = kNone;  // kNone: the head
    uint32_t next = kNone;
  };
  uint32_t find(uint64_t h) const;
  void link_last(uint32_t n);
  void link_first(uint32_t n);
  void unlink(uint32_t n);
  void index_insert(uint32_t n);
  void index_erase(uint64_t h);
  void grow();

  std::vector<Node> nodes_;
  std::vector<uint32_t> free_;
  std::vector<uint32_t> index_;  // open addressing over node numbers, linear probing
  uint32_t first_ = kNone;
  uint32_t last_ = kNone;
  size_t size_ = 0;
};

}  // namespace kvs::meta
