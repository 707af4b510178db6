// Same-host GPU transport (the NVLink / PCIe peer path): device memory a peer exports is opened here with a
// CUDA IPC handle, so a transfer is one cuMemcpyAsync between this process's memory (host or device) and
// the peer's GPU. Offered only where the CUDA driver can share memory between processes. Like shm, copies
// bypass the target, so each holds a pin in the target's cross-process pin table.
#pragma once

#include "transport/transport.h"

namespace kvs {

const TransportEntry& cuda_ipc_transport_entry();

}  // namespace kvs
