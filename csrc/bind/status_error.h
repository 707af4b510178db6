// C++ Status -> Python exception. The mapping from code to exception class lives in one place:
// transfer_engine/errors.py (error_for_code); this header only carries the code across.
#pragma once

#include <stdexcept>
#include <string>

#include "common/status.h"

namespace kvs::bind {

class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const Status& status) : std::runtime_error(status.message()), code_(status.code()) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

inline void throw_if_error(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T value_or_throw(StatusOr<T> result) {
  throw_if_error(result.status());
  return std::move(result.value());
}

}  // namespace kvs::bind
