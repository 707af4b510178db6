// UCX's own ceiling for what the ucx transport does: a raw UCP loop, no engine. Two workers in this process
// (one context each, as two engines have): one maps a working set and packs its key, the other posts
// batches of `batch` ucp_get_nbx / ucp_put_nbx of block_size bytes over the same-size working set of its
// own (a put batch ends with a flush, as the transport's writes do), back to back for duration_s.
#pragma once

#include <cstdint>

#include "tools/baseline.h"

namespace kvs::bench {

StatusOr<Throughput> ucx_rma_baseline(bool write, uint64_t block_size, int batch, uint64_t working_set,
                                      double duration_s);

}  // namespace kvs::bench
