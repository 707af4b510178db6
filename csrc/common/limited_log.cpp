#include "common/limited_log.h"

#include <cstdio>

namespace kvs {

void LimitedLog::log(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (last_.time_since_epoch().count() != 0 && now - last_ < std::chrono::seconds(1)) {
    ++unlogged_;
    return;
  }
  last_ = now;
  if (unlogged_ == 0) {
    std::fprintf(stderr, "kvstore engine: %s\n", line.c_str());
  } else {
    std::fprintf(stderr, "kvstore engine: %s (and %llu more since the last line)\n", line.c_str(),
                 static_cast<unsigned long long>(unlogged_));
  }
  unlogged_ = 0;
}

}  // namespace kvs
