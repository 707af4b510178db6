#include "core/prefault.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

namespace kvs {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and take the fallback
#endif

bool advise_huge_pages(void* addr, uint64_t length) {
#ifdef MADV_HUGEPAGE
  return madvise(addr, length, MADV_HUGEPAGE) == 0;
#else
  (void)addr;
  (void)length;
  return false;
#endif
}

Status prefault_range(void* base, int fd, uint64_t offset, uint64_t length) {
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (offset % page != 0) return Status(Code::kInvalidArgument, "prefault range must start at a page");
  if (length == 0) return Status();
  auto* start = static_cast<char*>(base) + offset;
  const uint64_t whole_pages = (length + page - 1) / page * page;  // the mapping covers the last page
  if (madvise(start, whole_pages, MADV_POPULATE_WRITE) == 0) return Status();
  if (errno != EINVAL) return errno_status(Code::kNoMemory, "faulting in region pages");
  // No MADV_POPULATE_WRITE: reserve the range first, so the touches below cannot raise SIGBUS.
  if (fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(length)) != 0) {
    return errno_status(Code::kNoMemory, "reserving region pages");
  }
  for (uint64_t at = 0; at < length; at += page) {
    volatile char* p = start + at;
    *p = *p;  // keeps what the page holds (zero, or a reused file's bytes)
  }
  return Status();
}

}  // namespace kvs
