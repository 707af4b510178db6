#include "common/limited_log.h"

#include <cstdio>
#include <ctime>

namespace kvs {

std::string engine_log_line(const char* level, const std::string& line) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  const size_t n = std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(stamp + n, sizeof(stamp) - n, ".%03dZ", static_cast<int>(millis));
  return std::string(stamp) + " " + level + " kvstore engine: " + line + "\n";
}

void log_engine(const char* level, const std::string& line) {
  const std::string text = engine_log_line(level, line);
  std::fwrite(text.data(), 1, text.size(), stderr);
}

void LimitedLog::log(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (last_.time_since_epoch().count() != 0 && now - last_ < std::chrono::seconds(1)) {
    ++unlogged_;
    return;
  }
  last_ = now;
  if (unlogged_ == 0) {
    log_engine("WARNING", line);
  } else {
    log_engine("WARNING", line + " (and " + std::to_string(unlogged_) + " more since the last line)");
  }
  unlogged_ = 0;
}

}  // namespace kvs
