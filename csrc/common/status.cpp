#include "common/status.h"

#include <cerrno>
#include <cstring>

namespace kvs {

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "INVALID_ARGUMENT";
    case Code::kNotFound: return "NOT_FOUND";
    case Code::kPermissionDenied: return "PERMISSION_DENIED";
    case Code::kOutOfRange: return "OUT_OF_RANGE";
    case Code::kProtocolError: return "PROTOCOL_ERROR";
    case Code::kConnectionFailed: return "CONNECTION_FAILED";
    case Code::kTimedOut: return "TIMED_OUT";
    case Code::kNoMemory: return "NO_MEMORY";
    case Code::kNotSupported: return "NOT_SUPPORTED";
    case Code::kIoError: return "IO_ERROR";
    case Code::kClosed: return "CLOSED";
    case Code::kInternal: return "INTERNAL";
    case Code::kStale: return "STALE";
  }
  return "UNKNOWN";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(code_name(code_)) + ": " + message_;
}

Status errno_status(Code code, const std::string& what) {
  return Status(code, what + ": " + std::strerror(errno));
}

}  // namespace kvs
