#include "transport/shm/shm_transport.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <unordered_map>

#include "common/bytes.h"
#include "core/fence.h"
#include "core/pin_table.h"
#include "transport/copy.h"
#include "transport/shm/shm_server.h"

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
  ShmChannel(CopyPool* pool, EngineDescriptor peer, pid_t pid, int pidfd, PeerMemory memory)
      : pool_(pool), peer_(std::move(peer)), pid_(pid), pidfd_(pidfd), memory_(std::move(memory)) {}
  ~ShmChannel() override {
    memory_.unmap();
    close(pidfd_);
  }

  bool healthy() const override {
    pollfd pfd{pidfd_, POLLIN, 0};  // a pidfd turns readable when the process exits
    return poll(&pfd, 1, 0) == 0;
  }

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
    const RegionInfo* region = peer_.find_region(slice.region_id);
    if (region == nullptr || region->key != slice.key) return Status(Code::kNotFound, "unknown region");
    if (!in_bounds(slice.offset, slice.length, region->length)) {
      return Status(Code::kOutOfRange, "request outside the region");
    }
    if (region->slot == kNoSlot)
      return Status(Code::kNotSupported, "region is not reachable by shared memory");
    if (!PinTable::pin(memory_.table, region->slot, region->id)) {
      return Status(Code::kNotFound, "region was unregistered by the peer");
    }
    auto it = memory_.regions.find(slice.region_id);
    Status st;
    {
      FenceEntry fence(it != memory_.regions.end() ? it->second.fence.get() : nullptr, slice.fence_slot,
                       slice.fence_gen);
      st = fence.status();
      if (st.ok()) {
        st = it != memory_.regions.end() ? copy_slice(slice, it->second.base + slice.offset)
                                         : cma_copy(slice, pid_, region->base);
      }
    }
    PinTable::unpin(memory_.table, region->slot);
    return st;
  }

  CopyPool* pool_;
  EngineDescriptor peer_;
  pid_t pid_;
  int pidfd_;
  PeerMemory memory_;
};

// Receives one datagram (u64 id, u8 granted) and the fds attached to it: the memory's, then its fence
// table's (-1 where absent).
Status receive_grant(int sock, uint64_t* id, int* fd, int* fence_fd) {
  char reply[9];
  iovec iov{reply, sizeof(reply)};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != sizeof(reply)) {
    return Status(Code::kConnectionFailed, "shm handshake cut short");
  }
  std::memcpy(id, reply, 8);
  int fds[2] = {-1, -1};
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  if (cm != nullptr && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
    const size_t n = std::min<size_t>(2, (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    std::memcpy(fds, CMSG_DATA(cm), n * sizeof(int));
  }
  if (reply[8] != 1) {
    for (int f : fds) {
      if (f >= 0) close(f);
    }
    fds[0] = fds[1] = -1;
  }
  *fd = fds[0];
  *fence_fd = fds[1];
  return Status::OK();
}

Status map_fd(int fd, uint64_t length, int flags, void** out) {
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | flags, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return errno_status(Code::kNoMemory, "mapping peer memory");
  *out = p;
  return Status::OK();
}

StatusOr<PeerMemory> map_peer(const EngineDescriptor& peer, const std::string& socket_name) {
  std::vector<const RegionInfo*> wanted;
  for (const auto& r : peer.regions) {
    if (r.shareable && wanted.size() < kMaxRegionsPerRequest) wanted.push_back(&r);
  }
  ByteWriter req;
  req.put<uint32_t>(static_cast<uint32_t>(wanted.size()));
  for (const auto* r : wanted) {
    req.put<uint64_t>(r->id);
    req.put<uint64_t>(r->key);
  }
  sockaddr_un addr{};
  unsigned len = 0;
  if (abstract_address(socket_name, &addr, &len) != 0) return Status(Code::kProtocolError, "bad shm socket");
  const int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (sock < 0) return errno_status(Code::kIoError, "unix socket");
  timeval tv{2, 0};
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  PeerMemory memory;
  Status st;
  if (connect(sock, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      send(sock, req.bytes().data(), req.bytes().size(), MSG_NOSIGNAL) < 0) {
    st = errno_status(Code::kConnectionFailed, "shm handshake with " + peer.name);
  }
  for (size_t i = 0; st.ok() && i <= wanted.size(); ++i) {
    uint64_t id = 0;
    int fd = -1;
    int fence_fd = -1;
    st = receive_grant(sock, &id, &fd, &fence_fd);
    if (!st.ok()) break;
    std::shared_ptr<FenceTable> fence;
    if (fence_fd >= 0) {
      auto table = FenceTable::map(fence_fd);
      if (!table.ok()) {
        if (fd >= 0) close(fd);
        st = table.status();
        break;
      }
      fence = std::move(table.value());
    }
    void* base = nullptr;
    if (i == 0) {
      if (id != 0 || fd < 0) {
        if (fd >= 0) close(fd);
        st = Status(Code::kNotSupported, "peer offers no pin table");
        break;
      }
      st = map_fd(fd, sizeof(PinSlot) * PinTable::kSlots, 0, &base);
      if (st.ok()) memory.table = static_cast<PinSlot*>(base);
      continue;
    }
    const RegionInfo* region = peer.find_region(id);
    if (fd < 0) continue;  // refused: that region is reached by CMA instead
    if (region == nullptr) {
      close(fd);
      continue;
    }
    st = map_fd(fd, region->length, MAP_POPULATE, &base);
    if (st.ok()) memory.regions[id] = Mapping{static_cast<char*>(base), region->length, std::move(fence)};
  }
  close(sock);
  if (!st.ok()) {
    memory.unmap();
    return st;
  }
  return memory;
}

// Section: u8 version, u32 pid, string socket name.
constexpr uint8_t kSectionVersion = 1;

struct PeerSection {
  pid_t pid = 0;
  std::string socket;
};

StatusOr<PeerSection> decode_section(const std::vector<char>* section) {
  if (section == nullptr) return Status(Code::kNotSupported, "peer does not offer shared memory");
  ByteReader r(section->data(), section->size());
  PeerSection out;
  if (r.get<uint8_t>() != kSectionVersion) {
    return Status(Code::kProtocolError, "peer speaks another version of the shm transport");
  }
  out.pid = static_cast<pid_t>(r.get<uint32_t>());
  out.socket = r.get_string(256);
  if (!r.ok() || !r.at_end() || out.socket.empty()) return Status(Code::kProtocolError, "bad shm section");
  return out;
}

class ShmTransport : public Transport {
 public:
  ShmTransport(const TransportContext& context, const Options& options)
      : context_(context), slice_size_(static_cast<uint64_t>(options.get("slice_size"))) {
    char sock[64];
    std::snprintf(sock, sizeof(sock), "kvstore-%016llx", static_cast<unsigned long long>(context.engine_id));
    socket_name_ = sock;
  }
  ~ShmTransport() override { stop(); }

  Status start() override {
    server_ = std::make_unique<ShmServer>(context_.registry.get());
    return server_->start(socket_name_);
  }
  void stop() override {
    if (server_) server_->stop();
  }
  std::vector<char> descriptor_section() const override {
    ByteWriter w;
    w.put<uint8_t>(kSectionVersion);
    w.put<uint32_t>(static_cast<uint32_t>(getpid()));
    w.put_string(socket_name_);
    return std::move(w.bytes());
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
    const pid_t pid = section.value().pid;
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (pidfd < 0) return errno_status(Code::kConnectionFailed, "peer process " + std::to_string(pid));
    auto memory = map_peer(peer, section.value().socket);
    if (!memory.ok()) {
      close(pidfd);
      return memory.status();
    }
    return std::shared_ptr<Channel>(
        std::make_shared<ShmChannel>(context_.pool, peer, pid, pidfd, std::move(memory.value())));
  }

 private:
  TransportContext context_;
  uint64_t slice_size_;
  std::string socket_name_;
  std::unique_ptr<ShmServer> server_;
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
