#include "core/io_uring_queue.h"

#if __has_include(<linux/io_uring.h>)
#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>

namespace kvs {
namespace {

int uring_setup(unsigned entries, io_uring_params* p) {
  return static_cast<int>(syscall(__NR_io_uring_setup, entries, p));
}
int uring_enter(int fd, unsigned submit, unsigned wait, unsigned flags) {
  return static_cast<int>(syscall(__NR_io_uring_enter, fd, submit, wait, flags, nullptr, 0));
}

template <typename T>
T load_acquire(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
template <typename T>
void store_release(T* p, T v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

class UringQueue final : public IoQueue {
 public:
  ~UringQueue() override {
    if (sqes_ != nullptr) munmap(sqes_, sqes_bytes_);
    if (cq_ring_ != nullptr && cq_ring_ != sq_ring_) munmap(cq_ring_, cq_bytes_);
    if (sq_ring_ != nullptr) munmap(sq_ring_, sq_bytes_);
    if (fd_ >= 0) close(fd_);
  }

  static StatusOr<std::unique_ptr<IoQueue>> create(unsigned depth) {
    std::unique_ptr<UringQueue> q(new UringQueue());
    io_uring_params p;
    std::memset(&p, 0, sizeof(p));
    q->fd_ = uring_setup(depth, &p);
    if (q->fd_ < 0) return errno_status(Code::kNotSupported, "io_uring_setup");
    if (!(p.features & IORING_FEAT_SINGLE_MMAP)) return Status(Code::kNotSupported, "io_uring too old");
    q->sq_bytes_ = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    q->cq_bytes_ = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
    q->sq_bytes_ = q->cq_bytes_ = std::max(q->sq_bytes_, q->cq_bytes_);
    void* ring = mmap(nullptr, q->sq_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, q->fd_,
                      IORING_OFF_SQ_RING);
    if (ring == MAP_FAILED) return errno_status(Code::kNotSupported, "mapping the io_uring rings");
    q->sq_ring_ = q->cq_ring_ = static_cast<char*>(ring);
    q->sqes_bytes_ = p.sq_entries * sizeof(io_uring_sqe);
    void* sqes = mmap(nullptr, q->sqes_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, q->fd_,
                      IORING_OFF_SQES);
    if (sqes == MAP_FAILED) return errno_status(Code::kNotSupported, "mapping the io_uring entries");
    q->sqes_ = static_cast<io_uring_sqe*>(sqes);
    char* s = q->sq_ring_;
    q->sq_head_ = reinterpret_cast<unsigned*>(s + p.sq_off.head);
    q->sq_tail_ = reinterpret_cast<unsigned*>(s + p.sq_off.tail);
    q->sq_mask_ = *reinterpret_cast<unsigned*>(s + p.sq_off.ring_mask);
    q->sq_array_ = reinterpret_cast<unsigned*>(s + p.sq_off.array);
    char* c = q->cq_ring_;
    q->cq_head_ = reinterpret_cast<unsigned*>(c + p.cq_off.head);
    q->cq_tail_ = reinterpret_cast<unsigned*>(c + p.cq_off.tail);
    q->cq_mask_ = *reinterpret_cast<unsigned*>(c + p.cq_off.ring_mask);
    q->cqes_ = reinterpret_cast<io_uring_cqe*>(c + p.cq_off.cqes);
    q->entries_ = p.sq_entries;
    return std::unique_ptr<IoQueue>(std::move(q));
  }

  const char* name() const override { return "io_uring"; }

  void run(const std::vector<IoRequest>& batch, std::vector<Status>& results) override {
    std::lock_guard<std::mutex> lock(mu_);
    results.assign(batch.size(), Status::OK());
    // Per request: bytes done so far. A short transfer is queued again for the rest.
    std::vector<uint64_t> done(batch.size(), 0);
    std::deque<size_t> todo;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].length > 0) todo.push_back(i);
    }
    unsigned in_flight = 0;  // queued and not yet completed (submitted or not)
    while (!todo.empty() || in_flight > 0) {
      while (!todo.empty() && in_flight < entries_) {
        const size_t i = todo.front();
        todo.pop_front();
        queue(batch[i], done[i], i);
        ++in_flight;
      }
      // Submit whatever the kernel has not consumed yet (an interrupted enter may have taken part).
      const unsigned unsubmitted = *sq_tail_ - load_acquire(sq_head_);
      if (uring_enter(fd_, unsubmitted, 1, IORING_ENTER_GETEVENTS) < 0 && errno != EINTR && errno != EAGAIN &&
          errno != EBUSY) {
        // The ring itself failed: fail what is unfinished, after the kernel let go of its buffers.
        const Status st = errno_status(Code::kIoError, "io_uring_enter");
        for (size_t i = 0; i < batch.size(); ++i) {
          if (results[i].ok() && done[i] < batch[i].length) results[i] = st;
        }
        drain(in_flight);
        return;
      }
      reap([&](size_t i, int res) {
        --in_flight;
        const IoRequest& r = batch[i];
        if (res < 0) {
          errno = -res;
          results[i] = errno_status(
              -res == EINVAL ? Code::kInvalidArgument : Code::kIoError,
              std::string(r.write ? "write" : "read") + " at offset " + std::to_string(r.offset + done[i]));
        } else if (res == 0) {
          results[i] = Status(Code::kIoError, "end of file at offset " + std::to_string(r.offset + done[i]));
        } else {
          done[i] += static_cast<uint64_t>(res);
          if (done[i] < r.length) todo.push_back(i);
        }
      });
    }
  }

 private:
  UringQueue() = default;

  void queue(const IoRequest& r, uint64_t done, size_t tag) {
    const unsigned tail = *sq_tail_;  // only this thread (under mu_) writes the tail
    const unsigned index = tail & sq_mask_;
    io_uring_sqe* sqe = &sqes_[index];
    std::memset(sqe, 0, sizeof(*sqe));
    sqe->opcode = r.write ? IORING_OP_WRITE : IORING_OP_READ;
    sqe->fd = r.fd;
    sqe->off = r.offset + done;
    sqe->addr = reinterpret_cast<uint64_t>(r.buffer + done);
    sqe->len = static_cast<uint32_t>(std::min<uint64_t>(r.length - done, 1u << 30));
    sqe->user_data = tag;
    sq_array_[index] = index;
    store_release(sq_tail_, tail + 1);
  }

  template <typename F>
  void reap(F&& on_done) {
    unsigned head = *cq_head_;
    const unsigned tail = load_acquire(cq_tail_);
    for (; head != tail; ++head) {
      const io_uring_cqe& cqe = cqes_[head & cq_mask_];
      on_done(static_cast<size_t>(cqe.user_data), cqe.res);
    }
    store_release(cq_head_, head);
  }

  // After a failed enter: waits out what the kernel still holds (bounded: the ring may be broken), so
  // no buffer of a request reported as failed is written later.
  void drain(unsigned in_flight) {
    for (int tries = 0; tries < 1000 && in_flight > 0; ++tries) {
      uring_enter(fd_, 0, 1, IORING_ENTER_GETEVENTS);
      reap([&](size_t, int) { --in_flight; });
    }
  }

  std::mutex mu_;
  int fd_ = -1;
  char* sq_ring_ = nullptr;
  char* cq_ring_ = nullptr;
  size_t sq_bytes_ = 0, cq_bytes_ = 0, sqes_bytes_ = 0;
  io_uring_sqe* sqes_ = nullptr;
  unsigned* sq_head_ = nullptr;
  unsigned* sq_tail_ = nullptr;
  unsigned* sq_array_ = nullptr;
  unsigned sq_mask_ = 0;
  unsigned* cq_head_ = nullptr;
  unsigned* cq_tail_ = nullptr;
  unsigned cq_mask_ = 0;
  io_uring_cqe* cqes_ = nullptr;
  unsigned entries_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<IoQueue>> make_io_uring_queue(unsigned depth) {
  return UringQueue::create(depth);
}

}  // namespace kvs

#else  // no io_uring header where this was built: the thread pool serves

namespace kvs {
StatusOr<std::unique_ptr<IoQueue>> make_io_uring_queue(unsigned) {
  return Status(Code::kNotSupported, "built without <linux/io_uring.h>");
}
}  // namespace kvs

#endif
