// The UCX transport: one-sided RMA (ucp_put_nbx / ucp_get_nbx) through UCX's UCP layer, loaded at run
// time. Each exported region is mapped (ucp_mem_map) and its packed remote key travels in the descriptor
// with the region; a peer's endpoint unpacks the keys and reads and writes that memory without the
// target's threads (over RDMA where UCX has verbs; over its tcp / shared-memory transports otherwise, the
// target's worker thread serves them). Writes complete once flushed to the peer. One-sided operations
// cannot check allocation fences: requests naming one go over a transport that does (tcp).
#pragma once

#include "transport/transport.h"

namespace kvs {
const TransportEntry& ucx_transport_entry();
}  // namespace kvs
