// The registration list, as Python sees it: the config, the CLI and the contract suite learn the
// transports (and each one's settings) from here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "transport/registration.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

py::list kinds(KindMask mask) {
  py::list out;
  for (int k = 0; k < kMemoryKinds; ++k) {
    if (mask & kind_bit(static_cast<MemoryKind>(k))) out.append(kind_name(static_cast<MemoryKind>(k)));
  }
  return out;
}

const char* option_kind(OptionKind kind) {
  switch (kind) {
    case OptionKind::kInt: return "int";
    case OptionKind::kSize: return "size";
    case OptionKind::kDuration: return "duration_ms";
    case OptionKind::kBool: return "bool";
  }
  return "int";
}

}  // namespace

void bind_transports(py::module_& m) {
  m.def(
      "transports",
      [] {
        py::list out;
        for (const TransportEntry* entry : registered_transports()) {
          py::dict d;
          d["name"] = entry->name;
          d["cost"] = entry->capabilities.cost;
          py::list reach;
          if (entry->capabilities.reach & kReachSameProcess) reach.append("same-process");
          if (entry->capabilities.reach & kReachSameHost) reach.append("same-host");
          if (entry->capabilities.reach & kReachRemote) reach.append("remote");
          d["reach"] = reach;
          d["one_sided"] = entry->capabilities.one_sided;
          d["local_kinds"] = kinds(entry->capabilities.local_kinds);
          d["remote_kinds"] = kinds(entry->capabilities.remote_kinds);
          py::list options;
          for (const auto& spec : transport_options(*entry)) {
            py::dict o;
            o["name"] = spec.name;
            o["kind"] = option_kind(spec.kind);
            o["default"] = spec.default_value;
            o["min"] = spec.min;
            o["max"] = spec.max;
            o["doc"] = spec.doc;
            options.append(o);
          }
          d["options"] = options;
          out.append(d);
        }
        return out;
      },
      "The registered transports: name, cost, reach, memory kinds on each side and settings.");
}

}  // namespace kvs::bind
