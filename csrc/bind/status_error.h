// C++ Status -> Python exception. The mapping from code to exception class lives in one place:
// transfer_engine/errors.py (error_for_code); this header only carries the code across.
#pragma once

#include <pybind11/pybind11.h>

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

// Every extension module installs this once: StatusError becomes the kvstore exception for its code.
inline void register_status_translator() {
  pybind11::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      pybind11::object make = pybind11::module_::import("transfer_engine.errors").attr("error_for_code");
      pybind11::object exc = make(static_cast<int>(e.code()), e.what());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });
}

}  // namespace kvs::bind
