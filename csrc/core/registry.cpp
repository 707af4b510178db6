#include "core/registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/hmac.h"
#include "core/prefault.h"
#include "cuda/driver.h"

namespace kvs {

uint64_t random_u64() {
  const std::string bytes =
      random_bytes(sizeof(uint64_t));  // (the kernel's, as nonces are: keys are secrets)
  uint64_t value = 0;
  std::memcpy(&value, bytes.data(), sizeof(value));
  return value;
}

Region::~Region() {
  if (owned_) {
    unpin_host_memory(reinterpret_cast<void*>(info_.base), info_.length, pin_method_);
    munmap(reinterpret_cast<void*>(info_.base), info_.length);
  }
  if (memfd_ >= 0) close(memfd_);
}

RegionPin::RegionPin(MemoryRegistry* registry, std::shared_ptr<Region> region)
    : registry_(registry), region_(std::move(region)) {}

RegionPin::RegionPin(RegionPin&& other) noexcept
    : registry_(other.registry_), region_(std::move(other.region_)) {
  other.registry_ = nullptr;
}

RegionPin& RegionPin::operator=(RegionPin&& other) noexcept {
  if (this != &other) {
    release();
    registry_ = other.registry_;
    region_ = std::move(other.region_);
    other.registry_ = nullptr;
  }
  return *this;
}

void RegionPin::release() {
  if (region_) {
    registry_->unpin(region_.get());
    region_.reset();
  }
}

MemoryRegistry::~MemoryRegistry() {
  remove_all();
}

StatusOr<RegionInfo> MemoryRegistry::add_file(const std::string& path, bool exported) {
  auto file = DiskFile::open(path, 0, /*read_only=*/true);
  if (!file.ok()) return file.status();
  RegionInfo info;
  info.length = file.value()->size();
  info.location.kind = MemoryKind::kFile;
  info.exported = exported;
  info.read_only = true;
  std::lock_guard<std::mutex> lock(mu_);
  info.id = next_id_++;
  info.key = random_u64();
  const bool host = info.location.kind == MemoryKind::kHost || info.location.kind == MemoryKind::kHostPinned;
  if (host && info.numa_node < 0) info.numa_node = numa_node_of(reinterpret_cast<const void*>(info.base));
  auto region = std::make_shared<Region>(info, -1, false);
  region->file_ = std::move(file.value());
  by_id_[info.id] = region;  // no address: never in by_base_ (no local transfer can name it)
  return info;
}

void MemoryRegistry::set_export_hooks(ExportHooks hooks) {
  std::lock_guard<std::mutex> lock(mu_);
  hooks_ = std::move(hooks);
}

StatusOr<RegionInfo> MemoryRegistry::insert(RegionInfo info, int memfd, bool owned,
                                            std::shared_ptr<FenceTable> fence, PinMethod pin_method) {
  auto added = insert_locked(std::move(info), memfd, owned, std::move(fence), pin_method);
  if (added.ok() && added.value().exported && hooks_.exported) hooks_.exported(added.value());
  return added;
}

StatusOr<RegionInfo> MemoryRegistry::insert_locked(RegionInfo info, int memfd, bool owned,
                                                   std::shared_ptr<FenceTable> fence, PinMethod pin_method) {
  std::lock_guard<std::mutex> lock(mu_);
  // Reject overlap: the region containing an address must be unique.
  auto next = by_base_.lower_bound(info.base);
  if (next != by_base_.end() && next->first < info.base + info.length) {
    return Status(Code::kInvalidArgument, "region overlaps an already registered region");
  }
  if (next != by_base_.begin()) {
    auto prev = std::prev(next);
    const RegionInfo& p = prev->second->info();
    if (p.base + p.length > info.base) {
      return Status(Code::kInvalidArgument, "region overlaps an already registered region");
    }
  }
  info.id = next_id_++;
  info.key = random_u64();
  auto region = std::make_shared<Region>(info, memfd, owned);
  region->fence_ = std::move(fence);
  region->pin_method_ = pin_method;
  by_id_[info.id] = region;
  by_base_[info.base] = region;
  return info;
}

namespace {

// True when every page of [base, base + length) is mapped in this process.
bool mapped(uint64_t base, uint64_t length) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = base / page * page;
  const uint64_t pages = (base + length - start + page - 1) / page;
  std::vector<unsigned char> residency(pages);
  return mincore(reinterpret_cast<void*>(start), pages * page, residency.data()) == 0;
}

}  // namespace

StatusOr<RegionInfo> MemoryRegistry::add(uint64_t base, uint64_t length, MemoryLocation location,
                                         bool exported, bool read_only, int32_t numa_node) {
  if (base == 0 || length == 0) return Status(Code::kInvalidArgument, "null or empty region");
  if (base + length < base) return Status(Code::kInvalidArgument, "region wraps the address space");
  if (read_only && exported) {
    return Status(Code::kInvalidArgument, "a read-only region cannot be exported: peers could write into it");
  }
  const bool host = location.kind == MemoryKind::kHost || location.kind == MemoryKind::kHostPinned;
  if (host && !mapped(base, length)) {
    return Status(Code::kInvalidArgument, "host memory [base, base+length) is not mapped in this process");
  }
  if (location.kind == MemoryKind::kGpu) {
    // Peers copy into it through the driver: it must be one allocation of this process, on that GPU.
    auto range = cuda::device_range(base);
    if (!range.ok()) return range.status();
    if (range.value().device != location.device ||
        !in_bounds(base - range.value().base, length, range.value().length)) {
      return Status(Code::kInvalidArgument,
                    "[base, base+length) is not inside one allocation of " + location_name(location));
    }
  }
  RegionInfo info;
  info.base = base;
  info.length = length;
  info.location = location;
  info.exported = exported;
  info.read_only = read_only;
  info.numa_node = numa_node;
  return insert(std::move(info), -1, false);
}

namespace {

// Why an existing backing file is not this process's to adopt ("" when it is): another user's file, one
// open to others or with a second link (planted, or linked where someone else can reach it) could be
// read or written behind the node's back, or hold bytes it never wrote.
std::string not_adoptable(const struct stat& info) {
  if (!S_ISREG(info.st_mode)) return "not a regular file";
  if (info.st_uid != geteuid()) return "owned by uid " + std::to_string(info.st_uid);
  if ((info.st_mode & 0077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(info.st_mode & 07777));
    return std::string("open to other users (mode ") + mode + ")";
  }
  if (info.st_nlink != 1) return std::to_string(info.st_nlink) + " links";
  return "";
}

// The named backing file: this user's existing one (checked), or a new one made only here (O_EXCL: never
// one someone else made meanwhile). Never through a link.
StatusOr<int> open_backing_file(const std::string& backing_file) {
  int fd = open(backing_file.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) {
    fd = open(backing_file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  }
  if (fd < 0) return errno_status(Code::kIoError, "opening " + backing_file);
  struct stat info{};
  if (fstat(fd, &info) != 0) {
    Status st = errno_status(Code::kIoError, "fstat " + backing_file);
    close(fd);
    return st;
  }
  const std::string why = not_adoptable(info);
  if (!why.empty()) {
    close(fd);
    return Status(Code::kPermissionDenied, backing_file + " is not adopted: " + why);
  }
  return fd;
}

// The memory of an allocated region: a new memfd, or the named file, kept as it is when it already has
// `length` bytes.
StatusOr<int> region_file(uint64_t length, const std::string& backing_file) {
  if (backing_file.empty()) {
    int fd = memfd_create("kvstore-region", MFD_CLOEXEC);
    if (fd < 0) return errno_status(Code::kNoMemory, "memfd_create");
    if (ftruncate(fd, static_cast<off_t>(length)) != 0) {
      Status st = errno_status(Code::kNoMemory, "sizing memfd");
      close(fd);
      return st;
    }
    return fd;
  }
  auto opened = open_backing_file(backing_file);
  if (!opened.ok()) return opened.status();
  const int fd = opened.value();
  struct stat st_buf{};
  if (fstat(fd, &st_buf) != 0) {
    Status st = errno_status(Code::kIoError, "fstat " + backing_file);
    close(fd);
    return st;
  }
  if (static_cast<uint64_t>(st_buf.st_size) != length &&
      (ftruncate(fd, 0) != 0 || ftruncate(fd, static_cast<off_t>(length)) != 0)) {
    Status st = errno_status(Code::kNoMemory, "sizing " + backing_file);
    close(fd);
    return st;
  }
  return fd;
}

}  // namespace

StatusOr<RegionInfo> MemoryRegistry::allocate(uint64_t length, bool exported, uint32_t fence_slots,
                                              bool pinned, bool populate, const std::string& backing_file) {
  populate = populate || pinned;
  if (length == 0) return Status(Code::kInvalidArgument, "cannot allocate an empty region");
  std::shared_ptr<FenceTable> fence;
  if (fence_slots > 0) {
    auto table = FenceTable::create(fence_slots);
    if (!table.ok()) return table.status();
    fence = std::move(table.value());
  }
  auto file = region_file(length, backing_file);
  if (!file.ok()) return file.status();
  int fd = file.value();
  // fallocate reserves the pages now (keeping what a reused file holds), so running out of memory is an
  // error here, not a SIGBUS later (unpopulated regions are reserved by prefault(), before anything
  // touches them).
  if (populate && fallocate(fd, 0, 0, static_cast<off_t>(length)) != 0) {
    Status st = errno_status(Code::kNoMemory, "reserving region pages");
    close(fd);
    return st;
  }
  void* addr =
      mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  if (addr == MAP_FAILED) {
    Status st = errno_status(Code::kNoMemory, "mmap memfd");
    close(fd);
    return st;
  }
  if (!populate) advise_huge_pages(addr, length);
  PinMethod pin_method = PinMethod::kNone;
  if (pinned) {
    auto how = pin_host_memory(addr, length);
    if (!how.ok()) {
      munmap(addr, length);
      close(fd);
      return how.status();
    }
    pin_method = how.value();
  }
  RegionInfo info;
  info.base = reinterpret_cast<uint64_t>(addr);
  info.length = length;
  info.location.kind = pinned ? MemoryKind::kHostPinned : MemoryKind::kHost;
  info.exported = exported;
  info.shareable = true;
  auto result = insert(std::move(info), fd, true, std::move(fence), pin_method);
  if (!result.ok()) {
    unpin_host_memory(addr, length, pin_method);
    munmap(addr, length);
    close(fd);
  }
  return result;
}

Status MemoryRegistry::prefault(uint64_t id, uint64_t offset, uint64_t length) {
  std::shared_ptr<Region> region = find(id);
  if (!region || !region->owned_ || region->memfd_ < 0) {
    return Status(Code::kNotFound, "no region allocated by this engine with id " + std::to_string(id));
  }
  const RegionInfo& info = region->info();
  if (offset > info.length || length > info.length - offset) {
    return Status(Code::kInvalidArgument, "prefault range lies outside the region");
  }
  return prefault_range(reinterpret_cast<void*>(info.base), region->memfd_, offset, length);
}

Status MemoryRegistry::remove(uint64_t id) {
  std::shared_ptr<Region> region;
  std::unique_lock<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return Status(Code::kNotFound, "no region with id " + std::to_string(id));
  region = it->second;
  by_id_.erase(it);
  if (region->file() == nullptr) by_base_.erase(region->info().base);
  region->removed_ = true;
  unpinned_.wait(lock, [&] { return region->pins_.load() == 0; });
  lock.unlock();
  // Transports whose peers reach the memory without asking (same-host copies, one-sided RMA) revoke that
  // and wait for what is running before the memory goes.
  if (region->info().exported && hooks_.revoked) hooks_.revoked(region->info());
  return Status::OK();
}

void MemoryRegistry::remove_all() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, region] : by_id_) ids.push_back(id);
  }
  for (uint64_t id : ids) (void)remove(id);
}

void MemoryRegistry::unpin(Region* region) {
  if (region->pins_.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> lock(mu_);
    if (region->removed_) unpinned_.notify_all();
  }
}

StatusOr<RegionPin> MemoryRegistry::pin_remote(uint64_t id, uint64_t key, uint64_t offset, uint64_t length,
                                               const SessionKeys& session) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end() || !it->second->info().exported) {
    return Status(Code::kNotFound, "unknown region " + std::to_string(id));
  }
  const RegionInfo& info = it->second->info();
  if (session.of(info.id, info.key) != key)
    return Status(Code::kPermissionDenied, "wrong access key for region " + std::to_string(id));
  if (!in_bounds(offset, length, info.length)) {
    return Status(Code::kOutOfRange, "request outside region " + std::to_string(id));
  }
  it->second->pins_.fetch_add(1);
  return RegionPin(this, it->second);
}

StatusOr<RegionPin> MemoryRegistry::pin_local(uint64_t addr, uint64_t length) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_base_.upper_bound(addr);
  if (it == by_base_.begin()) return Status(Code::kInvalidArgument, "local buffer is not registered");
  --it;
  const RegionInfo& info = it->second->info();
  if (addr < info.base || !in_bounds(addr - info.base, length, info.length)) {
    return Status(Code::kInvalidArgument, "local buffer is not inside one registered region");
  }
  it->second->pins_.fetch_add(1);
  return RegionPin(this, it->second);
}

std::shared_ptr<Region> MemoryRegistry::find(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

std::vector<RegionInfo> MemoryRegistry::exported() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RegionInfo> out;
  for (auto& [base, region] : by_base_) {
    if (region->info().exported) out.push_back(region->info());
  }
  for (auto& [id, region] : by_id_) {  // file regions have no address, so are not in by_base_
    if (region->file() != nullptr && region->info().exported) out.push_back(region->info());
  }
  return out;
}

std::vector<RegionInfo> MemoryRegistry::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RegionInfo> out;
  for (auto& [base, region] : by_base_) out.push_back(region->info());
  for (auto& [id, region] : by_id_) {
    if (region->file() != nullptr) out.push_back(region->info());
  }
  return out;
}

std::shared_ptr<Region> MemoryRegistry::presented(uint64_t id, uint64_t key,
                                                  const SessionKeys& session) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return nullptr;
  const RegionInfo& info = it->second->info();
  if (!info.exported || session.of(info.id, info.key) != key) return nullptr;
  return it->second;
}

int MemoryRegistry::dup_memfd(uint64_t id, uint64_t key, const SessionKeys& session) const {
  auto region = presented(id, key, session);
  if (!region || region->memfd() < 0) return -1;
  return fcntl(region->memfd(), F_DUPFD_CLOEXEC, 0);
}

int MemoryRegistry::dup_fence_fd(uint64_t id, uint64_t key, const SessionKeys& session) const {
  auto region = presented(id, key, session);
  if (!region || region->fence() == nullptr) return -1;
  return fcntl(region->fence()->fd(), F_DUPFD_CLOEXEC, 0);
}

}  // namespace kvs
