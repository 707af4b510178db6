#include "transport/shm/shm_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <memory>
#include <unordered_map>

#include "core/fence.h"
#include "core/pin_table.h"
#include "transport/copy.h"
#include "transport/same_host.h"

namespace kvs::shm {
namespace {

struct Mapping {
  char* base = nullptr;
  uint64_t length = 0;
  std::shared_ptr<FenceTable> fence;  // the region's allocation fences, when it has them
};

// What the peer's shm server handed over: its pin table and its memfd regions, mapped here.
struct PeerMemory {
  PinSlot* table = nullptr;
  std::unordered_map<uint64_t, Mapping> regions;

  void unmap() {
    for (auto& [id, m] : regions) munmap(m.base, m.length);
    regions.clear();
    if (table) munmap(table, sizeof(PinSlot) * PinTable::kSlots);
    table = nullptr;
  }
};

// Cross-memory attach for regions that are not memfd-backed.
Status cma_copy(const Slice& slice, pid_t pid, uint64_t remote_base) {
  if (!slice.batch->begin_copy(slice.request)) return Status(Code::kTimedOut, "request already over");
  uint64_t done = 0;
  Status st;
  while (done < slice.length) {
    iovec local{slice.local + done, slice.length - done};
    iovec remote{reinterpret_cast<void*>(remote_base + slice.offset + done), slice.length - done};
    const ssize_t n = slice.op == TransferOp::kRead ? process_vm_readv(pid, &local, 1, &remote, 1, 0)
                                                    : process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) {
      st = errno == ESRCH ? Status(Code::kConnectionFailed, "peer process is gone")
                          : errno_status(Code::kIoError, "process_vm_readv/writev");
      break;
    }
    done += static_cast<uint64_t>(n);
  }
  slice.batch->end_copy();
  return st;
}

class ShmChannel : public Channel, public std::enable_shared_from_this<ShmChannel> {
 public:
  ShmChannel(CopyPool* pool, EngineDescriptor peer, std::unique_ptr<PeerProcess> process, PeerMemory memory)
      : pool_(pool), peer_(std::move(peer)), process_(std::move(process)), memory_(std::move(memory)) {}
  ~ShmChannel() override { memory_.unmap(); }

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
    const Mapping* mapped = it != memory_.regions.end() ? &it->second : nullptr;
    return pinned_copy(peer_, memory_.table, mapped ? mapped->fence.get() : nullptr, slice,
                       [&](const RegionInfo& region) {
                         return mapped ? copy_slice(slice, mapped->base + slice.offset)
                                       : cma_copy(slice, process_->pid(), region.base);
                       });
  }

  CopyPool* pool_;
  EngineDescriptor peer_;
  std::unique_ptr<PeerProcess> process_;
  PeerMemory memory_;
};

Status map_fd(int fd, uint64_t length, int flags, void** out) {
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | flags, fd, 0);
  if (p == MAP_FAILED) return errno_status(Code::kNoMemory, "mapping peer memory");
  *out = p;
  return Status::OK();
}

// Maps what the peer grants: its pin table, and per memfd region the memory and its fence table (a refused
// region is reached by CMA instead).
StatusOr<PeerMemory> map_peer(const EngineDescriptor& peer, const std::string& socket_name) {
  std::vector<GrantRequest> wanted;
  for (const auto& r : peer.regions) {
    if (r.shareable && wanted.size() < kMaxGrantsPerRequest) wanted.push_back({r.id, r.key});
  }
  auto grants = request_grants(socket_name, wanted, peer.name);
  if (!grants.ok()) return grants.status();
  PeerMemory memory;
  Status st;
  for (size_t i = 0; i < grants.value().size(); ++i) {
    Grant& grant = grants.value()[i];
    if (!st.ok() || !grant.granted) {
      close_grant(grant);
      continue;
    }
    void* base = nullptr;
    if (i == 0) {
      st = map_fd(grant.fds[0], sizeof(PinSlot) * PinTable::kSlots, 0, &base);
      if (st.ok()) memory.table = static_cast<PinSlot*>(base);
      close_grant(grant);
      continue;
    }
    const RegionInfo* region = peer.find_region(wanted[i - 1].id);
    std::shared_ptr<FenceTable> fence;
    if (grant.fds[1] >= 0) {
      auto table = FenceTable::map(grant.fds[1]);
      grant.fds[1] = -1;  // FenceTable::map took it
      if (!table.ok()) st = table.status();
      if (table.ok()) fence = std::move(table.value());
    }
    if (st.ok()) st = map_fd(grant.fds[0], region->length, MAP_POPULATE, &base);
    if (st.ok())
      memory.regions[region->id] = Mapping{static_cast<char*>(base), region->length, std::move(fence)};
    close_grant(grant);
  }
  if (st.ok() && memory.table == nullptr) st = Status(Code::kNotSupported, "peer offers no pin table");
  if (!st.ok()) {
    memory.unmap();
    return st;
  }
  return memory;
}

constexpr uint8_t kSectionVersion = 1;

StatusOr<SameHostSection> decode_section(const std::vector<char>* section) {
  return decode_same_host_section(section, kSectionVersion, "shm");
}

class ShmTransport : public Transport {
 public:
  ShmTransport(const TransportContext& context, const Options& options)
      : context_(context), slice_size_(static_cast<uint64_t>(options.get("slice_size"))) {
    socket_name_ = same_host_socket_name("", context.engine_id);
  }
  ~ShmTransport() override { stop(); }

  Status start() override {
    MemoryRegistry* registry = context_.registry.get();
    server_ = std::make_unique<GrantServer>([registry](uint64_t id, uint64_t key) {
      // The pin table, or a region's memfd and its fence table's when it has one.
      Grant grant;
      if (id == 0) {
        const int table = registry->pin_table_fd();
        grant.fds[0] = table >= 0 ? fcntl(table, F_DUPFD_CLOEXEC, 0) : -1;
      } else {
        grant.fds[0] = registry->dup_memfd(id, key);
        if (grant.fds[0] >= 0) grant.fds[1] = registry->dup_fence_fd(id, key);
      }
      grant.granted = grant.fds[0] >= 0;
      return grant;
    });
    return server_->start(socket_name_);
  }
  void stop() override {
    if (server_) server_->stop();
  }
  std::vector<char> descriptor_section() const override {
    return encode_same_host_section(kSectionVersion, {getpid(), socket_name_});
  }
  std::map<std::string, std::string> describe_section(const std::vector<char>& section) const override {
    auto peer = decode_section(&section);
    if (!peer.ok()) return {{"error", peer.status().message()}};
    return {{"pid", std::to_string(peer.value().pid)}, {"socket", peer.value().socket}};
  }

  uint64_t slice_size() const override { return slice_size_; }
  bool reachable(const EngineDescriptor& peer) const override {
    return peer.host_id == context_.host_id && decode_section(peer.section("shm")).ok();
  }
  StatusOr<std::shared_ptr<Channel>> connect(const EngineDescriptor& peer) override {
    auto section = decode_section(peer.section("shm"));
    if (!section.ok()) return section.status();
    auto process = PeerProcess::open(section.value().pid);
    if (!process.ok()) return process.status();
    auto memory = map_peer(peer, section.value().socket);
    if (!memory.ok()) return memory.status();
    return std::shared_ptr<Channel>(std::make_shared<ShmChannel>(
        context_.pool, peer, std::move(process.value()), std::move(memory.value())));
  }

 private:
  TransportContext context_;
  uint64_t slice_size_;
  std::string socket_name_;
  std::unique_ptr<GrantServer> server_;
};

}  // namespace
}  // namespace kvs::shm

namespace kvs {

const TransportEntry& shm_transport_entry() {
  static const TransportEntry entry{
      "shm",
      Capabilities{10, kReachSameProcess | kReachSameHost, kAllHostKinds, kAllHostKinds},
      {copy_slice_size_option()},
      [](const TransportContext& context, const Options& options) -> std::unique_ptr<Transport> {
        return std::make_unique<shm::ShmTransport>(context, options);
      },
  };
  return entry;
}

}  // namespace kvs
