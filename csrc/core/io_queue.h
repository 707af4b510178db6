// Batched file I/O at queue depth: io_uring where the kernel allows it (raw system calls: nothing to
// install to build), else a pool of threads doing pread/pwrite. Used with O_DIRECT files (disk_file.h):
// buffers, offsets and lengths must then be multiples of the file's alignment.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvs {

struct IoRequest {
  bool write = false;
  int fd = -1;
  uint64_t offset = 0;
  char* buffer = nullptr;
  uint64_t length = 0;
};

class IoQueue {
 public:
  virtual ~IoQueue() = default;
  // "io_uring" or "threads": which one runs (benches say it).
  virtual const char* name() const = 0;
  // Runs every request to the end; results[i] is 0 or the errno-derived status of request i (a short
  // transfer is retried for the rest; end of file before the end of a request is an I/O error). Safe to
  // call from several threads (calls take turns on one queue).
  virtual void run(const std::vector<IoRequest>& batch, std::vector<Status>& results) = 0;
};

// One request to the end on the calling thread with pread/pwrite (a short transfer continues where it
// stopped; end of file inside the request is an I/O error).
Status blocking_io(const IoRequest& r);

// kind: "auto" (io_uring, else threads), "io_uring", "threads". depth: requests in flight at most.
StatusOr<std::unique_ptr<IoQueue>> make_io_queue(const std::string& kind, unsigned depth);

}  // namespace kvs
