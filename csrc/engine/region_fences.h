// The fences of a fenced region (core/fence.h) as the node's Python drives them, by region id: kills,
// floors, announcements and the owner's own access. An id that names no fenced region, or lists that
// disagree, are kInvalidArgument.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "core/registry.h"

namespace kvs {

// Fences the allocations off; true once no transfer admitted before can still touch them.
StatusOr<bool> kill_allocations(MemoryRegistry& registry, uint64_t region_id,
                                const std::vector<uint32_t>& slots, const std::vector<uint64_t>& gens,
                                int timeout_ms);

// Fences off every allocation of generation <= floor; true once drained.
StatusOr<bool> raise_fence_floor(MemoryRegistry& registry, uint64_t region_id, uint64_t floor,
                                 int timeout_ms);

// Fences off every allocation of generation <= floor but the kept (slot, generation) ones, each of which
// stays alive in its own generation only (its slot's older ones are killed): a storage node mounting again
// with objects it holds. One pass over the table; true once drained. kInvalidArgument when the lists
// differ in length, a kept slot lies past the table or is named twice, or a kept generation is 0.
StatusOr<bool> kill_allocations_but(MemoryRegistry& registry, uint64_t region_id, uint64_t floor,
                                    const std::vector<uint32_t>& kept_slots,
                                    const std::vector<uint64_t>& kept_gens, int timeout_ms);

// Admits the owner's own access to a live allocation (FenceTable::enter_owned): true when alive; the
// caller then calls fence_leave once done.
StatusOr<bool> fence_enter(MemoryRegistry& registry, uint64_t region_id, uint32_t slot, uint64_t gen);

// Ends an access fence_enter admitted (nothing for an unknown region or slot).
void fence_leave(MemoryRegistry& registry, uint64_t region_id, uint32_t slot);

// Names the allocations the master handed out, (slot, generation, [start, start + size)) each; all or
// nothing: kOutOfRange (none announced) when one lies outside the region.
Status announce_allocations(MemoryRegistry& registry, uint64_t region_id, const std::vector<uint32_t>& slots,
                            const std::vector<uint64_t>& gens, const std::vector<uint64_t>& starts,
                            const std::vector<uint64_t>& sizes);

}  // namespace kvs
