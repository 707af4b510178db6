#include "meta/offset_allocator.h"

namespace kvs {

OffsetAllocator::OffsetAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity), alignment_(alignment == 0 ? 1 : alignment) {
  if (capacity_ > 0) insert_free(0, capacity_);
}

void OffsetAllocator::insert_free(uint64_t offset, uint64_t size) {
  free_by_offset_[offset] = size;
  free_by_size_.emplace(size, offset);
}

void OffsetAllocator::erase_free(uint64_t offset, uint64_t size) {
  free_by_offset_.erase(offset);
  free_by_size_.erase({size, offset});
}

std::optional<uint64_t> OffsetAllocator::allocate(uint64_t size) {
  if (size == 0 || size > capacity_) return std::nullopt;
  const uint64_t rounded = (size + alignment_ - 1) / alignment_ * alignment_;
  if (rounded < size) return std::nullopt;  // overflow
  // Best fit: the smallest extent that holds the block; ties go to the lowest offset.
  auto it = free_by_size_.lower_bound({rounded, 0});
  if (it == free_by_size_.end()) return std::nullopt;
  const auto [extent_size, offset] = *it;
  erase_free(offset, extent_size);
  if (extent_size > rounded) insert_free(offset + rounded, extent_size - rounded);
  allocated_[offset] = rounded;
  used_ += rounded;
  return offset;
}

bool OffsetAllocator::reserve(uint64_t offset, uint64_t size) {
  if (size == 0 || size > capacity_ || offset % alignment_ != 0) return false;
  const uint64_t rounded = (size + alignment_ - 1) / alignment_ * alignment_;
  if (rounded < size || offset > capacity_ - rounded) return false;
  auto it = free_by_offset_.upper_bound(offset);
  if (it == free_by_offset_.begin()) return false;
  --it;
  const auto [extent, extent_size] = *it;
  if (offset + rounded > extent + extent_size) return false;
  erase_free(extent, extent_size);
  if (offset > extent) insert_free(extent, offset - extent);
  const uint64_t tail = extent + extent_size - (offset + rounded);
  if (tail > 0) insert_free(offset + rounded, tail);
  allocated_[offset] = rounded;
  used_ += rounded;
  return true;
}

bool OffsetAllocator::free(uint64_t offset) {
  auto found = allocated_.find(offset);
  if (found == allocated_.end()) return false;
  uint64_t start = offset;
  uint64_t size = found->second;
  allocated_.erase(found);
  used_ -= size;
  // Coalesce with the free neighbours on both sides.
  auto next = free_by_offset_.lower_bound(start);
  if (next != free_by_offset_.end() && next->first == start + size) {
    size += next->second;
    erase_free(next->first, next->second);
  }
  auto prev = free_by_offset_.lower_bound(start);
  if (prev != free_by_offset_.begin()) {
    --prev;
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      erase_free(prev->first, prev->second);
    }
  }
  insert_free(start, size);
  return true;
}

uint64_t OffsetAllocator::block_size(uint64_t offset) const {
  auto it = allocated_.find(offset);
  return it == allocated_.end() ? 0 : it->second;
}

AllocatorStats OffsetAllocator::stats() const {
  AllocatorStats s;
  s.capacity = capacity_;
  s.used = used_;
  s.free = capacity_ - used_;
  s.largest_free = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  s.allocations = allocated_.size();
  s.free_extents = free_by_offset_.size();
  return s;
}

}  // namespace kvs
