// Same-process transport: a memcpy against the target engine's registry (which still checks region,
// key and bounds). Engines of this process find each other in a process-wide directory.
#pragma once

#include "transport/transport.h"

namespace kvs {

const TransportEntry& local_transport_entry();

}  // namespace kvs
