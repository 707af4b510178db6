// What a peer learns about a segment in the handshake.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/registry.h"

namespace kvs {

// Bit per transport a segment offers; the initiator intersects with what it can reach.
enum TransportBit : uint32_t {
  kTransportLocal = 1u << 0,
  kTransportShm = 1u << 1,
  kTransportTcp = 1u << 2,
};

struct SegmentDescriptor {
  uint64_t engine_id = 0;           // random per engine; equal ids mean the same process
  uint32_t pid = 0;                 // for process_vm_readv/writev on the same host
  std::string host_id;              // boot id + network namespace: equal means shared memory is reachable
  std::string name;                 // "host:port"
  std::string shm_socket;           // abstract unix socket handing out memfds; empty when shm is off
  uint32_t transports = 0;          // TransportBit mask
  std::vector<RegionInfo> regions;  // exported regions only

  const RegionInfo* find_region(uint64_t id) const;
};

std::vector<char> encode_descriptor(const SegmentDescriptor& d);
StatusOr<SegmentDescriptor> decode_descriptor(const char* data, size_t size);

// Identity of this host as seen by shared memory: boot id and network namespace.
std::string local_host_id();

}  // namespace kvs
