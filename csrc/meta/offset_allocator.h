// Space inside one segment: best-fit over free extents kept by size and by offset, coalescing on
// free. O(log n) per operation; the master runs one per mounted segment, clients one per staging
// buffer.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

namespace kvs {

struct AllocatorStats {
  uint64_t capacity = 0;
  uint64_t used = 0;  // bytes handed out, alignment padding included
  uint64_t free = 0;
  uint64_t largest_free = 0;
  uint64_t allocations = 0;
  uint64_t free_extents = 0;
  // 1 - largest_free / free: 0 when all free space is one extent.
  double fragmentation() const {
    return free == 0 ? 0.0 : 1.0 - static_cast<double>(largest_free) / static_cast<double>(free);
  }
};

class OffsetAllocator {
 public:
  OffsetAllocator(uint64_t capacity, uint64_t alignment);

  // Offset of a block of at least `size` bytes, or nothing when no free extent is large enough.
  std::optional<uint64_t> allocate(uint64_t size);
  // Takes exactly [offset, offset + size rounded up) if it is free (rebuilding the map of a segment from
  // a record of its blocks); false, and nothing changes, when any of it is taken or misaligned.
  bool reserve(uint64_t offset, uint64_t size);
  // Frees a block by its offset; false if no block starts there (nothing changes).
  bool free(uint64_t offset);
  // Size reserved for the block at offset (0 if none).
  uint64_t block_size(uint64_t offset) const;
  AllocatorStats stats() const;
  uint64_t capacity() const { return capacity_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t largest_free() const { return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first; }

 private:
  void insert_free(uint64_t offset, uint64_t size);
  void erase_free(uint64_t offset, uint64_t size);

  uint64_t capacity_;
  uint64_t alignment_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_by_offset_;           // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset)
  std::unordered_map<uint64_t, uint64_t> allocated_;      // offset -> size
};

}  // namespace kvs
