#include "engine/region_fences.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "core/fence.h"

namespace kvs {
namespace {

// The region, when it has fences.
std::shared_ptr<Region> fenced(MemoryRegistry& registry, uint64_t region_id) {
  auto region = registry.find(region_id);
  return region && region->fence() != nullptr ? region : nullptr;
}

Status no_fenced_region(bool or_lists) {
  return Status(Code::kInvalidArgument,
                or_lists ? "no fenced region with that id, or bad lists" : "no fenced region with that id");
}

// The kept (slot, generation) pairs ascending by slot, or why they cannot be kept in a table of `slots`.
StatusOr<std::vector<std::pair<uint32_t, uint64_t>>> kept_by_slot(const std::vector<uint32_t>& slots,
                                                                  const std::vector<uint64_t>& gens,
                                                                  uint32_t table_slots) {
  if (slots.size() != gens.size()) return no_fenced_region(true);
  std::vector<std::pair<uint32_t, uint64_t>> kept(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] >= table_slots) return Status(Code::kInvalidArgument, "a kept slot lies past the table");
    if (gens[i] == 0) return Status(Code::kInvalidArgument, "a kept allocation has generation 0");
    kept[i] = {slots[i], gens[i]};
  }
  const auto by_slot = [](const auto& a, const auto& b) { return a.first < b.first; };
  if (!std::is_sorted(kept.begin(), kept.end(), by_slot)) std::sort(kept.begin(), kept.end(), by_slot);
  const auto same_slot = [](const auto& a, const auto& b) { return a.first == b.first; };
  if (std::adjacent_find(kept.begin(), kept.end(), same_slot) != kept.end()) {
    return Status(Code::kInvalidArgument, "a kept slot is named twice");
  }
  return kept;
}

}  // namespace

StatusOr<bool> kill_allocations_but(MemoryRegistry& registry, uint64_t region_id, uint64_t floor,
                                    const std::vector<uint32_t>& kept_slots,
                                    const std::vector<uint64_t>& kept_gens, int timeout_ms) {
  auto region = fenced(registry, region_id);
  if (!region) return no_fenced_region(kept_slots.size() != kept_gens.size());
  auto kept = kept_by_slot(kept_slots, kept_gens, region->fence()->slots());
  if (!kept.ok()) return kept.status();
  return region->fence()->kill_all_but(floor, kept.value(), timeout_ms);
}

StatusOr<bool> kill_allocations(MemoryRegistry& registry, uint64_t region_id,
                                const std::vector<uint32_t>& slots, const std::vector<uint64_t>& gens,
                                int timeout_ms) {
  auto region = fenced(registry, region_id);
  if (!region || slots.size() != gens.size()) return no_fenced_region(true);
  return region->fence()->kill(slots, gens, timeout_ms);
}

StatusOr<bool> raise_fence_floor(MemoryRegistry& registry, uint64_t region_id, uint64_t floor,
                                 int timeout_ms) {
  auto region = fenced(registry, region_id);
  if (!region) return no_fenced_region(false);
  return region->fence()->raise_floor(floor, timeout_ms);
}

StatusOr<bool> fence_enter(MemoryRegistry& registry, uint64_t region_id, uint32_t slot, uint64_t gen) {
  auto region = fenced(registry, region_id);
  if (!region) return no_fenced_region(false);
  return region->fence()->enter_owned(slot, gen);
}

void fence_leave(MemoryRegistry& registry, uint64_t region_id, uint32_t slot) {
  auto region = fenced(registry, region_id);
  if (region && slot < region->fence()->slots()) region->fence()->leave(slot);
}

Status announce_allocations(MemoryRegistry& registry, uint64_t region_id, const std::vector<uint32_t>& slots,
                            const std::vector<uint64_t>& gens, const std::vector<uint64_t>& starts,
                            const std::vector<uint64_t>& sizes) {
  auto region = fenced(registry, region_id);
  const size_t n = slots.size();
  if (!region || gens.size() != n || starts.size() != n || sizes.size() != n) return no_fenced_region(true);
  for (size_t i = 0; i < n; ++i) {
    if (!in_bounds(starts[i], sizes[i], region->info().length)) {
      return Status(Code::kOutOfRange, "an announced allocation lies outside the region");
    }
  }
  for (size_t i = 0; i < n; ++i) region->fence()->announce(slots[i], gens[i], starts[i], sizes[i]);
  return Status::OK();
}

}  // namespace kvs
