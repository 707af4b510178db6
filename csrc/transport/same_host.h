// What the same-host transports share (shm, cuda_ipc): their peers copy without asking the target. A peer
// presents region keys over an abstract unix socket (scoped to this network namespace, like the host id)
// and gets, per region, what it needs to reach that memory itself (a few bytes, up to two descriptors);
// every copy then holds a pin in the target's pin table and, for fenced regions, a fence entry. Only a
// process of the same user (or root) is served (the kernel lets it read this one's memory anyway), naming
// its handshake session and proving it; its keys are checked against that session.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/limited_log.h"
#include "common/status.h"
#include "core/descriptor.h"
#include "core/fence.h"
#include "core/pin_table.h"
#include "core/slice.h"
#include "transport/transport.h"

namespace kvs {

constexpr uint32_t kMaxGrantsPerRequest = 4096;
constexpr size_t kMaxGrantPayload = 256;

// What a target grants for one region: a few bytes and up to two descriptors (its memory, its fence
// table), which the server closes once sent.
struct Grant {
  bool granted = false;
  std::vector<char> payload;  // at most kMaxGrantPayload bytes
  int fds[2] = {-1, -1};
};

// What the target grants for (region id, key in the peer's session); region id 0 asks for the pin table
// (core/pin_table.h).
using GrantFn = std::function<Grant(uint64_t id, uint64_t key, const SessionKeys& keys)>;

// Request: u32 count, the session id, HMAC(session key, "grants" + the list), then count x (u64 region id,
// u64 key). Reply: one datagram per region, the pin table first as region 0: u64 region id, u8 granted,
// payload; its descriptors attached (SCM_RIGHTS). A refused request is closed unanswered.
class GrantServer {
 public:
  // `secret`: the cluster secret sessions are derived under.
  GrantServer(GrantFn grant, std::string secret) : grant_(std::move(grant)), secret_(std::move(secret)) {}
  ~GrantServer() { stop(); }
  GrantServer(const GrantServer&) = delete;
  GrantServer& operator=(const GrantServer&) = delete;

  Status start(const std::string& name);
  void stop();

 private:
  void loop();
  void serve(int fd);

  GrantFn grant_;
  std::string secret_;
  LimitedLog log_;  // who was refused
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// A same-host peer's pin table, mapped here for the life of a channel.
class PeerPinTable {
 public:
  PeerPinTable() = default;
  static StatusOr<PeerPinTable> map(int fd);
  PeerPinTable(PeerPinTable&& other) noexcept : slots_(other.slots_) { other.slots_ = nullptr; }
  PeerPinTable& operator=(PeerPinTable&& other) noexcept;
  ~PeerPinTable();
  PinSlot* slots() const { return slots_; }

 private:
  PinSlot* slots_ = nullptr;
};

// What a peer granted for one region asked for: its payload, its memory's descriptor (shm maps it) and its
// allocation fences, mapped here when it has them.
struct RegionGrant {
  const RegionInfo* region = nullptr;  // in the descriptor being connected: valid while connecting
  bool granted = false;
  std::vector<char> payload;
  int fd = -1;
  std::shared_ptr<FenceTable> fence;
};

// What a peer granted: its pin table, mapped here, and a grant per region asked for (descriptors nobody took
// are closed with it). request_grants asks the server named `socket` (at most kMaxGrantsPerRequest regions).
struct PeerGrants {
  PeerPinTable table;
  std::vector<RegionGrant> regions;  // in the order asked
  PeerGrants() = default;
  PeerGrants(PeerGrants&&) = default;
  ~PeerGrants();
};
StatusOr<PeerGrants> request_grants(const std::string& socket, const std::vector<const RegionInfo*>& regions,
                                    const std::string& peer_name, const Session& session);

// The descriptor section of a same-host transport: u8 version, u32 pid, string socket name (the abstract
// socket "kvstore-<transport>-<engine id>").
struct SameHostSection {
  pid_t pid = 0;
  std::string socket;
};
// The peer's process, watched through a pidfd (readable once it exits).
class PeerProcess {
 public:
  static StatusOr<std::unique_ptr<PeerProcess>> open(pid_t pid);
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;
  pid_t pid() const { return pid_; }
  bool alive() const;

 private:
  PeerProcess(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  pid_t pid_;
  int fd_;
};

// The Transport both same-host transports are: a grant server on an abstract socket (the pin table granted
// here, regions by the transport), its section (version, pid, socket), reachability (same host id and a
// section it reads) and connect (the peer's process watched, its grants taken, the channel built on them).
// Each owns the pin table of the regions it serves: a slot published when a region is exported (carried in
// the descriptor as the region's section: u32 slot), revoked before the region's memory goes (waiting for
// peers' copies, KVSTORE_PEER_PIN_TIMEOUT at most).
class SameHostTransport : public Transport {
 public:
  SameHostTransport(std::string name, uint8_t version, const TransportContext& context, uint64_t slice_size);
  ~SameHostTransport() override;

  Status start() override;
  void stop() override;
  std::vector<char> descriptor_section() const override;
  std::map<std::string, std::string> describe_section(const std::vector<char>& section) const override;
  uint64_t slice_size() const override { return slice_size_; }
  bool reachable(const EngineDescriptor& peer) const override;
  StatusOr<std::shared_ptr<Channel>> connect(const EngineDescriptor& peer) override;
  void on_region_exported(const RegionInfo& info) override;
  void on_region_revoked(const RegionInfo& info) override;
  std::vector<char> region_section(uint64_t region) const override;

 protected:
  const TransportContext& context() const { return context_; }
  // Whether to serve at all here (a transport that needs something of the machine); not offered otherwise.
  virtual bool offered() const { return true; }
  // The peer's regions this transport asks grants for.
  virtual bool wants(const RegionInfo& region) const = 0;
  // This engine's regions its peers reach through it (each gets a slot in the pin table).
  virtual bool serves(const RegionInfo& region) const = 0;
  // What a peer presenting (id, its session's key) gets for that region (never the pin table: granted here).
  virtual Grant grant(uint64_t id, uint64_t key, const SessionKeys& keys) const = 0;
  // The channel over what the peer granted.
  virtual StatusOr<std::shared_ptr<Channel>> open_channel(const EngineDescriptor& peer,
                                                          std::unique_ptr<PeerProcess> process,
                                                          PeerGrants grants) = 0;

 private:
  StatusOr<SameHostSection> decode(const std::vector<char>* section) const;

  std::string name_;
  uint8_t version_;
  TransportContext context_;
  uint64_t slice_size_;
  std::string socket_name_;
  std::unique_ptr<GrantServer> server_;
  PinTable pins_;
  mutable std::mutex slots_mu_;
  std::unordered_map<uint64_t, uint32_t> slots_;  // region id -> its slot in pins_
};

// The slots a same-host transport published for a peer's regions (their region sections), read once per
// channel: of() is a lookup on the copy path, kNoSlot for a region without one.
class PeerSlots {
 public:
  PeerSlots(const EngineDescriptor& peer, const std::string& transport);
  uint32_t of(uint64_t region) const {
    auto it = slots_.find(region);
    return it == slots_.end() ? kNoSlot : it->second;
  }

 private:
  std::unordered_map<uint64_t, uint32_t> slots_;
};

// Runs `copy(region)` for a slice against a peer's exported region: known region and key, inside it,
// pinned in the peer's table for the copy, inside a live allocation when the region is fenced.
// `slot`: the region's slot in the peer's table for this transport (PeerSlots).
template <typename Copy>
Status pinned_copy(const EngineDescriptor& peer, PinSlot* table, uint32_t slot, FenceTable* fence,
                   const Slice& slice, Copy copy) {
  const RegionInfo* region = peer.find_region(slice.region_id);
  if (region == nullptr || region->key != slice.key) return Status(Code::kNotFound, "unknown region");
  if (!in_bounds(slice.offset, slice.length, region->length)) {
    return Status(Code::kOutOfRange, "request outside the region");
  }
  if (slot == kNoSlot || slot >= PinTable::kSlots) {
    return Status(Code::kNotSupported, "region is not reachable by this transport");
  }
  if (!PinTable::pin(table, slot, region->id)) {
    return Status(Code::kNotFound, "region was unregistered by the peer");
  }
  Status st;
  {
    FenceEntry entry(fence, slice.fence_slot, slice.fence_gen, slice.offset, slice.length,
                     slice.op == TransferOp::kWrite);
    st = entry.status();
    if (st.ok()) st = copy(*region);
  }
  PinTable::unpin(table, slot);
  return st;
}

}  // namespace kvs
