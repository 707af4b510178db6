// The interface every transport implements, both sides of it: the target side serves peers through
// the registry's checks, the initiator side opens channels to peers and moves slices. Transports
// describe themselves (capabilities, settings, a cost); the engine chooses among them and never names
// one. Transports include only core/ and common/ headers.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/copy_pool.h"
#include "core/descriptor.h"
#include "core/memory.h"
#include "core/options.h"
#include "core/registry.h"
#include "core/slice.h"
#include "topology/topology.h"

namespace kvs {

// Which peers a transport can reach.
enum Reach : uint32_t {
  kReachSameProcess = 1u << 0,
  kReachSameHost = 1u << 1,
  kReachRemote = 1u << 2,
};

struct Capabilities {
  int cost = 0;               // lower is preferred when several transports reach a peer
  uint32_t reach = 0;         // Reach mask
  KindMask local_kinds = 0;   // memory kinds it reads/writes on the initiator's side
  KindMask remote_kinds = 0;  // memory kinds it serves on the target's side
  // Peers reach the target's memory without its checks (UCX RMA): no allocation fences (requests naming
  // one go over another transport), and a region unregistered at the target stays reachable by a peer
  // that kept its key until the memory is deregistered (at once over RDMA, never over UCX's software
  // transports: only peers that refresh their view are refused).
  bool one_sided = false;
  // Moves a slice whose local side is a list of pieces (Slice::pieces) as one unit, in order; others
  // are handed each piece as a slice of its own.
  bool gathers = false;
};

// What the engine hands each of its transports.
struct TransportContext {
  uint64_t engine_id = 0;
  std::string host_id;
  std::string listen_host;  // address the engine serves on; transports that listen use it too
  std::shared_ptr<MemoryRegistry> registry;
  CopyPool* pool = nullptr;
  std::vector<NicAddress> nics;  // this host's NICs the engine may use (KVSTORE_NICS), per address
  std::shared_ptr<const topology::Topology> topology;  // which of them are near which memory
  std::string transport = "auto";  // the one transport the engine is told to use for every peer, or auto
  int peer_pin_timeout_ms = 5000;  // how long unregistering waits for same-host peers' copies
  // Derives the session a peer's connection names (core/session.h); "" : no secret (loopback, or insecure).
  std::string cluster_secret;
};

// One path of a channel (local NIC -> remote NIC) and what it carried, for stats and tests.
struct PathStats {
  std::string local_nic;  // "" when the kernel chooses (one path, no NIC in common)
  std::string local_address;
  std::string remote_nic;
  std::string remote_address;  // "host:port"
  bool up = true;
  int connections = 0;     // live ones
  uint64_t bytes = 0;      // moved by slices that completed on it
  uint64_t slices = 0;     // completed on it
  uint64_t failures = 0;   // times it went down
  uint64_t failovers = 0;  // slices it lost that were sent again on another path
};

// A transport's link to one peer engine. Thread-safe.
class Channel {
 public:
  virtual ~Channel() = default;
  // Takes the slices; each one is reported to its batch exactly once, on any outcome.
  virtual void submit(std::vector<Slice>&& slices) = 0;
  // False once the link is broken for good; the engine then opens a new one.
  virtual bool healthy() const = 0;
  // Its paths; empty for a transport without NIC paths (same-host ones).
  virtual std::vector<PathStats> paths() const { return {}; }
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Target side: start serving peers; every request is checked against the registry.
  virtual Status start() { return Status::OK(); }
  virtual void stop() {}
  // What a peer needs to reach this transport here, carried opaquely in the engine descriptor
  // (starts with the transport's own version byte). Empty: not offered to peers.
  virtual std::vector<char> descriptor_section() const = 0;
  // A peer's section in readable form (e.g. {"address": "host:port"}), for tools and tests.
  virtual std::map<std::string, std::string> describe_section(const std::vector<char>& section) const = 0;

  // Per-region state (UCX maps each exported region and packs its remote key): told of each region when
  // it is exported (before start() too) and before its memory goes away (once no request touches it
  // through the registry). region_section: what the descriptor carries for it ("" : nothing).
  virtual void on_region_exported(const RegionInfo&) {}
  virtual void on_region_revoked(const RegionInfo&) {}
  virtual std::vector<char> region_section(uint64_t /*region*/) const { return {}; }
  // Why it serves and reaches nobody here ("" when it works): e.g. UCX not installed.
  virtual std::string unavailable() const { return ""; }
  // Whether start() brings it up here (ucx only where it pays, or when asked); known before start().
  virtual bool starts() const { return true; }
  // Its place among transports that reach a peer (lower first); `declared` is its entry's cost.
  virtual int cost(int declared) const { return declared; }
  // What it can do here, once started (UCX moves GPU memory only where its CUDA support loaded).
  virtual Capabilities capabilities(const Capabilities& declared) const { return declared; }

  // Initiator side.
  virtual uint64_t slice_size() const = 0;  // largest slice moved as one unit
  virtual bool reachable(const EngineDescriptor& peer) const = 0;
  virtual StatusOr<std::shared_ptr<Channel>> connect(const EngineDescriptor& peer) = 0;
};

// How a transport registers itself (transport/transports.def lists them).
struct TransportEntry {
  const char* name;
  Capabilities capabilities;
  std::vector<OptionSpec> options;
  std::unique_ptr<Transport> (*make)(const TransportContext& context, const Options& options);
};

}  // namespace kvs
