// A get_replicas reply frame read here, for the client: the response [msg_id, 0, "", result] whose result is,
// per key, nil (a miss) or [size, checksum, [copy, ...]], each copy kvstore.rpc.records.Location's eight
// fields [tier, host_id, engine, region_id, offset, slot, gen, path]. Only the common shape is taken: a
// success, unsigned integers within their fields' bounds, a tier 0 or 1, strings, every copy served by an
// engine; anything else (an error reply, a disk record read from its path, a malformed frame) is not read
// here and the caller decodes it the general way, which refuses what is malformed. So a client builds its
// records from the frame's bytes in one crossing, with no msgpack object per field.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace kvs::meta {

// One copy of an object (Location's fields, in its order); the strings point into the frame.
struct LocatedCopy {
  uint64_t tier = 0;
  std::string_view host_id;
  std::string_view engine;
  uint64_t region_id = 0;
  uint64_t offset = 0;
  uint64_t slot = 0;
  uint64_t gen = 0;
  std::string_view path;
};

// One key's answer: a miss, or its size, checksum and copies [first, first + count) of the reply's copies.
struct LocatedEntry {
  bool hit = false;
  uint64_t size = 0;
  uint64_t checksum = 0;
  uint32_t first = 0;
  uint32_t count = 0;
};

struct LocationsReply {
  uint64_t msg_id = 0;
  std::vector<LocatedEntry> entries;
  std::vector<LocatedCopy> copies;
};

// Reads `frame` (a response's msgpack body, without its length or MAC) into `out`; false (out then
// unspecified) where it is not a successful reply of the common shape, whole and with nothing after it.
[[nodiscard]] bool read_locations_reply(std::string_view frame, LocationsReply& out);

}  // namespace kvs::meta
