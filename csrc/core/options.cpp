#include "core/options.h"

namespace kvs {

StatusOr<Options> Options::make(const std::string& owner, const std::vector<OptionSpec>& specs,
                                const std::map<std::string, int64_t>& given) {
  Options out;
  for (const auto& spec : specs) out.values_[spec.name] = spec.default_value;
  for (const auto& [name, value] : given) {
    const OptionSpec* spec = nullptr;
    for (const auto& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) return Status(Code::kInvalidArgument, owner + " has no setting '" + name + "'");
    if (value < spec->min || value > spec->max) {
      return Status(Code::kInvalidArgument, owner + "." + name + " must be in [" + std::to_string(spec->min) +
                                                ", " + std::to_string(spec->max) + "], got " +
                                                std::to_string(value));
    }
    out.values_[name] = value;
  }
  return out;
}

int64_t Options::get(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? 0 : it->second;
}

}  // namespace kvs
