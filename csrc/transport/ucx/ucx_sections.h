// What the ucx transport puts in a descriptor. The engine's section lists its rails (a UCX worker each:
// one per NIC where the engine has several, else one for every device UCX picks): u8 version, u16 count,
// then per rail: string nic ("" : UCX's own choice of devices), string worker address. A region's section
// has its packed remote key on each rail, in the same order: u8 version, u16 count, then per rail: string
// rkey ("" where that rail could not map the region).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvs::ucx {

struct RailAddress {
  std::string nic;
  std::string worker_address;
};

std::vector<char> encode_rails(const std::vector<RailAddress>& rails);
StatusOr<std::vector<RailAddress>> decode_rails(const std::vector<char>* section);

std::vector<char> encode_rkeys(const std::vector<std::string>& rkeys);
// The packed key on `rail`; an error when the section is absent or bad, or has none for that rail.
StatusOr<std::string> decode_rkey(const std::vector<char>* section, size_t rail);

}  // namespace kvs::ucx
