#include "transport/same_host.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "common/bytes.h"
#include "common/hmac.h"
#include "common/net.h"

namespace kvs {
namespace {

void close_grant(Grant& grant) {
  for (int& fd : grant.fds) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

constexpr size_t kHeader = 9;  // u64 region id, u8 granted

// Socket address for an abstract name (leading NUL added here).
bool abstract_address(const std::string& name, sockaddr_un* addr, socklen_t* len) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof(addr->sun_path)) return false;
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return true;
}

void set_timeouts(int fd, int seconds) {
  timeval tv{seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

bool send_grant(int fd, uint64_t id, const Grant& grant) {
  std::vector<char> reply(kHeader + grant.payload.size());
  std::memcpy(reply.data(), &id, 8);
  reply[8] = grant.granted ? 1 : 0;
  std::copy(grant.payload.begin(), grant.payload.end(), reply.begin() + kHeader);
  const size_t nfds = grant.fds[0] < 0 ? 0 : (grant.fds[1] < 0 ? 1 : 2);
  iovec iov{reply.data(), reply.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(cm), grant.fds, sizeof(int) * nfds);
  }
  return retry_on_signal([&] { return sendmsg(fd, &msg, MSG_NOSIGNAL); }) >= 0;
}

Status receive_grant(int sock, uint64_t expected_id, Grant* grant) {
  std::vector<char> reply(kHeader + kMaxGrantPayload);
  iovec iov{reply.data(), reply.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = retry_on_signal([&] { return recvmsg(sock, &msg, MSG_CMSG_CLOEXEC); });
  cmsghdr* cm = n >= 0 ? CMSG_FIRSTHDR(&msg) : nullptr;
  if (cm != nullptr && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
    const size_t count = std::min<size_t>(2, (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    std::memcpy(grant->fds, CMSG_DATA(cm), count * sizeof(int));
  }
  uint64_t id = 0;
  if (n >= static_cast<ssize_t>(kHeader)) std::memcpy(&id, reply.data(), 8);
  if (n < static_cast<ssize_t>(kHeader) || (msg.msg_flags & MSG_TRUNC) || id != expected_id) {
    close_grant(*grant);
    return Status(Code::kConnectionFailed, "same-host handshake cut short or out of order");
  }
  grant->granted = reply[8] == 1;
  grant->payload.assign(reply.begin() + kHeader, reply.begin() + n);
  if (!grant->granted) close_grant(*grant);
  return Status::OK();
}

}  // namespace

Status GrantServer::start(const std::string& name) {
  sockaddr_un addr{};
  socklen_t len = 0;
  if (!abstract_address(name, &addr, &len)) return Status(Code::kInvalidArgument, "socket name too long");
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return errno_status(Code::kIoError, "unix socket");
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listen_fd_, 64) != 0) {
    Status st = errno_status(Code::kIoError, "bind unix socket " + name);
    close(listen_fd_);
    listen_fd_ = -1;
    return st;
  }
  thread_ = std::thread([this] { loop(); });
  return Status::OK();
}

void GrantServer::stop() {
  if (stopping_.exchange(true)) return;
  if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);  // wakes the poll at once
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
}

void GrantServer::loop() {
  while (!stopping_.load()) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors or memory: the socket stays readable, so back off rather than spin (and say so
      // once a second).
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED && !stopping_.load()) {
        log_.log(std::string("accepting a same-host peer failed (") + std::strerror(errno) + "); retrying");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      continue;
    }
    set_timeouts(fd, 1);  // a request is one small datagram; never wait long on a peer
    serve(fd);
    close(fd);
  }
}

void GrantServer::serve(int fd) {
  ucred peer{};
  socklen_t size = sizeof(peer);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 ||
      (peer.uid != geteuid() && peer.uid != 0)) {
    log_.log("refused a same-host peer (pid " + std::to_string(peer.pid) + "): another user");
    return;
  }
  constexpr size_t kHead = 4 + kSessionIdSize + sizeof(Digest);  // count, session id, proof
  std::vector<char> request(kHead + 16 * kMaxGrantsPerRequest);
  const ssize_t n = retry_on_signal([&] { return recv(fd, request.data(), request.size(), 0); });
  if (n < static_cast<ssize_t>(kHead)) return;
  ByteReader r(request.data(), static_cast<size_t>(n));
  const auto count = r.get<uint32_t>();
  if (count > kMaxGrantsPerRequest || static_cast<size_t>(n) != kHead + 16ull * count) return;
  const Session session = derive_session(secret_, std::string(request.data() + 4, kSessionIdSize));
  Digest claimed;
  std::memcpy(claimed.data(), request.data() + 4 + kSessionIdSize, claimed.size());
  const std::string list(request.data() + kHead, 16ull * count);
  if (!same_mac(claimed, hmac_sha256(digest_bytes(session.key), "grants" + list))) {
    log_.log("refused a same-host peer (pid " + std::to_string(peer.pid) + "): wrong session proof");
    return;
  }
  const SessionKeys keys(session.key);
  ByteReader items(list.data(), list.size());
  for (uint32_t i = 0; i <= count; ++i) {
    const uint64_t id = i == 0 ? 0 : items.get<uint64_t>();
    const uint64_t key = i == 0 ? 0 : items.get<uint64_t>();
    Grant grant = grant_(id, key, keys);
    if (grant.payload.size() > kMaxGrantPayload) {
      close_grant(grant);
      grant = Grant{};
    }
    const bool sent = send_grant(fd, id, grant);
    close_grant(grant);
    if (!sent) return;
  }
}

StatusOr<PeerPinTable> PeerPinTable::map(int fd) {
  void* p = mmap(nullptr, sizeof(PinSlot) * PinTable::kSlots, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return errno_status(Code::kNoMemory, "mapping the peer's pin table");
  PeerPinTable table;
  table.slots_ = static_cast<PinSlot*>(p);
  return table;
}

PeerPinTable& PeerPinTable::operator=(PeerPinTable&& other) noexcept {
  if (this != &other) {
    this->~PeerPinTable();
    slots_ = other.slots_;
    other.slots_ = nullptr;
  }
  return *this;
}

PeerPinTable::~PeerPinTable() {
  if (slots_ != nullptr) munmap(slots_, sizeof(PinSlot) * PinTable::kSlots);
  slots_ = nullptr;
}

PeerGrants::~PeerGrants() {
  for (auto& r : regions) {
    if (r.fd >= 0) close(r.fd);
  }
}

StatusOr<PeerGrants> request_grants(const std::string& socket_name,
                                    const std::vector<const RegionInfo*>& regions,
                                    const std::string& peer_name, const Session& session) {
  if (regions.size() > kMaxGrantsPerRequest) return Status(Code::kInvalidArgument, "too many regions");
  if (session.id.size() != kSessionIdSize) return Status(Code::kInvalidArgument, "no handshake session");
  ByteWriter list;
  for (const auto* r : regions) {
    list.put<uint64_t>(r->id);
    list.put<uint64_t>(r->key);
  }
  const std::string listed(list.bytes().begin(), list.bytes().end());
  const Digest proof = hmac_sha256(digest_bytes(session.key), "grants" + listed);
  ByteWriter req;
  req.put<uint32_t>(static_cast<uint32_t>(regions.size()));
  req.bytes().insert(req.bytes().end(), session.id.begin(), session.id.end());
  req.bytes().insert(req.bytes().end(), proof.begin(), proof.end());
  req.bytes().insert(req.bytes().end(), listed.begin(), listed.end());
  sockaddr_un addr{};
  socklen_t len = 0;
  if (!abstract_address(socket_name, &addr, &len)) return Status(Code::kProtocolError, "bad socket name");
  const int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (sock < 0) return errno_status(Code::kIoError, "unix socket");
  set_timeouts(sock, 2);
  Status st;
  // (a connect cut short by a signal goes on in the background: a second call says it is done)
  const int connected =
      retry_on_signal([&] { return connect(sock, reinterpret_cast<sockaddr*>(&addr), len); });
  if ((connected != 0 && errno != EISCONN) ||
      retry_on_signal([&] { return send(sock, req.bytes().data(), req.bytes().size(), MSG_NOSIGNAL); }) < 0) {
    st = errno_status(Code::kConnectionFailed, "same-host handshake with " + peer_name);
  }
  PeerGrants out;
  for (size_t i = 0; st.ok() && i <= regions.size(); ++i) {
    Grant grant;
    st = receive_grant(sock, i == 0 ? 0 : regions[i - 1]->id, &grant);
    if (st.ok() && i == 0) {
      auto table = grant.granted
                       ? PeerPinTable::map(grant.fds[0])
                       : StatusOr<PeerPinTable>(Status(Code::kNotSupported, "peer offers no pin table"));
      if (table.ok()) out.table = std::move(table.value());
      st = table.status();
    } else if (st.ok()) {
      RegionGrant region{regions[i - 1], grant.granted, std::move(grant.payload), grant.fds[0], nullptr};
      grant.fds[0] = -1;  // the RegionGrant holds it now
      if (grant.granted && grant.fds[1] >= 0) {
        auto fence = FenceTable::map(grant.fds[1]);
        grant.fds[1] = -1;  // FenceTable::map took it
        if (fence.ok()) region.fence = std::move(fence.value());
        st = fence.status();
      }
      out.regions.push_back(std::move(region));
    }
    close_grant(grant);
  }
  close(sock);
  if (!st.ok()) return st;
  return out;
}

static std::vector<char> encode_same_host_section(uint8_t version, const SameHostSection& section) {
  ByteWriter w;
  w.put<uint8_t>(version);
  w.put<uint32_t>(static_cast<uint32_t>(section.pid));
  w.put_string(section.socket);
  return std::move(w.bytes());
}

static StatusOr<SameHostSection> decode_same_host_section(const std::vector<char>* section, uint8_t version,
                                                          const std::string& transport) {
  if (section == nullptr) return Status(Code::kNotSupported, "peer does not offer " + transport);
  ByteReader r(section->data(), section->size());
  if (r.get<uint8_t>() != version) {
    return Status(Code::kProtocolError, "peer speaks another version of the " + transport + " transport");
  }
  SameHostSection out;
  out.pid = static_cast<pid_t>(r.get<uint32_t>());
  out.socket = r.get_string(256);
  if (!r.ok() || !r.at_end() || out.socket.empty() || out.pid <= 0) {
    return Status(Code::kProtocolError, "bad " + transport + " section");
  }
  return out;
}

static std::string same_host_socket_name(const std::string& transport, uint64_t engine_id) {
  char id[17];
  std::snprintf(id, sizeof(id), "%016llx", static_cast<unsigned long long>(engine_id));
  return "kvstore-" + transport + "-" + id;
}

StatusOr<std::unique_ptr<PeerProcess>> PeerProcess::open(pid_t pid) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno_status(Code::kConnectionFailed, "peer process " + std::to_string(pid));
  return std::unique_ptr<PeerProcess>(new PeerProcess(pid, fd));
}

PeerProcess::~PeerProcess() {
  close(fd_);
}

bool PeerProcess::alive() const {
  pollfd pfd{fd_, POLLIN, 0};  // a pidfd turns readable when the process exits
  return retry_on_signal([&] { return poll(&pfd, 1, 0); }) == 0;
}

SameHostTransport::SameHostTransport(std::string name, uint8_t version, const TransportContext& context,
                                     uint64_t slice_size)
    : name_(std::move(name)),
      version_(version),
      context_(context),
      slice_size_(slice_size),
      socket_name_(same_host_socket_name(name_, context.engine_id)) {}

SameHostTransport::~SameHostTransport() {
  stop();
}

Status SameHostTransport::start() {
  if (!offered()) return Status::OK();  // no server, no section: peers never pick it
  server_ = std::make_unique<GrantServer>(
      [this](uint64_t id, uint64_t key, const SessionKeys& keys) {
        if (id != 0) return grant(id, key, keys);
        Grant table;
        const int fd = pins_.ok() ? pins_.fd() : -1;
        table.fds[0] = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
        table.granted = table.fds[0] >= 0;
        return table;
      },
      context_.cluster_secret);
  Status st = server_->start(socket_name_);
  if (!st.ok()) server_.reset();
  return st;
}

void SameHostTransport::stop() {
  if (server_) server_->stop();
}

std::vector<char> SameHostTransport::descriptor_section() const {
  if (!server_) return {};
  return encode_same_host_section(version_, {getpid(), socket_name_});
}

std::map<std::string, std::string> SameHostTransport::describe_section(
    const std::vector<char>& section) const {
  auto peer = decode(&section);
  if (!peer.ok()) return {{"error", peer.status().message()}};
  return {{"pid", std::to_string(peer.value().pid)}, {"socket", peer.value().socket}};
}

StatusOr<SameHostSection> SameHostTransport::decode(const std::vector<char>* section) const {
  return decode_same_host_section(section, version_, name_);
}

void SameHostTransport::on_region_exported(const RegionInfo& info) {
  if (!serves(info) || !pins_.ok()) return;
  const uint32_t slot = pins_.publish(info.id);
  if (slot == kNoSlot) return;  // (the table is full: this region is reached through tcp only)
  std::lock_guard<std::mutex> lock(slots_mu_);
  slots_[info.id] = slot;
}

void SameHostTransport::on_region_revoked(const RegionInfo& info) {
  uint32_t slot = kNoSlot;
  {
    std::lock_guard<std::mutex> lock(slots_mu_);
    auto it = slots_.find(info.id);
    if (it == slots_.end()) return;
    slot = it->second;
    slots_.erase(it);
  }
  pins_.revoke(slot, context_.peer_pin_timeout_ms);  // (peers copy without asking: wait for them)
}

std::vector<char> SameHostTransport::region_section(uint64_t region) const {
  std::lock_guard<std::mutex> lock(slots_mu_);
  auto it = slots_.find(region);
  if (it == slots_.end()) return {};
  ByteWriter w;
  w.put<uint32_t>(it->second);
  return std::move(w.bytes());
}

PeerSlots::PeerSlots(const EngineDescriptor& peer, const std::string& transport) {
  for (const auto& [region, sections] : peer.region_sections) {
    auto it = sections.find(transport);
    if (it == sections.end()) continue;
    ByteReader r(it->second.data(), it->second.size());
    const auto slot = r.get<uint32_t>();
    if (r.ok() && r.at_end()) slots_[region] = slot;
  }
}

bool SameHostTransport::reachable(const EngineDescriptor& peer) const {
  return server_ && peer.host_id == context_.host_id && decode(peer.section(name_)).ok();
}

StatusOr<std::shared_ptr<Channel>> SameHostTransport::connect(const EngineDescriptor& peer) {
  auto section = decode(peer.section(name_));
  if (!section.ok()) return section.status();
  auto process = PeerProcess::open(section.value().pid);
  if (!process.ok()) return process.status();
  std::vector<const RegionInfo*> wanted;
  for (const auto& r : peer.regions) {
    if (wants(r) && wanted.size() < kMaxGrantsPerRequest) wanted.push_back(&r);
  }
  auto grants = request_grants(section.value().socket, wanted, peer.name, peer.session);
  if (!grants.ok()) return grants.status();
  return open_channel(peer, std::move(process.value()), std::move(grants.value()));
}

}  // namespace kvs
