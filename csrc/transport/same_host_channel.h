// The channel both same-host transports open (shm, cuda_ipc): the peer's process watched, its pin table and
// the regions it granted, opened here; each slice one task on the copy pool, pinned in the peer's table for
// its copy (pinned_copy). What differs between them is their `Access`: how a granted region is reached from
// here and how a slice is copied into or out of it.
//
//   struct Access {
//     static constexpr const char* kName;  // the transport, as its region sections name it
//     struct Region { ...; std::shared_ptr<FenceTable> fence; };  // a granted region, opened here
//     static void close(Region&);  // undoes what opened it, when the channel goes
//     // What a slice to a region not opened here gets: OK when it is copied anyway (shm, by CMA).
//     static Status unopened();
//     // Copies the slice, pinned and fenced; `opened` is null for a region not opened here.
//     static Status copy(const Slice&, const RegionInfo&, const Region* opened, const PeerProcess&);
//   };
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/copy_pool.h"
#include "transport/same_host.h"

namespace kvs {

// What a same-host peer granted, opened here: its pin table and its regions by id.
template <typename Access>
struct PeerMemory {
  PeerPinTable table;
  std::unordered_map<uint64_t, typename Access::Region> regions;

  PeerMemory() = default;
  PeerMemory(PeerMemory&&) = default;
  ~PeerMemory() {
    for (auto& [id, region] : regions) Access::close(region);
  }
};

template <typename Access>
class SameHostChannel : public Channel, public std::enable_shared_from_this<SameHostChannel<Access>> {
 public:
  SameHostChannel(CopyPool* pool, EngineDescriptor peer, std::unique_ptr<PeerProcess> process,
                  PeerMemory<Access> memory)
      : pool_(pool),
        peer_(std::move(peer)),
        slots_(peer_, Access::kName),
        process_(std::move(process)),
        memory_(std::move(memory)) {}
  bool healthy() const override { return process_->alive(); }

  void submit(std::vector<Slice>&& slices) override {
    std::vector<std::function<void()>> tasks;
    tasks.reserve(slices.size());
    for (auto& s : slices) {
      tasks.emplace_back(
          [self = this->shared_from_this(), slice = std::move(s)] { slice.done(self->run(slice)); });
    }
    pool_->post(std::move(tasks));
  }

 private:
  Status run(const Slice& slice) const {
    if (!healthy()) return Status(Code::kConnectionFailed, "peer process is gone");
    auto it = memory_.regions.find(slice.region_id);
    const typename Access::Region* opened = it != memory_.regions.end() ? &it->second : nullptr;
    if (opened == nullptr) {
      Status refused = Access::unopened();
      if (!refused.ok()) return refused;
    }
    return pinned_copy(
        peer_, memory_.table.slots(), slots_.of(slice.region_id), opened ? opened->fence.get() : nullptr,
        slice, [&](const RegionInfo& region) { return Access::copy(slice, region, opened, *process_); });
  }

  CopyPool* pool_;
  EngineDescriptor peer_;
  PeerSlots slots_;
  std::unique_ptr<PeerProcess> process_;
  PeerMemory<Access> memory_;
};

// The channel over what a peer granted, as open_channel returns it.
template <typename Access>
StatusOr<std::shared_ptr<Channel>> same_host_channel(CopyPool* pool, const EngineDescriptor& peer,
                                                     std::unique_ptr<PeerProcess> process,
                                                     PeerMemory<Access> memory) {
  return std::shared_ptr<Channel>(
      std::make_shared<SameHostChannel<Access>>(pool, peer, std::move(process), std::move(memory)));
}

}  // namespace kvs
