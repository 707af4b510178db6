// The io_uring backend of IoQueue, on raw system calls (no liburing).
#pragma once

#include <memory>

#include "core/io_queue.h"

namespace kvs {

// NotSupported where the kernel (or a seccomp filter) refuses io_uring.
StatusOr<std::unique_ptr<IoQueue>> make_io_uring_queue(unsigned depth);

}  // namespace kvs
