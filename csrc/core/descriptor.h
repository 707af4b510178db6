// What a peer learns about an engine in the handshake: who it is, the regions it exports, and one
// opaque section per transport it serves (addresses, socket names...), which only that transport
// parses. The layout is versioned: a peer speaking another version gets a clear error, not a misparse.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/registry.h"
#include "core/session.h"

namespace kvs {

constexpr uint16_t kDescriptorVersion = 5;  // 3: host NICs; 4: per-region sections; 5: the owner

// One address of a NIC of the engine's host (a NIC with two addresses is listed twice): what a peer needs
// to pick the remote end of a path (same subnet or rail first) and to weigh it.
struct NicAddress {
  std::string name;         // net device
  std::string rdma_device;  // "" when it has none
  std::string address;      // "10.0.0.2", "fd00::2"
  uint8_t prefix_len = 0;
  int32_t numa_node = -1;
  int64_t speed_mbps = -1;
};

struct EngineDescriptor {
  uint64_t engine_id = 0;           // random per engine; equal ids mean the same process
  std::string host_id;              // boot id + network namespace: equal means shared memory is reachable
  std::string name;                 // "host:port" of the engine's handshake endpoint
  std::vector<RegionInfo> regions;  // exported regions only; their keys are the peer's session's
  std::map<std::string, std::vector<char>> sections;  // transport name -> its own encoded data
  std::vector<NicAddress> nics;  // the host's NICs this engine may use (KVSTORE_NICS), per address
  // Per exported region, what a transport needs to reach it (UCX: the packed remote key), by region id
  // then transport name; only that transport parses it.
  std::map<uint64_t, std::map<std::string, std::vector<char>>> region_sections;
  // Who the engine's process is to its master (the client id its session registered; "" before): the
  // master mounts a segment of this engine only for that client (a mount names its engine and region).
  std::string owner;
  // The session the handshake that fetched it agreed on (never encoded: each end derives it): what the
  // peer's data connections prove, and what its region keys are valid in.
  Session session;

  const RegionInfo* find_region(uint64_t id) const;
  const std::vector<char>* section(const std::string& transport) const;
  const std::vector<char>* region_section(uint64_t region, const std::string& transport) const;
};

std::vector<char> encode_descriptor(const EngineDescriptor& d);
StatusOr<EngineDescriptor> decode_descriptor(const char* data, size_t size);

// Identity of this host as seen by shared memory: boot id and network namespace.
std::string local_host_id();

}  // namespace kvs
