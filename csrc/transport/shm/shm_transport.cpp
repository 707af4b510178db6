#include "transport/shm/shm_transport.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <unordered_map>

#include "common/bytes.h"
#include "transport/copy.h"
#include "transport/shm/shm_server.h"

namespace kvs::shm {
namespace {

struct Mapping {
  char* base = nullptr;
  uint64_t length = 0;
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
  ShmChannel(CopyPool* pool, SegmentDescriptor peer, int pidfd, std::unordered_map<uint64_t, Mapping> maps)
      : pool_(pool), peer_(std::move(peer)), pidfd_(pidfd), maps_(std::move(maps)) {}
  ~ShmChannel() override {
    for (auto& [id, m] : maps_) munmap(m.base, m.length);
    if (pidfd_ >= 0) close(pidfd_);
  }

  bool healthy() const override {
    // The pidfd becomes readable when the peer process exits.
    pollfd pfd{pidfd_, POLLIN, 0};
    return pidfd_ < 0 || poll(&pfd, 1, 0) == 0;
  }

  void submit(std::vector<Slice>&& slices) override {
    std::vector<std::function<void()>> tasks;
    tasks.reserve(slices.size());
    for (auto& s : slices) {
      tasks.emplace_back([self = shared_from_this(), slice = std::move(s)] { self->run(slice); });
    }
    pool_->post(std::move(tasks));
  }

 private:
  void run(const Slice& slice) const {
    if (!healthy()) return slice.done(Status(Code::kConnectionFailed, "peer process is gone"));
    const RegionInfo* region = peer_.find_region(slice.region_id);
    if (region == nullptr || region->key != slice.key) {
      return slice.done(Status(Code::kNotFound, "unknown region"));
    }
    if (!in_bounds(slice.offset, slice.length, region->length)) {
      return slice.done(Status(Code::kOutOfRange, "request outside the region"));
    }
    auto it = maps_.find(slice.region_id);
    if (it != maps_.end()) return copy_slice(slice, it->second.base + slice.offset);
    slice.done(cma_copy(slice, static_cast<pid_t>(peer_.pid), region->base));
  }

  CopyPool* pool_;
  SegmentDescriptor peer_;
  int pidfd_;
  std::unordered_map<uint64_t, Mapping> maps_;
};

StatusOr<std::unordered_map<uint64_t, Mapping>> map_peer_regions(const SegmentDescriptor& peer) {
  std::unordered_map<uint64_t, Mapping> maps;
  ByteWriter req;
  std::vector<const RegionInfo*> wanted;
  for (const auto& r : peer.regions) {
    if (r.shareable) wanted.push_back(&r);
  }
  if (wanted.empty()) return maps;
  if (wanted.size() > kMaxRegionsPerRequest) wanted.resize(kMaxRegionsPerRequest);
  req.put<uint32_t>(static_cast<uint32_t>(wanted.size()));
  for (const auto* r : wanted) {
    req.put<uint64_t>(r->id);
    req.put<uint64_t>(r->key);
  }
  sockaddr_un addr{};
  unsigned len = 0;
  if (abstract_address(peer.shm_socket, &addr, &len) != 0) return Status(Code::kProtocolError, "bad shm socket");
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno_status(Code::kIoError, "unix socket");
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  Status st;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      send(fd, req.bytes().data(), req.bytes().size(), MSG_NOSIGNAL) < 0) {
    st = errno_status(Code::kConnectionFailed, "shm handshake with " + peer.name);
  }
  for (size_t i = 0; st.ok() && i < wanted.size(); ++i) {
    char reply[9];
    iovec iov{reply, sizeof(reply)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    if (recvmsg(fd, &msg, MSG_CMSG_CLOEXEC) != sizeof(reply)) {
      st = Status(Code::kConnectionFailed, "shm handshake with " + peer.name + " cut short");
      break;
    }
    uint64_t id;
    std::memcpy(&id, reply, 8);
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    if (cm == nullptr || cm->cmsg_type != SCM_RIGHTS) continue;  // refused: reached by CMA instead
    int memfd;
    std::memcpy(&memfd, CMSG_DATA(cm), sizeof(int));
    const RegionInfo* region = peer.find_region(id);
    if (region == nullptr || reply[8] != 1) {
      close(memfd);
      continue;
    }
    void* base = mmap(nullptr, region->length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, memfd, 0);
    close(memfd);
    if (base == MAP_FAILED) {
      st = errno_status(Code::kNoMemory, "mapping a peer region");
      break;
    }
    maps[id] = Mapping{static_cast<char*>(base), region->length};
  }
  close(fd);
  if (!st.ok()) {
    for (auto& [id, m] : maps) munmap(m.base, m.length);
    return st;
  }
  return maps;
}

}  // namespace

bool ShmTransport::reachable(const SegmentDescriptor& peer) const {
  return (peer.transports & kTransportShm) && !peer.shm_socket.empty() && peer.host_id == host_id_;
}

StatusOr<std::shared_ptr<Channel>> ShmTransport::connect(const SegmentDescriptor& peer) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(peer.pid), 0));
  if (pidfd < 0) return errno_status(Code::kConnectionFailed, "peer process " + std::to_string(peer.pid));
  auto maps = map_peer_regions(peer);
  if (!maps.ok()) {
    close(pidfd);
    return maps.status();
  }
  return std::shared_ptr<Channel>(std::make_shared<ShmChannel>(pool_, peer, pidfd, std::move(maps.value())));
}

}  // namespace kvs::shm
