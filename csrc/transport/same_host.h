// What the same-host transports share (shm, cuda_ipc): their peers copy without asking the target. A peer
// presents region keys over an abstract unix socket (scoped to this network namespace, like the host id)
// and gets, per region, what it needs to reach that memory itself (a few bytes, up to two descriptors);
// every copy then holds a pin in the target's pin table and, for fenced regions, a fence entry.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "core/descriptor.h"
#include "core/fence.h"
#include "core/pin_table.h"
#include "core/slice.h"

namespace kvs {

constexpr uint32_t kMaxGrantsPerRequest = 4096;
constexpr size_t kMaxGrantPayload = 256;

struct Grant {
  bool granted = false;
  std::vector<char> payload;  // at most kMaxGrantPayload bytes
  int fds[2] = {-1, -1};      // owned by whoever holds the grant (see close_grant)
};
void close_grant(Grant& grant);

// What the target grants for (region id, key); region id 0 asks for the pin table (core/pin_table.h).
using GrantFn = std::function<Grant(uint64_t id, uint64_t key)>;

// Request: u32 count, then count x (u64 region id, u64 key). Reply: one datagram per region, the pin
// table first as region 0: u64 region id, u8 granted, payload; its descriptors attached (SCM_RIGHTS).
class GrantServer {
 public:
  explicit GrantServer(GrantFn grant) : grant_(std::move(grant)) {}
  ~GrantServer() { stop(); }
  GrantServer(const GrantServer&) = delete;
  GrantServer& operator=(const GrantServer&) = delete;

  Status start(const std::string& name);
  void stop();

 private:
  void loop();
  void serve(int fd);

  GrantFn grant_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

struct GrantRequest {
  uint64_t id = 0;
  uint64_t key = 0;
};
// Asks the server named `socket` for the pin table and then each region, in order: element 0 of the result
// is the pin table's grant, element i + 1 the grant for regions[i] (at most kMaxGrantsPerRequest).
StatusOr<std::vector<Grant>> request_grants(const std::string& socket,
                                            const std::vector<GrantRequest>& regions,
                                            const std::string& peer_name);

// The descriptor section of a same-host transport: u8 version, u32 pid, string socket name.
struct SameHostSection {
  pid_t pid = 0;
  std::string socket;
};
std::vector<char> encode_same_host_section(uint8_t version, const SameHostSection& section);
StatusOr<SameHostSection> decode_same_host_section(const std::vector<char>* section, uint8_t version,
                                                   const std::string& transport);
// "kvstore-<engine id>" or "kvstore-<prefix>-<engine id>": the abstract socket a transport serves on.
std::string same_host_socket_name(const std::string& prefix, uint64_t engine_id);

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

// Runs `copy(region)` for a slice against a peer's exported region: known region and key, inside it,
// pinned in the peer's table for the copy, inside a live allocation when the region is fenced.
template <typename Copy>
Status pinned_copy(const EngineDescriptor& peer, PinSlot* table, FenceTable* fence, const Slice& slice,
                   Copy copy) {
  const RegionInfo* region = peer.find_region(slice.region_id);
  if (region == nullptr || region->key != slice.key) return Status(Code::kNotFound, "unknown region");
  if (!in_bounds(slice.offset, slice.length, region->length)) {
    return Status(Code::kOutOfRange, "request outside the region");
  }
  if (region->slot == kNoSlot)
    return Status(Code::kNotSupported, "region is not reachable by this transport");
  if (!PinTable::pin(table, region->slot, region->id)) {
    return Status(Code::kNotFound, "region was unregistered by the peer");
  }
  Status st;
  {
    FenceEntry entry(fence, slice.fence_slot, slice.fence_gen);
    st = entry.status();
    if (st.ok()) st = copy(*region);
  }
  PinTable::unpin(table, region->slot);
  return st;
}

}  // namespace kvs
