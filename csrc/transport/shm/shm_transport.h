// Same-host transport: memfd-backed peer regions are mapped here so a transfer is one memcpy; other
// exported memory is reached with process_vm_readv/writev. Same-host peers copy without asking the
// target, so every copy holds a pin in the target's cross-process pin table.
#pragma once

#include "transport/transport.h"

namespace kvs {

const TransportEntry& shm_transport_entry();

}  // namespace kvs
