#include "core/host_pinning.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>

#include "cuda/driver.h"

namespace kvs {

const char* pin_method_name(PinMethod method) {
  switch (method) {
    case PinMethod::kCuda: return "cuda";
    case PinMethod::kMlock: return "mlock";
    default: return "none";
  }
}

namespace {

std::string memlock_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "unknown";
  if (limit.rlim_cur == RLIM_INFINITY) return "unlimited";
  return std::to_string(limit.rlim_cur) + " bytes";
}

}  // namespace

StatusOr<PinMethod> pin_host_memory(void* addr, size_t length) {
  if (cuda::available().ok() && cuda::host_register(addr, length).ok()) return PinMethod::kCuda;
  if (mlock(addr, length) == 0) return PinMethod::kMlock;
  const int err = errno;
  if (err == ENOMEM || err == EPERM || err == EAGAIN) {
    return Status(Code::kNoMemory, "cannot page-lock " + std::to_string(length) + " bytes: mlock failed (" +
                                       std::string(err == EAGAIN  ? "EAGAIN"
                                                   : err == EPERM ? "EPERM"
                                                                  : "ENOMEM") +
                                       "); RLIMIT_MEMLOCK is " + memlock_limit() +
                                       " — raise it (ulimit -l, LimitMEMLOCK=, --ulimit memlock) or grant "
                                       "CAP_IPC_LOCK, or run without a pinned segment");
  }
  errno = err;
  return errno_status(Code::kNoMemory, "mlock");
}

void unpin_host_memory(void* addr, size_t length, PinMethod method) {
  if (method == PinMethod::kCuda) {
    (void)cuda::host_unregister(addr);
  } else if (method == PinMethod::kMlock) {
    munlock(addr, length);
  }
}

}  // namespace kvs
