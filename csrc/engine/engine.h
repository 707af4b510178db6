// The transfer engine: owns the registry and the copy pool, serves its regions through every enabled
// transport plus the handshake endpoint, opens peers (other engines) and turns batches of requests into
// slices on the transport chosen per peer and pair of memory kinds. Transports are learned from the
// registration list; none is named here.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "core/batch.h"
#include "core/copy_pool.h"
#include "core/descriptor.h"
#include "core/registry.h"
#include "transport/transport.h"

namespace kvs {

class BootstrapServer;

struct EngineConfig {
  std::string host = "127.0.0.1";  // address the engine serves on; with the port it names the engine
  uint16_t port = 0;               // handshake port; 0: any free port
  std::string transport = "auto";  // auto, or the name of one transport to use for every peer
  int copy_threads = 2;            // workers for memory-to-memory copies (at most cores - 1 start)
  int handshake_timeout_ms = 5000;
  int peer_pin_timeout_ms = 5000;  // how long unregister waits for same-host peers' copies
  // The NICs it may use and advertises (KVSTORE_NICS): those named, or all but those with nic_exclude.
  std::vector<std::string> nic_names;
  bool nic_exclude = false;
  std::string sysfs_root = "/sys";
  std::string cluster_secret;  // what peers prove they know at the handshake ("" : none, loopback only)
  // Per-transport settings, by transport name then setting name (see transport_options()).
  std::map<std::string, std::map<std::string, int64_t>> transport_options;
};

// Flat batch: element i of every array describes request i.
struct BatchView {
  const uint8_t* ops;
  const uint64_t* local_addrs;
  const uint32_t* peers;
  const uint64_t* region_ids;
  const uint64_t* offsets;
  const uint64_t* lengths;
  size_t count;
  // Optional (null: no request names an allocation): the fenced allocation of each request.
  const uint32_t* fence_slots = nullptr;
  const uint64_t* fence_gens = nullptr;
  // Optional (null: none): non-zero for reads whose landed bytes' digest is wanted (Batch::want_digest).
  const uint8_t* digests = nullptr;
  // Optional (null: every request's local side is local_addrs[i]): request i gathers or scatters
  // piece_counts[i] local pieces (0: just local_addrs[i]), the next ones of piece_addrs/piece_lengths in
  // order, against its one remote range; lengths[i] must be their sum.
  const uint32_t* piece_counts = nullptr;
  const uint64_t* piece_addrs = nullptr;
  const uint64_t* piece_lengths = nullptr;
  size_t piece_total = 0;  // entries of piece_addrs and piece_lengths
};

// Pieces one request may have (a slice's pieces travel as one vector write over TCP).
constexpr uint32_t kMaxRequestPieces = 65536;
constexpr uint32_t kMaxSlicePieces = 512;

// Verdicts of Engine::wait_verified besides error codes (part of the Python API: transfer_engine.ReadCheck).
constexpr int32_t kReadVerified = 0;
constexpr int32_t kReadMismatch = -1;
constexpr int32_t kReadUnchecked = -2;

class Engine {
 public:
  explicit Engine(EngineConfig config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Status start();
  void stop();

  const std::string& name() const { return name_; }
  uint64_t id() const { return id_; }
  MemoryRegistry& registry() { return *registry_; }
  // What a peer of `session` is handed in the handshake (region keys of that session).
  EngineDescriptor descriptor(const Session& session) const;
  // The same for a fresh session of this engine's own (reaching its own regions), carried in it.
  EngineDescriptor descriptor() const;
  // Names the client this engine's process registered as (EngineDescriptor::owner).
  void set_owner(std::string owner);
  // The transports this engine runs, cheapest first.
  std::vector<std::string> transports() const;
  // Enabled transports that serve and reach nobody here, and why.
  std::map<std::string, std::string> unavailable_transports() const;
  // Whether start() will bring transport `name` up (false when it is disabled, or stays down here).
  bool transport_starts(const std::string& name) const;
  // A peer section in readable form, by the transport that owns it.
  std::map<std::string, std::string> describe_section(const std::string& transport,
                                                      const std::vector<char>& section) const;

  // Opens (or returns the already open) peer engine: handshake and connection happen here, so a
  // failure is reported to the caller. transport "" uses the engine's setting.
  StatusOr<uint32_t> open_peer(const std::string& name, const std::string& transport);
  // Re-reads the peer's descriptor (new regions) and reconnects.
  Status refresh_peer(uint32_t handle);
  StatusOr<EngineDescriptor> peer_descriptor(uint32_t handle);
  // The peer's transports, its own first, then any dearer one carrying kinds the first cannot move.
  StatusOr<std::vector<std::string>> peer_transports(uint32_t handle);
  // The paths of each of the peer's links (transport name, path) and what each carried.
  StatusOr<std::vector<std::pair<std::string, PathStats>>> peer_paths(uint32_t handle);

  // Returns at once. Requests for a peer whose link is down (or that names a region this engine has
  // not heard of yet) wait for a reconnection made on another thread; its failure fails them.
  std::shared_ptr<Batch> submit(const BatchView& batch, int64_t timeout_ms);
  // Waits for a batch, running queued copies on this thread meanwhile (unless help is false, for a
  // caller with work of its own to overlap). Same result as Batch::wait.
  bool wait(Batch& batch, int64_t timeout_us, bool help = true);
  // Runs one queued copy on the calling thread; false if none was queued.
  bool help_once() { return pool_->run_one(); }
  // Threads that copy a same-host batch its caller waits on: the pool's workers and the caller.
  int copy_parallelism() const { return pool_->workers() + 1; }
  // Runs a batch to its end as wait() does, verifying each read as it ends, between the copies this
  // thread helps with: verdicts[i] is kReadVerified when request i completed and, if check[i], the
  // XXH3-64 of the bytes it landed is expected[i]; kReadMismatch when it differs; kReadUnchecked when
  // no digest can be taken here (GPU memory, no XXH3: the caller verifies); else its error code (> 0).
  void wait_verified(Batch& batch, const uint64_t* expected, const uint8_t* check, int32_t* verdicts);

 private:
  struct Peer;
  struct Waiting;
  struct Running {
    const TransportEntry* entry;
    std::unique_ptr<Transport> transport;
    Capabilities caps;  // what it can do here: its entry's, as the started transport narrows them
  };
  struct Link {
    Running* transport;
    std::shared_ptr<Channel> channel;
    bool fenced_only = false;  // joined a named one-sided transport to carry fenced requests alone
  };
  StatusOr<std::shared_ptr<Peer>> peer_at(uint32_t handle);
  // Handshake (unless it is ourselves) and connect; called without the peer lock held.
  Status connect_peer(Peer& peer);
  // Connects the cheapest transport that reaches the peer, then each dearer one that moves a pair of memory
  // kinds none before it does, for kinds the peer exports (cuda_ipc for a same-host peer's GPU memory; a
  // peer that registers a new kind is reconnected when a request first names it). A named transport: only it,
  // joined, when it cannot check fences, by one that can, for fenced requests alone (link_fence_carrier).
  // A dearer transport that fails to connect is left out; `unlinked` says why.
  StatusOr<std::vector<Link>> connect_links(const EngineDescriptor& peer, const std::string& transport,
                                            Status* unlinked);
  void link_fence_carrier(const EngineDescriptor& peer, std::vector<Link>& links, Status* unlinked);
  void reconnect_async(std::shared_ptr<Peer> peer);
  // Opens again, in the background, the links of a peer that died while others live.
  void relink_async(std::shared_ptr<Peer> peer);
  // Runs `work` on a connector thread (joined when finished or at stop), or here once the engine stopped.
  void launch_connector(std::function<void()> work);
  void slice_and_send(Peer& peer, std::vector<Waiting>& requests);

  EngineConfig config_;
  uint64_t id_;
  std::string name_;
  std::string host_id_;
  mutable std::mutex owner_mu_;
  std::string owner_;
  std::vector<NicAddress> nics_;  // found when constructed
  std::shared_ptr<MemoryRegistry> registry_;
  std::unique_ptr<CopyPool> pool_;
  std::vector<Running> transports_;  // sorted by cost
  Status config_error_;
  std::unique_ptr<BootstrapServer> bootstrap_;
  std::atomic<bool> running_{false};

  std::mutex peers_mu_;
  std::vector<std::shared_ptr<Peer>> peers_;

  struct Connector {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished;
  };
  std::mutex connectors_mu_;
  std::vector<Connector> connectors_;  // reconnections in flight, joined when finished or at stop
};

}  // namespace kvs
