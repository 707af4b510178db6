// A file (or block device) a node stores objects in, opened for direct I/O: preallocated to its size, so
// writes never fail for lack of space once it exists, and reads and writes bypass the page cache.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace kvs {

class DiskFile {
 public:
  ~DiskFile();
  DiskFile(const DiskFile&) = delete;
  DiskFile& operator=(const DiskFile&) = delete;

  // Opens PATH with O_DIRECT, creating and preallocating a regular file of `size` bytes (an existing one
  // keeps its bytes and grows to `size` if smaller; a block device is used whole, `size` at most).
  // NotSupported where the file system refuses O_DIRECT; IoError (naming ENOSPC) when it cannot hold it.
  // `read_only` opens an existing file or device as it is (O_RDONLY: nothing created, grown or
  // written; size 0 means all of it): how a same-host reader reads a node's disk tier directly.
  static StatusOr<std::unique_ptr<DiskFile>> open(const std::string& path, uint64_t size,
                                                  bool read_only = false);

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  // Buffer addresses, offsets and lengths must be multiples of this (the device's direct-I/O rules).
  uint64_t alignment() const { return alignment_; }
  bool block_device() const { return block_device_; }
  const std::string& path() const { return path_; }
  bool read_only() const { return read_only_; }
  // Reads [offset, offset + length) into `buffer` (checked as by check()), short reads continued: one
  // blocking request, for a server thread that answers a peer's read of a file region.
  Status read_exact(char* buffer, uint64_t offset, uint64_t length) const;
  // OK when a request for [offset, offset + length) with `buffer` keeps to the file and its alignment
  // (and is a read, on a file opened read-only).
  Status check(uint64_t offset, uint64_t length, const char* buffer, bool write) const;

 private:
  DiskFile() = default;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t alignment_ = 4096;
  bool block_device_ = false;
  bool read_only_ = false;
  std::string path_;
};

}  // namespace kvs
