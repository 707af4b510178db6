// Faulting in the pages of a registry-owned (memfd) region ahead of use, in ranges several threads can
// work on at once: first touch costs 0.5-2 GB/s, warm memory 11 GB/s, and a storage node's segment is
// tens of GiB. Errors come back as a status (no memory left), never as a SIGBUS on a later access.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace kvs {

// Asks for transparent huge pages over [addr, addr+length) where the system offers them for shared
// memory (shmem_enabled "advise"); true when the request was taken (the kernel may still decline).
bool advise_huge_pages(void* addr, uint64_t length);

// Reserves and faults in [offset, offset+length) of the memfd `fd` mapped at `base` (offset a page
// multiple; the range ends at a page or at the end of the file): MADV_POPULATE_WRITE where the kernel
// has it, else fallocate and a write per page.
[[nodiscard]] Status prefault_range(void* base, int fd, uint64_t offset, uint64_t length);

}  // namespace kvs
