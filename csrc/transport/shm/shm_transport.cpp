#include "transport/shm/shm_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "core/fence.h"
#include "core/pin_table.h"
#include "transport/copy.h"
#include "transport/same_host.h"
#include "transport/same_host_channel.h"

namespace kvs::shm {
namespace {

// Cross-memory attach for regions that are not memfd-backed.
Status cma_copy_one(TransferOp op, char* local, uint64_t length, pid_t pid, uint64_t remote) {
  for (uint64_t done = 0; done < length;) {
    iovec mine{local + done, length - done};
    iovec theirs{reinterpret_cast<void*>(remote + done), length - done};
    const ssize_t n = op == TransferOp::kRead ? process_vm_readv(pid, &mine, 1, &theirs, 1, 0)
                                              : process_vm_writev(pid, &mine, 1, &theirs, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return errno == ESRCH ? Status(Code::kConnectionFailed, "peer process is gone")
                            : errno_status(Code::kIoError, "process_vm_readv/writev");
    }
    done += static_cast<uint64_t>(n);
  }
  return Status::OK();
}

Status cma_copy(const Slice& slice, pid_t pid, uint64_t remote_base) {
  if (!begin_copy_in_time(slice)) return Status(Code::kTimedOut, "request over (or past its deadline)");
  uint64_t remote = remote_base + slice.offset;
  Status st;
  if (slice.piece_count == 0) {
    st = cma_copy_one(slice.op, slice.local, slice.length, pid, remote);
  }
  for (uint32_t k = 0; k < slice.piece_count && st.ok(); ++k) {
    st = cma_copy_one(slice.op, slice.pieces[k].addr, slice.pieces[k].length, pid, remote);
    remote += slice.pieces[k].length;
  }
  slice.batch->end_copy();
  return st;
}

// How shm reaches a peer's regions: memfd regions mapped here (one memcpy), the rest by CMA.
struct ShmAccess {
  static constexpr const char* kName = "shm";
  struct Region {
    char* base = nullptr;
    uint64_t length = 0;
    std::shared_ptr<FenceTable> fence;  // the region's allocation fences, when it has them
  };
  static void close(Region& mapped) { munmap(mapped.base, mapped.length); }
  static Status unopened() { return Status::OK(); }  // (reached by CMA)
  static Status copy(const Slice& slice, const RegionInfo& region, const Region* mapped,
                     const PeerProcess& process) {
    return mapped ? copy_slice(slice, mapped->base + slice.offset)
                  : cma_copy(slice, process.pid(), region.base);
  }
};

constexpr uint8_t kSectionVersion = 1;

class ShmTransport : public SameHostTransport {
 public:
  ShmTransport(const TransportContext& context, const Options& options)
      : SameHostTransport(ShmAccess::kName, kSectionVersion, context,
                          static_cast<uint64_t>(options.get("slice_size"))) {}

  // The grant server calls grant(): stop it before this object goes.
  ~ShmTransport() override { stop(); }

 protected:
  bool wants(const RegionInfo& region) const override { return region.shareable; }
  bool serves(const RegionInfo& region) const override {  // (memfd regions mapped, the rest by CMA)
    return (kAllHostKinds & kind_bit(region.location.kind)) != 0;
  }

  // A region's memfd, and its fence table's when it has one.
  Grant grant(uint64_t id, uint64_t key, const SessionKeys& keys) const override {
    Grant grant;
    grant.fds[0] = context().registry->dup_memfd(id, key, keys);
    if (grant.fds[0] >= 0) grant.fds[1] = context().registry->dup_fence_fd(id, key, keys);
    grant.granted = grant.fds[0] >= 0;
    return grant;
  }

  // Maps each granted memfd region (a refused one is reached by CMA instead).
  StatusOr<std::shared_ptr<Channel>> open_channel(const EngineDescriptor& peer,
                                                  std::unique_ptr<PeerProcess> process,
                                                  PeerGrants grants) override {
    PeerMemory<ShmAccess> memory;
    memory.table = std::move(grants.table);
    for (auto& g : grants.regions) {
      if (!g.granted || g.fd < 0) continue;
      void* p = mmap(nullptr, g.region->length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, g.fd, 0);
      if (p == MAP_FAILED) return errno_status(Code::kNoMemory, "mapping peer memory");
      memory.regions[g.region->id] =
          ShmAccess::Region{static_cast<char*>(p), g.region->length, std::move(g.fence)};
    }
    return same_host_channel(context().pool, peer, std::move(process), std::move(memory));
  }
};

}  // namespace
}  // namespace kvs::shm

namespace kvs {

const TransportEntry& shm_transport_entry() {
  static const TransportEntry entry{
      "shm",
      Capabilities{10, kReachSameProcess | kReachSameHost, kAllHostKinds, kAllHostKinds, false, true},
      {copy_slice_size_option()},
      [](const TransportContext& context, const Options& options) -> std::unique_ptr<Transport> {
        return std::make_unique<shm::ShmTransport>(context, options);
      },
  };
  return entry;
}

}  // namespace kvs
