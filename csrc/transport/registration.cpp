#include "transport/registration.h"

namespace kvs {

#define KVS_TRANSPORT(name) const TransportEntry& name##_transport_entry();
#include "transport/transports.def"
#undef KVS_TRANSPORT

const std::vector<const TransportEntry*>& registered_transports() {
  static const std::vector<const TransportEntry*> list = {
#define KVS_TRANSPORT(name) &name##_transport_entry(),
#include "transport/transports.def"
#undef KVS_TRANSPORT
  };
  return list;
}

const TransportEntry* find_transport(const std::string& name) {
  for (const auto* entry : registered_transports()) {
    if (name == entry->name) return entry;
  }
  return nullptr;
}

std::vector<OptionSpec> transport_options(const TransportEntry& entry) {
  std::vector<OptionSpec> specs = entry.options;
  specs.push_back(
      {"enabled", OptionKind::kBool, 1, 0, 1, "Serve peers with this transport and use it for them."});
  return specs;
}

}  // namespace kvs
