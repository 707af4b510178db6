#include "transport/cuda_ipc/cuda_ipc_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <unordered_map>

#include "common/bytes.h"
#include "cuda/driver.h"
#include "transport/copy.h"
#include "transport/same_host.h"

namespace kvs::cuda_ipc {
namespace {

constexpr uint8_t kSectionVersion = 1;
// A region's grant: u64 offset of the region in the allocation the handle opens, then the handle.
constexpr size_t kGrantBytes = 8 + cuda::kIpcHandleBytes;

// A peer region as reached from here: its first byte in this process, on which GPU's context it was
// opened (copies run on that GPU's streams), and its fences.
struct OpenedRegion {
  uint64_t base = 0;
  uint64_t allocation = 0;  // what ipc_close takes; 0 for memory of this process (nothing opened)
  int device = 0;
  std::shared_ptr<FenceTable> fence;
};

struct PeerGpuMemory {
  PinSlot* table = nullptr;
  std::unordered_map<uint64_t, OpenedRegion> regions;

  void release() {
    for (auto& [id, r] : regions) {
      if (r.allocation != 0) cuda::ipc_close(r.device, r.allocation);
    }
    regions.clear();
    if (table) munmap(table, sizeof(PinSlot) * PinTable::kSlots);
    table = nullptr;
  }
};

class CudaIpcChannel : public Channel, public std::enable_shared_from_this<CudaIpcChannel> {
 public:
  CudaIpcChannel(CopyPool* pool, EngineDescriptor peer, std::unique_ptr<PeerProcess> process,
                 PeerGpuMemory memory)
      : pool_(pool), peer_(std::move(peer)), process_(std::move(process)), memory_(std::move(memory)) {}
  ~CudaIpcChannel() override { memory_.release(); }

  bool healthy() const override { return process_->alive(); }

  void submit(std::vector<Slice>&& slices) override {
    std::vector<std::function<void()>> tasks;
    tasks.reserve(slices.size());
    for (auto& s : slices) {
      tasks.emplace_back([self = shared_from_this(), slice = std::move(s)] { slice.done(self->run(slice)); });
    }
    pool_->post(std::move(tasks));
  }

 private:
  Status run(const Slice& slice) const {
    if (!healthy()) return Status(Code::kConnectionFailed, "peer process is gone");
    auto it = memory_.regions.find(slice.region_id);
    if (it == memory_.regions.end()) return Status(Code::kNotFound, "peer did not share that GPU region");
    const OpenedRegion& opened = it->second;
    return pinned_copy(peer_, memory_.table, opened.fence.get(), slice, [&](const RegionInfo&) {
      if (!slice.batch->begin_copy(slice.request)) return Status(Code::kTimedOut, "request already over");
      const uint64_t local = reinterpret_cast<uint64_t>(slice.local);
      const uint64_t remote = opened.base + slice.offset;
      const bool read = slice.op == TransferOp::kRead;
      const cuda::Copy copy{read ? local : remote, read ? remote : local, slice.length};
      Status st = cuda::copy(opened.device, &copy, 1);
      slice.batch->end_copy();
      return st;
    });
  }

  CopyPool* pool_;
  EngineDescriptor peer_;
  std::unique_ptr<PeerProcess> process_;
  PeerGpuMemory memory_;
};

// Opens one granted region here. A handle opens a whole allocation: the region must lie inside what was
// opened, so a peer cannot point this process's copies past the memory it mapped.
StatusOr<OpenedRegion> open_region(const RegionInfo& region, const Grant& grant, bool same_process) {
  if (grant.payload.size() != kGrantBytes) return Status(Code::kProtocolError, "bad cuda_ipc grant");
  ByteReader r(grant.payload.data(), grant.payload.size());
  const uint64_t offset = r.get<uint64_t>();
  OpenedRegion out;
  out.device = region.location.device < cuda::device_count() ? region.location.device : 0;
  if (same_process) {
    out.base = region.base;  // the registry checked it is device memory of this process
    return out;
  }
  auto base = cuda::ipc_open(out.device, grant.payload.data() + 8);
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

StatusOr<PeerGpuMemory> open_peer(const EngineDescriptor& peer, const std::string& socket,
                                  bool same_process) {
  std::vector<GrantRequest> wanted;
  std::vector<const RegionInfo*> regions;
  for (const auto& r : peer.regions) {
    if (r.location.kind == MemoryKind::kGpu && wanted.size() < kMaxGrantsPerRequest) {
      wanted.push_back({r.id, r.key});
      regions.push_back(&r);
    }
  }
  auto grants = request_grants(socket, wanted, peer.name);
  if (!grants.ok()) return grants.status();
  PeerGpuMemory memory;
  Status st;
  for (size_t i = 0; i < grants.value().size(); ++i) {
    Grant& grant = grants.value()[i];
    if (st.ok() && grant.granted && i == 0) {
      void* p = mmap(nullptr, sizeof(PinSlot) * PinTable::kSlots, PROT_READ | PROT_WRITE, MAP_SHARED,
                     grant.fds[0], 0);
      if (p == MAP_FAILED) st = errno_status(Code::kNoMemory, "mapping the peer's pin table");
      if (st.ok()) memory.table = static_cast<PinSlot*>(p);
    } else if (st.ok() && grant.granted) {
      // A region that fails to open stays unreachable here (its requests fail saying so); others go on.
      auto opened = open_region(*regions[i - 1], grant, same_process);
      if (opened.ok() && grant.fds[1] >= 0) {
        auto fence = FenceTable::map(grant.fds[1]);
        grant.fds[1] = -1;  // FenceTable::map took it
        if (fence.ok()) opened.value().fence = std::move(fence.value());
        if (!fence.ok()) st = fence.status();
      }
      if (opened.ok()) memory.regions[regions[i - 1]->id] = std::move(opened.value());
    }
    close_grant(grant);
  }
  if (st.ok() && memory.table == nullptr) st = Status(Code::kNotSupported, "peer offers no pin table");
  if (!st.ok()) {
    memory.release();
    return st;
  }
  return memory;
}

StatusOr<SameHostSection> decode_section(const std::vector<char>* section) {
  return decode_same_host_section(section, kSectionVersion, "cuda_ipc");
}

class CudaIpcTransport : public Transport {
 public:
  CudaIpcTransport(const TransportContext& context, const Options& options)
      : context_(context),
        slice_size_(static_cast<uint64_t>(options.get("slice_size"))),
        partial_allocations_(options.get("partial_allocations") != 0),
        socket_name_(same_host_socket_name("cuda", context.engine_id)) {}
  ~CudaIpcTransport() override { stop(); }

  Status start() override {
    if (!cuda::ipc_available().ok()) return Status::OK();  // not offered: no section, no server
    MemoryRegistry* registry = context_.registry.get();
    const bool partial = partial_allocations_;
    server_ = std::make_unique<GrantServer>([registry, partial](uint64_t id, uint64_t key) {
      Grant grant;
      if (id == 0) {
        const int table = registry->pin_table_fd();
        grant.fds[0] = table >= 0 ? fcntl(table, F_DUPFD_CLOEXEC, 0) : -1;
        grant.granted = grant.fds[0] >= 0;
        return grant;
      }
      auto region = registry->find(id);
      if (!region || !region->info().exported || region->info().key != key ||
          region->info().location.kind != MemoryKind::kGpu) {
        return grant;
      }
      auto exported = cuda::ipc_export(region->info().base);
      auto range = cuda::device_range(region->info().base);
      // A handle opens the whole allocation: unless allowed, share only regions that are whole allocations.
      if (!exported.ok() || !range.ok() ||
          (!partial && (exported.value().offset != 0 || range.value().length != region->info().length))) {
        return grant;
      }
      ByteWriter w;
      w.put<uint64_t>(exported.value().offset);
      grant.payload = std::move(w.bytes());
      grant.payload.insert(grant.payload.end(), exported.value().handle,
                           exported.value().handle + cuda::kIpcHandleBytes);
      grant.fds[1] = registry->dup_fence_fd(id, key);
      grant.granted = true;
      return grant;
    });
    return server_->start(socket_name_);
  }
  void stop() override {
    if (server_) server_->stop();
  }
  std::vector<char> descriptor_section() const override {
    if (!server_) return {};
    return encode_same_host_section(kSectionVersion, {getpid(), socket_name_});
  }
  std::map<std::string, std::string> describe_section(const std::vector<char>& section) const override {
    auto peer = decode_section(&section);
    if (!peer.ok()) return {{"error", peer.status().message()}};
    return {{"pid", std::to_string(peer.value().pid)}, {"socket", peer.value().socket}};
  }

  uint64_t slice_size() const override { return slice_size_; }
  bool reachable(const EngineDescriptor& peer) const override {
    return server_ && peer.host_id == context_.host_id && decode_section(peer.section("cuda_ipc")).ok();
  }
  StatusOr<std::shared_ptr<Channel>> connect(const EngineDescriptor& peer) override {
    auto section = decode_section(peer.section("cuda_ipc"));
    if (!section.ok()) return section.status();
    auto process = PeerProcess::open(section.value().pid);
    if (!process.ok()) return process.status();
    auto memory = open_peer(peer, section.value().socket, section.value().pid == getpid());
    if (!memory.ok()) return memory.status();
    return std::shared_ptr<Channel>(std::make_shared<CudaIpcChannel>(
        context_.pool, peer, std::move(process.value()), std::move(memory.value())));
  }

 private:
  TransportContext context_;
  uint64_t slice_size_;
  bool partial_allocations_;
  std::string socket_name_;
  std::unique_ptr<GrantServer> server_;
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
