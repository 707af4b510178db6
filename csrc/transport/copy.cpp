#include "transport/copy.h"

#include <cstring>

namespace kvs {

Status copy_slice(const Slice& slice, char* remote) {
  if (!slice.batch->begin_copy(slice.request)) return Status(Code::kTimedOut, "request already over");
  if (slice.op == TransferOp::kRead) {
    std::memcpy(slice.local, remote, slice.length);
  } else {
    std::memcpy(remote, slice.local, slice.length);
  }
  slice.batch->end_copy();
  return Status::OK();
}

}  // namespace kvs
