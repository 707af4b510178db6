// Lines about misbehaving peers, to stderr: one a second at most, then how many were held back (a flood of
// bad peers must not flood the log, nor slow the server writing it). Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace kvs {

// One line of the engine's log as every kvstore process writes its lines (kvstore.log_lines): its time
// (ISO 8601 in UTC, to the millisecond), its level, then "kvstore engine: <line>".
std::string engine_log_line(const char* level, const std::string& line);

// Writes engine_log_line(level, line) to stderr in one call.
void log_engine(const char* level, const std::string& line);

class LimitedLog {
 public:
  // Writes a WARNING line unless a line was written less than a second ago.
  void log(const std::string& line);

 private:
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_{};
  uint64_t unlogged_ = 0;  // lines held back since the last one written
};

}  // namespace kvs
