// The registered transports (transports.def), in registration order.
#pragma once

#include <vector>

#include "transport/transport.h"

namespace kvs {

const std::vector<const TransportEntry*>& registered_transports();
const TransportEntry* find_transport(const std::string& name);
// A transport's settings: its own, plus "enabled" which every transport has.
std::vector<OptionSpec> transport_options(const TransportEntry& entry);

}  // namespace kvs
