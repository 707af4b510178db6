// UCX's own ceiling for what the ucx transport does: a raw UCP loop, no engine. A target side maps a
// working set and packs its key; an initiator posts batches of `batch` ucp_get_nbx / ucp_put_nbx of
// block_size bytes over the same-size working set of its own (a put batch ends with a flush, as the
// transport's writes do), back to back for duration_s. The target is another process, as an engine's peer
// is (ucx_rma_serve there, its `target` blob handed over), or a second worker of this process (`target`
// empty).
#pragma once

#include <cstdint>
#include <string>

#include "tools/baseline.h"

namespace kvs::bench {

StatusOr<Throughput> ucx_rma_baseline(bool write, uint64_t block_size, int batch, uint64_t working_set,
                                      double duration_s, const std::string& target = "");

// The target side in this process: maps working_set bytes, writes its blob (worker address, packed key
// and base address; the initiator's `target`) to out_fd as u32 length + bytes, then progresses its worker
// until in_fd reads end of file.
Status ucx_rma_serve(uint64_t working_set, int out_fd, int in_fd);

}  // namespace kvs::bench
