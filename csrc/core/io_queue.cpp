#include "core/io_queue.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <thread>

#include "core/io_uring_queue.h"

namespace kvs {
namespace {

Status io_error(int err, const IoRequest& r) {
  // EINVAL from an O_DIRECT file is a misaligned request; everything else (ENOSPC, EIO, EROFS...) is an
  // I/O error whose message names the cause.
  const Code code = err == EINVAL ? Code::kInvalidArgument : Code::kIoError;
  errno = err;
  return errno_status(code,
                      std::string(r.write ? "write" : "read") + " at offset " + std::to_string(r.offset));
}

}  // namespace

Status blocking_io(const IoRequest& r) {
  uint64_t done = 0;
  while (done < r.length) {
    const ssize_t n =
        r.write ? pwrite(r.fd, r.buffer + done, r.length - done, static_cast<off_t>(r.offset + done))
                : pread(r.fd, r.buffer + done, r.length - done, static_cast<off_t>(r.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(errno, r);
    if (n == 0) return io_error(EIO, r);  // end of file inside the request
    done += static_cast<uint64_t>(n);
  }
  return Status::OK();
}

namespace {

// `depth` threads, each taking the next request of the batch being run.
class ThreadIoQueue final : public IoQueue {
 public:
  explicit ThreadIoQueue(unsigned depth) : depth_(std::max(1u, depth)) {}
  const char* name() const override { return "threads"; }

  void run(const std::vector<IoRequest>& batch, std::vector<Status>& results) override {
    results.assign(batch.size(), Status::OK());
    if (batch.size() <= 1) {
      if (!batch.empty()) results[0] = blocking_io(batch[0]);
      return;
    }
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < batch.size();) results[i] = blocking_io(batch[i]);
    };
    const unsigned helpers = static_cast<unsigned>(std::min<size_t>(depth_, batch.size())) - 1;
    std::vector<std::thread> threads;
    threads.reserve(helpers);
    for (unsigned t = 0; t < helpers; ++t) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
  }

 private:
  unsigned depth_;
};

}  // namespace

StatusOr<std::unique_ptr<IoQueue>> make_io_queue(const std::string& kind, unsigned depth) {
  if (depth == 0 || depth > 4096) return Status(Code::kInvalidArgument, "I/O queue depth must be 1..4096");
  if (kind == "threads") return std::unique_ptr<IoQueue>(new ThreadIoQueue(depth));
  if (kind != "auto" && kind != "io_uring") {
    return Status(Code::kInvalidArgument, "I/O backend must be auto, io_uring or threads, not " + kind);
  }
  auto uring = make_io_uring_queue(depth);
  if (uring.ok()) return std::move(uring.value());
  if (kind == "io_uring") return uring.status();
  return std::unique_ptr<IoQueue>(new ThreadIoQueue(depth));
}

}  // namespace kvs
