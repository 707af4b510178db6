// Lines about misbehaving peers, to stderr: one a second at most, then how many were held back (a flood of
// bad peers must not flood the log, nor slow the server writing it). Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace kvs {

class LimitedLog {
 public:
  // Writes "kvstore engine: <line>" unless a line was written less than a second ago.
  void log(const std::string& line);

 private:
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_{};
  uint64_t unlogged_ = 0;  // lines held back since the last one written
};

}  // namespace kvs
