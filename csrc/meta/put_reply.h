// A put_start reply, encoded here: per item [0, "", [[engine, region, offset, slot, gen], ...]] (placed),
// [0, "", nil] (the same bytes stored already) or [code, message, nil] (failed), msgpack as
// msgpack-python writes the same values (the wire is pinned: tests/helpers/rpc_wire_golden.txt), so a
// batch's reply is one crossing instead of a Python tuple per item and per replica.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvs::meta {

// Where one replica of a put is written (kvstore.rpc.records.Placement's fields, in its order).
struct PlacedCopy {
  std::string_view engine;  // the node's transfer engine, "host:port"
  uint64_t region_id = 0;
  uint64_t offset = 0;
  uint64_t slot = 0;
  uint64_t gen = 0;
};

// One item's outcome. Placed: copies[first, first + count) of the reply's copies; stored: nothing to
// write; failed: the error's code and message.
struct PutOutcome {
  enum class Kind : uint8_t { kPlaced, kStored, kFailed };
  Kind kind = Kind::kStored;
  uint32_t first = 0;
  uint32_t count = 0;
  uint64_t code = 0;
  std::string_view message;
};

// The reply's encoding (std::out_of_range when an outcome names copies past the end of `copies`).
std::string encode_put_reply(const std::vector<PutOutcome>& outcomes, const std::vector<PlacedCopy>& copies);

}  // namespace kvs::meta
