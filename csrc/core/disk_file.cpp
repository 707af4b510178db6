#include "core/disk_file.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/io_queue.h"

namespace kvs {

DiskFile::~DiskFile() {
  if (fd_ >= 0) close(fd_);
}

StatusOr<std::unique_ptr<DiskFile>> DiskFile::open(const std::string& path, uint64_t size, bool read_only) {
  if (path.empty()) return Status(Code::kInvalidArgument, "no disk path given");
  std::unique_ptr<DiskFile> f(new DiskFile());
  f->path_ = path;
  f->read_only_ = read_only;
  const int flags = read_only ? O_RDONLY : O_RDWR | O_CREAT;
  f->fd_ = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0600);
  if (f->fd_ < 0 && errno == EINVAL) {
    return Status(Code::kNotSupported,
                  "the file system of " + path + " does not support direct I/O (O_DIRECT)");
  }
  if (f->fd_ < 0 && errno == EISDIR) {
    return Status(Code::kInvalidArgument, path + " is neither a file nor a block device");
  }
  if (f->fd_ < 0) return errno_status(Code::kIoError, "opening " + path);
  struct stat st;
  if (fstat(f->fd_, &st) != 0) return errno_status(Code::kIoError, "stat " + path);
  if (S_ISBLK(st.st_mode)) {
    uint64_t device_bytes = 0;
    int sector = 512;
    if (ioctl(f->fd_, BLKGETSIZE64, &device_bytes) != 0)
      return errno_status(Code::kIoError, "size of " + path);
    if (ioctl(f->fd_, BLKSSZGET, &sector) == 0) f->alignment_ = std::max<uint64_t>(4096, sector);
    if (size > device_bytes) {
      return Status(Code::kInvalidArgument,
                    path + " holds " + std::to_string(device_bytes) + " bytes, less than asked");
    }
    f->block_device_ = true;
    f->size_ = size == 0 ? device_bytes : size;
    return f;
  }
  if (!S_ISREG(st.st_mode))
    return Status(Code::kInvalidArgument, path + " is neither a file nor a block device");
  if (read_only) {
    const uint64_t whole = static_cast<uint64_t>(st.st_size) / f->alignment_ * f->alignment_;
    if (size > whole) {
      return Status(Code::kInvalidArgument,
                    path + " holds " + std::to_string(whole) + " bytes, less than asked");
    }
    f->size_ = size == 0 ? whole : size;
    return f;
  }
  if (size == 0 || size % f->alignment_ != 0) {
    return Status(Code::kInvalidArgument, "the disk size must be a positive multiple of 4096 bytes");
  }
  if (static_cast<uint64_t>(st.st_size) < size) {
    // Allocate every block now: a write into the tier must not meet a full disk later.
    const int err = posix_fallocate(f->fd_, 0, static_cast<off_t>(size));
    if (err != 0) {
      errno = err;
      return errno_status(Code::kIoError, "reserving " + std::to_string(size) + " bytes for " + path);
    }
  }
  f->size_ = size;
  return f;
}

Status DiskFile::read_exact(char* buffer, uint64_t offset, uint64_t length) const {
  if (Status st = check(offset, length, buffer, false); !st.ok()) return st;
  return blocking_io(IoRequest{false, fd_, offset, buffer, length});
}

Status DiskFile::check(uint64_t offset, uint64_t length, const char* buffer, bool write) const {
  if (write && read_only_) return Status(Code::kPermissionDenied, path_ + " was opened read-only");
  if (length == 0 || offset > size_ || length > size_ - offset) {
    return Status(Code::kOutOfRange, "request outside the disk file (" + std::to_string(size_) + " bytes)");
  }
  const uint64_t a = alignment_;
  if (offset % a || length % a || reinterpret_cast<uintptr_t>(buffer) % a) {
    return Status(Code::kInvalidArgument,
                  "direct I/O needs offset, length and buffer aligned to " + std::to_string(a));
  }
  return Status::OK();
}

}  // namespace kvs
