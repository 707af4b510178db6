// The TCP transport: per peer, one path per pair of NICs on a shared subnet (else one path), each with
// its own connections (tcp_channel.h); the target serves every request through the registry's checks
// (tcp_server.h).
#pragma once

#include "transport/transport.h"

namespace kvs {
const TransportEntry& tcp_transport_entry();
}  // namespace kvs
