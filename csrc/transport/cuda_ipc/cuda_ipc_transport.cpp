#include "transport/cuda_ipc/cuda_ipc_transport.h"

#include <unistd.h>

#include <cstring>
#include <memory>

#include "common/bytes.h"
#include "cuda/driver.h"
#include "transport/copy.h"
#include "transport/same_host.h"
#include "transport/same_host_channel.h"

namespace kvs::cuda_ipc {
namespace {

constexpr uint8_t kSectionVersion = 1;
// A region's grant: u64 offset of the region in the allocation the handle opens, then the handle.
constexpr size_t kGrantBytes = 8 + cuda::kIpcHandleBytes;

// How cuda_ipc reaches a peer's GPU regions: opened here by their IPC handles, copied on the GPU's streams.
struct CudaIpcAccess {
  static constexpr const char* kName = "cuda_ipc";
  // A peer region as reached from here: its first byte in this process, on which GPU's context it was
  // opened (copies run on that GPU's streams), and its fences.
  struct Region {
    uint64_t base = 0;
    uint64_t allocation = 0;  // what ipc_close takes; 0 for memory of this process (nothing opened)
    int device = 0;
    std::shared_ptr<FenceTable> fence;
  };
  static void close(Region& opened) {
    if (opened.allocation != 0) cuda::ipc_close(opened.device, opened.allocation);
  }
  static Status unopened() { return Status(Code::kNotFound, "peer did not share that GPU region"); }
  static Status copy(const Slice& slice, const RegionInfo&, const Region* opened, const PeerProcess&) {
    if (!slice.batch->begin_copy(slice.request)) return Status(Code::kTimedOut, "request already over");
    const uint64_t local = reinterpret_cast<uint64_t>(slice.local);
    const uint64_t remote = opened->base + slice.offset;
    const bool read = slice.op == TransferOp::kRead;
    const cuda::Copy copy{read ? local : remote, read ? remote : local, slice.length};
    Status st = cuda::copy(opened->device, &copy, 1);
    slice.batch->end_copy();
    return st;
  }
};
// Opens one granted region here. A handle opens a whole allocation: the region must lie inside what was
// opened, so a peer cannot point this process's copies past the memory it mapped.
StatusOr<CudaIpcAccess::Region> open_region(const RegionInfo& region, const std::vector<char>& grant,
                                            bool same_process) {
  if (grant.size() != kGrantBytes) return Status(Code::kProtocolError, "bad cuda_ipc grant");
  ByteReader r(grant.data(), grant.size());
  const uint64_t offset = r.get<uint64_t>();
  CudaIpcAccess::Region out;
  out.device = region.location.device < cuda::device_count() ? region.location.device : 0;
  if (same_process) {
    out.base = region.base;  // the registry checked it is device memory of this process
    return out;
  }
  auto base = cuda::ipc_open(out.device, grant.data() + 8);
  if (!base.ok()) return base.status();
  out.allocation = base.value();
  auto range = cuda::device_range(out.allocation);
  if (!range.ok() || range.value().base != out.allocation ||
      !in_bounds(offset, region.length, range.value().length)) {
    cuda::ipc_close(out.device, out.allocation);
    return Status(Code::kProtocolError, "peer's GPU region lies outside the allocation it shared");
  }
  out.base = out.allocation + offset;
  return out;
}

class CudaIpcTransport : public SameHostTransport {
 public:
  CudaIpcTransport(const TransportContext& context, const Options& options)
      : SameHostTransport(CudaIpcAccess::kName, kSectionVersion, context,
                          static_cast<uint64_t>(options.get("slice_size"))),
        partial_allocations_(options.get("partial_allocations") != 0) {}

  // The grant server calls grant(): stop it before this object goes.
  ~CudaIpcTransport() override { stop(); }

 protected:
  bool offered() const override { return cuda::ipc_available().ok(); }
  bool wants(const RegionInfo& region) const override { return region.location.kind == MemoryKind::kGpu; }
  bool serves(const RegionInfo& region) const override { return wants(region); }

  // The IPC handle of the region's allocation and the region's offset in it, and its fence table.
  Grant grant(uint64_t id, uint64_t key, const SessionKeys& keys) const override {
    Grant grant;
    auto region = context().registry->presented(id, key, keys);
    if (!region || region->info().location.kind != MemoryKind::kGpu) {
      return grant;
    }
    auto exported = cuda::ipc_export(region->info().base);
    // A handle opens the whole allocation: unless allowed, share only regions that are whole allocations.
    if (!exported.ok() || (!partial_allocations_ && (exported.value().offset != 0 ||
                                                     exported.value().allocation != region->info().length))) {
      return grant;
    }
    ByteWriter w;
    w.put<uint64_t>(exported.value().offset);
    grant.payload = std::move(w.bytes());
    grant.payload.insert(grant.payload.end(), exported.value().handle,
                         exported.value().handle + cuda::kIpcHandleBytes);
    grant.fds[1] = context().registry->dup_fence_fd(id, key, keys);
    grant.granted = true;
    return grant;
  }

  // Opens each granted region; one that fails to open stays unreachable (its requests say so).
  StatusOr<std::shared_ptr<Channel>> open_channel(const EngineDescriptor& peer,
                                                  std::unique_ptr<PeerProcess> process,
                                                  PeerGrants grants) override {
    const bool same_process = process->pid() == getpid();
    PeerMemory<CudaIpcAccess> memory;
    memory.table = std::move(grants.table);
    for (auto& g : grants.regions) {
      if (!g.granted) continue;
      auto opened = open_region(*g.region, g.payload, same_process);
      if (!opened.ok()) continue;
      opened.value().fence = std::move(g.fence);
      memory.regions[g.region->id] = std::move(opened.value());
    }
    return same_host_channel(context().pool, peer, std::move(process), std::move(memory));
  }

 private:
  bool partial_allocations_;
};

}  // namespace
}  // namespace kvs::cuda_ipc

namespace kvs {

const TransportEntry& cuda_ipc_transport_entry() {
  constexpr KindMask kGpuBit = kind_bit(MemoryKind::kGpu);
  static const TransportEntry entry{
      "cuda_ipc",
      // After shm (host memory stays on it); chosen for what only it moves: peers' GPU memory.
      Capabilities{20, kReachSameProcess | kReachSameHost, kAllHostKinds | kGpuBit, kGpuBit},
      {copy_slice_size_option(),
       {"partial_allocations", OptionKind::kBool, 0, 0, 1,
        "Share GPU regions that are part of a larger allocation (a CUDA IPC handle opens the whole "
        "allocation, so same-host peers holding the key could reach the rest of it)."}},
      [](const TransportContext& context, const Options& options) -> std::unique_ptr<Transport> {
        return std::make_unique<cuda_ipc::CudaIpcTransport>(context, options);
      },
  };
  return entry;
}

}  // namespace kvs
