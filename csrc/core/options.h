// Settings a component declares for itself (a transport's block of config): name, kind, default,
// bounds and a line of documentation. The Python config learns them from here, so adding a transport
// with its own settings needs no change outside its folder.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvs {

enum class OptionKind : uint8_t {
  kInt = 0,
  kSize = 1,      // bytes; "4MiB" in the Python config
  kDuration = 2,  // milliseconds here; seconds (float) in the Python config
  kBool = 3,
};

struct OptionSpec {
  std::string name;
  OptionKind kind;
  int64_t default_value;
  int64_t min;
  int64_t max;
  std::string doc;
};

// Values for a list of specs: the defaults, overridden by what was given (checked against the specs).
class Options {
 public:
  static StatusOr<Options> make(const std::string& owner, const std::vector<OptionSpec>& specs,
                                const std::map<std::string, int64_t>& given);
  int64_t get(const std::string& name) const;  // a name not in the specs is a programming error: 0

 private:
  std::map<std::string, int64_t> values_;
};

}  // namespace kvs
