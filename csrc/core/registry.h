// Registered memory regions and the rkey-style access checks every peer request goes through.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "core/disk_file.h"
#include "core/fence.h"
#include "core/host_pinning.h"
#include "core/memory.h"
#include "core/session.h"

namespace kvs {

struct RegionInfo {
  uint64_t id = 0;
  uint64_t key = 0;  // random, never sent: a peer presents its derivation for its session (core/session.h)
  uint64_t base = 0;
  uint64_t length = 0;
  MemoryLocation location;  // host, host-pinned, gpu:N, file
  bool exported = false;    // listed in the engine descriptor, reachable by peers
  bool read_only = false;   // transfers may read it, never write it (never exported)
  bool shareable = false;   // backed by a memfd that same-host peers may map
  // Host memory's NUMA node (given at registration, else where its first page lies); -1: unknown. Local
  // only (not in the descriptor): it picks the NICs a transfer from this memory leaves on.
  int32_t numa_node = -1;
};

class Region {
 public:
  Region(RegionInfo info, int memfd, bool owned) : info_(std::move(info)), memfd_(memfd), owned_(owned) {}
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  const RegionInfo& info() const { return info_; }
  int memfd() const { return memfd_; }
  // Allocation fences of a storage region carved by the master; null for plain regions.
  FenceTable* fence() const { return fence_.get(); }
  // How an allocated pinned region was page-locked (kNone for every other region).
  PinMethod pin_method() const { return pin_method_; }
  // The file a region of kind file stands for (its offsets are the file's); null for memory.
  DiskFile* file() const { return file_.get(); }

 private:
  friend class MemoryRegistry;
  friend class RegionPin;
  RegionInfo info_;
  int memfd_;
  bool owned_;  // allocated by the registry: unmapped and closed when the last reference goes
  std::atomic<int64_t> pins_{0};
  bool removed_ = false;               // guarded by the registry mutex
  std::shared_ptr<FenceTable> fence_;  // set once, before the region is reachable through a fence
  PinMethod pin_method_ = PinMethod::kNone;
  std::shared_ptr<DiskFile> file_;  // kind file only
};

class MemoryRegistry;

// Keeps a region's memory valid while a transfer touches it; unregister waits for all pins.
class RegionPin {
 public:
  RegionPin() = default;
  RegionPin(MemoryRegistry* registry, std::shared_ptr<Region> region);
  RegionPin(RegionPin&& other) noexcept;
  RegionPin& operator=(RegionPin&& other) noexcept;
  RegionPin(const RegionPin&) = delete;
  RegionPin& operator=(const RegionPin&) = delete;
  ~RegionPin() { release(); }

  explicit operator bool() const { return region_ != nullptr; }
  const RegionInfo& info() const { return region_->info(); }
  char* at(uint64_t offset) const { return reinterpret_cast<char*>(region_->info().base + offset); }
  FenceTable* fence() const { return region_->fence(); }
  DiskFile* file() const { return region_->file(); }
  void release();

 private:
  MemoryRegistry* registry_ = nullptr;
  std::shared_ptr<Region> region_;
};

// Told of every exported region as it is added, and again before it is removed (after its last pin).
struct ExportHooks {
  std::function<void(const RegionInfo&)> exported;
  std::function<void(const RegionInfo&)> revoked;
};

class MemoryRegistry {
 public:
  void set_export_hooks(ExportHooks hooks);
  MemoryRegistry() = default;
  ~MemoryRegistry();
  MemoryRegistry(const MemoryRegistry&) = delete;
  MemoryRegistry& operator=(const MemoryRegistry&) = delete;

  // Registers caller-owned memory. Ranges may not overlap an existing region; host memory must be
  // mapped. A read-only region is never exported and never the destination of a transfer. numa_node -1:
  // found from the memory itself.
  StatusOr<RegionInfo> add(uint64_t base, uint64_t length, MemoryLocation location, bool exported,
                           bool read_only = false, int32_t numa_node = -1);
  // Allocates pre-faulted memfd-backed host memory owned by the registry (shareable with same-host peers).
  // With fence_slots > 0 the region is carved into fenced allocations (see core/fence.h). `pinned`
  // page-locks it (kind host-pinned; see core/host_pinning.h) or fails saying why.
  // `populate` false leaves the pages to prefault() (a large region faulted in by several threads;
  // huge pages are asked for); pinned regions are always populated. `backing_file` non-empty: the memory
  // is that file (shared memory: /dev/shm or hugetlbfs), created or reused as it is when it already has
  // `length` bytes (a restarted storage node maps its objects again), else emptied to `length`.
  StatusOr<RegionInfo> allocate(uint64_t length, bool exported, uint32_t fence_slots = 0, bool pinned = false,
                                bool populate = true, const std::string& backing_file = "");
  // Faults in [offset, offset+length) of a region allocate() made without populating it; safe to call
  // on disjoint ranges from several threads.
  Status prefault(uint64_t id, uint64_t offset, uint64_t length);
  // Registers a file (opened read-only, O_DIRECT) as a region of kind file: its offsets are the file's,
  // it has no address, and transports that serve kind file read it for peers (never write it).
  StatusOr<RegionInfo> add_file(const std::string& path, bool exported);
  // Removes a region: new requests fail at once; returns once no transfer touches it any more.
  Status remove(uint64_t id);
  void remove_all();

  // Peer request: region must be exported, key must be its key in the peer's session, [offset,
  // offset+length) inside it.
  StatusOr<RegionPin> pin_remote(uint64_t id, uint64_t key, uint64_t offset, uint64_t length,
                                 const SessionKeys& session);
  // Local side of a transfer: [addr, addr+length) must lie inside one registered region.
  StatusOr<RegionPin> pin_local(uint64_t addr, uint64_t length);

  // Shares ownership of a region's memory: for registry-allocated regions the mapping outlives
  // unregister until the last holder lets go (Python views of allocated memory hold one).
  std::shared_ptr<Region> find(uint64_t id) const;
  std::vector<RegionInfo> exported() const;
  std::vector<RegionInfo> all() const;
  // The exported region `id` when `key` is its key in the peer's session; null otherwise.
  std::shared_ptr<Region> presented(uint64_t id, uint64_t key, const SessionKeys& session) const;
  // Duplicated memfd of an exported shareable region, for handing to a same-host peer; -1 if refused.
  int dup_memfd(uint64_t id, uint64_t key, const SessionKeys& session) const;
  // Duplicated memfd of its fence table; -1 if refused or the region has none.
  int dup_fence_fd(uint64_t id, uint64_t key, const SessionKeys& session) const;

 private:
  friend class RegionPin;
  void unpin(Region* region);
  StatusOr<RegionInfo> insert(RegionInfo info, int memfd, bool owned,
                              std::shared_ptr<FenceTable> fence = nullptr,
                              PinMethod pin_method = PinMethod::kNone);
  StatusOr<RegionInfo> insert_locked(RegionInfo info, int memfd, bool owned,
                                     std::shared_ptr<FenceTable> fence, PinMethod pin_method);

  ExportHooks hooks_;  // set before any region is added
  mutable std::mutex mu_;
  std::condition_variable unpinned_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<Region>> by_id_;
  std::map<uint64_t, std::shared_ptr<Region>> by_base_;
};

// Checked bounds: offset + length within total, without overflow.
inline bool in_bounds(uint64_t offset, uint64_t length, uint64_t total) {
  return offset <= total && length <= total - offset;
}

uint64_t random_u64();

}  // namespace kvs
