// The machine's own ceilings, measured in the same run as a benchmark so results are read as ratios.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace kvs::bench {

struct Throughput {
  uint64_t bytes = 0;
  double seconds = 0;
};

// memcpy of block_size blocks across two pre-faulted buffers of working_set bytes each.
StatusOr<Throughput> memcpy_baseline(uint64_t block_size, uint64_t working_set, double duration_s,
                                     int threads);

// Raw TCP stream over loopback: `connections` sender/receiver pairs moving block_size chunks. Each
// side cycles through working_set bytes (split over the connections), so like the engine under
// bench it sends from and receives into memory that is not cache-resident.
StatusOr<Throughput> tcp_stream_baseline(const char* host, int connections, uint64_t block_size,
                                         uint64_t working_set, double duration_s, int socket_buffer);

}  // namespace kvs::bench
