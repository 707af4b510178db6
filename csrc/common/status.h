// One status type for the whole core. Outputs are set only on success.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace kvs {

// Codes are stable: they cross the wire (TCP error replies) and the binding.
enum class Code : int32_t {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,          // unknown region / peer
  kPermissionDenied = 3,  // wrong access key
  kOutOfRange = 4,        // offset/length outside the region
  kProtocolError = 5,     // malformed frame or handshake
  kConnectionFailed = 6,  // peer unreachable, closed or reset
  kTimedOut = 7,
  kNoMemory = 8,
  kNotSupported = 9,
  kIoError = 10,
  kClosed = 11,  // engine shut down
  kInternal = 12,
  kStale = 13,  // the allocation a request names was freed (fenced)
};

const char* code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status OK() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Holds a value on success, a Status otherwise.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : value_(std::move(value)) {}          // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() { return value_; }
  const T& value() const { return value_; }

 private:
  Status status_;
  T value_{};
};

Status errno_status(Code code, const std::string& what);

}  // namespace kvs
