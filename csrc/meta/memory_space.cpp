#include "meta/memory_space.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>

namespace kvs::meta {

std::optional<uint32_t> SlotPool::take() {
  if (!free_.empty()) {
    const uint32_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  if (next_ < capacity_) return next_++;
  return std::nullopt;
}

bool SlotPool::give_back(uint32_t slot) {
  if (slot >= next_) return false;
  free_.push_back(slot);
  return true;
}

void SlotPool::restart(const std::vector<uint32_t>& taken) {
  uint32_t next = 0;
  for (uint32_t s : taken) next = std::max(next, s + 1);
  std::vector<bool> held(next, false);
  for (uint32_t s : taken) held[s] = true;
  free_.clear();
  for (uint32_t s = next; s-- > 0;) {  // highest first: the lowest free slot is reused first
    if (!held[s]) free_.push_back(s);
  }
  next_ = next;
}

void MemorySpace::add(uint32_t id, std::string_view host, std::shared_ptr<OffsetAllocator> allocator,
                      std::shared_ptr<SlotPool> slots) {
  for (const Entry& e : segments_) {
    if (e.id == id) throw std::invalid_argument("segment " + std::to_string(id) + " is placed already");
  }
  if (!allocator || !slots) throw std::invalid_argument("a segment needs an allocator and a slot pool");
  segments_.push_back({id, host_number(host), true, std::move(allocator), std::move(slots)});
}

void MemorySpace::remove(uint32_t id) {
  segments_.erase(
      std::remove_if(segments_.begin(), segments_.end(), [id](const Entry& e) { return e.id == id; }),
      segments_.end());
}

void MemorySpace::set_placeable(uint32_t id, bool placeable) {
  for (Entry& e : segments_) {
    if (e.id == id) e.placeable = placeable;
  }
}

uint32_t MemorySpace::host_number(std::string_view host) {
  auto [it, added] = hosts_.try_emplace(std::string(host), static_cast<uint32_t>(hosts_.size()));
  return it->second;
}

bool MemorySpace::fits(const Entry& e, uint64_t size) const {
  // The allocator rounds a block up to its alignment: room is counted for what it will carve.
  const uint64_t align = e.allocator->alignment();
  const uint64_t rounded = (size + align - 1) / align * align;
  return e.placeable && rounded >= size && e.slots->has_slot() && e.allocator->largest_free() >= rounded;
}

void MemorySpace::carve(Entry& e, uint64_t size, std::vector<Placed>& out) {
  const auto offset = e.allocator->allocate(size);
  const auto slot = e.slots->take();
  if (!offset || !slot) throw std::logic_error("carved a segment placement found no room in");
  out.push_back({e.id, *slot, *offset});
}

uint64_t MemorySpace::next_random() {
  // splitmix64: a full-period 64-bit sequence, enough to draw among segments (no secret rides on it).
  uint64_t z = (random_state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

bool MemorySpace::roomier(const Entry& a, const Entry& b) const {
  // The larger share of its capacity free in one extent (a larger segment is not favoured for its size
  // alone: each fills in proportion). Cross-multiplied in 128 bits: exact, no division.
  using Wide = unsigned __int128;
  return static_cast<Wide>(a.allocator->largest_free()) * b.allocator->capacity() >
         static_cast<Wide>(b.allocator->largest_free()) * a.allocator->capacity();
}

uint32_t MemorySpace::pick_of_two(const std::vector<uint32_t>& among) {
  // Each drawn in proportion to its capacity: a segment 4x larger must take 4x the writes to fill evenly,
  // more than uniform draws of two could give it (at most 2/n - 1/n^2 of them).
  cumulative_.clear();
  // Saturated, not wrapped: capacities of up to 2^62 each sum past 2^64 in four mounts, and a wrapped
  // sum would leave cumulative_ unsorted (a draw past its end). Only past 16 EiB in all does a later
  // segment draw less than its share.
  uint64_t total = 0;
  for (uint32_t i : among) {
    const uint64_t capacity = segments_[i].allocator->capacity();
    total = capacity > UINT64_MAX - total ? UINT64_MAX : total + capacity;
    cumulative_.push_back(total);
  }
  const auto draw = [&] {
    using Wide = unsigned __int128;
    const auto point = static_cast<uint64_t>((static_cast<Wide>(next_random()) * total) >> 64);
    const auto at = std::upper_bound(cumulative_.begin(), cumulative_.end(), point) - cumulative_.begin();
    return among[static_cast<size_t>(at)];
  };
  const uint32_t first = draw();
  const uint32_t second = draw();
  return roomier(segments_[second], segments_[first]) ? second : first;
}

bool MemorySpace::place_one(uint64_t size, uint32_t count, const std::vector<uint32_t>& exclude,
                            const std::vector<uint32_t>& avoid_hosts, std::vector<Placed>& out) {
  fitting_.clear();
  for (uint32_t i = 0; i < segments_.size(); ++i) {
    const Entry& e = segments_[i];
    if (fits(e, size) && std::find(exclude.begin(), exclude.end(), e.id) == exclude.end()) {
      fitting_.push_back(i);
    }
  }
  if (fitting_.size() < count) return false;
  if (count == 1 && avoid_hosts.empty()) {  // the usual put: one draw of two
    carve(segments_[pick_of_two(fitting_)], size, out);
    return true;
  }
  chosen_.clear();
  std::vector<uint32_t> hosts(avoid_hosts);
  for (bool distinct_host : {true, false}) {  // hosts not used yet first, then any segment not chosen
    while (chosen_.size() < count) {
      open_.clear();
      for (uint32_t i : fitting_) {
        if (std::find(chosen_.begin(), chosen_.end(), i) != chosen_.end()) continue;
        if (distinct_host && std::find(hosts.begin(), hosts.end(), segments_[i].host) != hosts.end())
          continue;
        open_.push_back(i);
      }
      if (open_.empty()) break;
      const uint32_t i = pick_of_two(open_);
      chosen_.push_back(i);
      hosts.push_back(segments_[i].host);
    }
  }
  if (chosen_.size() < count) return false;  // (fitting_ held count: not reached)
  for (uint32_t i : chosen_) carve(segments_[i], size, out);
  return true;
}

size_t MemorySpace::place_many(const std::vector<uint64_t>& sizes, uint32_t count, std::vector<Placed>& out) {
  static const std::vector<uint32_t> kNone;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (!place_one(sizes[i], count, kNone, kNone, out)) return i;
  }
  return sizes.size();
}

bool MemorySpace::place(uint64_t size, uint32_t count, const std::vector<uint32_t>& exclude,
                        const std::vector<std::string>& spread_from, std::vector<Placed>& out) {
  std::vector<uint32_t> avoid;
  for (const std::string& host : spread_from) {
    auto it = hosts_.find(host);
    if (it != hosts_.end()) avoid.push_back(it->second);
  }
  return place_one(size, count, exclude, avoid, out);
}

}  // namespace kvs::meta
