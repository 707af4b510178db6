#include "core/fence.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

namespace kvs {
namespace {

size_t table_bytes(uint64_t slots) {
  return sizeof(FenceHeader) + slots * sizeof(FenceSlot);
}

bool wait_zero(std::atomic<int64_t>& counter, std::chrono::steady_clock::time_point until) {
  for (int spins = 0; counter.load() != 0; ++spins) {
    if (std::chrono::steady_clock::now() > until) return false;
    if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return true;
}

// Sleeps while *word is `seen`, at most `ns` (a shared futex: peers that map the table wait on it too).
void futex_wait(std::atomic<uint32_t>& word, uint32_t seen, int64_t ns) {
  const timespec timeout{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, seen, &timeout, nullptr, 0);
}

// How often a waiter asks whether to give up (its connection cut) while no announcement comes.
constexpr int64_t kAbandonCheckNs = 50'000'000;

}  // namespace

constexpr uint32_t kMaxFenceSlots = 1u << 26;

StatusOr<std::shared_ptr<FenceTable>> FenceTable::create(uint32_t slots) {
  if (slots == 0 || slots > kMaxFenceSlots)
    return Status(Code::kInvalidArgument, "fence slots must be 1..2^26");
  const size_t bytes = table_bytes(slots);
  const int fd = memfd_create("kvstore-fences", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    if (fd >= 0) close(fd);
    return errno_status(Code::kNoMemory, "fence table");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return errno_status(Code::kNoMemory, "mapping the fence table");
  }
  auto* header = static_cast<FenceHeader*>(p);  // zero-filled: nothing killed, epoch 0, no entrants
  header->slots = slots;
  return std::shared_ptr<FenceTable>(new FenceTable(fd, header, bytes));
}

StatusOr<std::shared_ptr<FenceTable>> FenceTable::map(int fd) {
  void* head = mmap(nullptr, sizeof(FenceHeader), PROT_READ, MAP_SHARED, fd, 0);
  if (head == MAP_FAILED) {
    close(fd);
    return errno_status(Code::kNoMemory, "mapping a peer's fence table");
  }
  const uint64_t slots = static_cast<FenceHeader*>(head)->slots;
  munmap(head, sizeof(FenceHeader));
  off_t size = lseek(fd, 0, SEEK_END);
  if (slots == 0 || slots > kMaxFenceSlots || size < 0 || static_cast<uint64_t>(size) != table_bytes(slots)) {
    close(fd);
    return Status(Code::kProtocolError, "peer's fence table has a bad size");
  }
  const size_t bytes = table_bytes(slots);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return errno_status(Code::kNoMemory, "mapping a peer's fence table");
  }
  return std::shared_ptr<FenceTable>(new FenceTable(fd, static_cast<FenceHeader*>(p), bytes));
}

FenceTable::~FenceTable() {
  munmap(header_, bytes_);
  close(fd_);
}

bool FenceTable::kill(const std::vector<uint32_t>& slots, const std::vector<uint64_t>& gens, int timeout_ms) {
  const uint64_t n = header_->slots;
  for (size_t i = 0; i < slots.size() && i < gens.size(); ++i) {
    if (slots[i] < n) kill_up_to(entries()[slots[i]], gens[i]);
  }
  wake_waiters();  // (one waiting for a killed allocation gives up at once)
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (uint32_t slot : slots) {
    if (slot < n && !wait_zero(entries()[slot].active, until)) return false;
  }
  return true;
}

bool FenceTable::raise_floor(uint64_t floor, int timeout_ms) {
  uint64_t seen = header_->floor.load();
  while (seen < floor && !header_->floor.compare_exchange_weak(seen, floor)) {
  }
  wake_waiters();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (uint64_t slot = 0; slot < header_->slots; ++slot) {
    if (!wait_zero(entries()[slot].active, until)) return false;
  }
  return true;
}

bool FenceTable::kill_all_but(uint64_t floor, const std::vector<std::pair<uint32_t, uint64_t>>& kept,
                              int timeout_ms) {
  const uint64_t n = header_->slots;
  std::vector<uint32_t> busy;  // slots with copies admitted before their kill: waited for below
  size_t next = 0;
  for (uint64_t slot = 0; slot < n; ++slot) {
    uint64_t dead = floor;
    while (next < kept.size() && kept[next].first < slot) ++next;  // (out of order: not kept)
    if (next < kept.size() && kept[next].first == slot && kept[next].second >= 1)
      dead = kept[next].second - 1;
    FenceSlot& e = entries()[slot];
    kill_up_to(e, dead);
    // Read after this slot's kill (Dekker with enter): a copy not counted here sees the kill. Waiting
    // only after the pass keeps it one walk through the table's memory.
    if (e.active.load() != 0) busy.push_back(static_cast<uint32_t>(slot));
  }
  wake_waiters();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (uint32_t slot : busy) {
    if (!wait_zero(entries()[slot].active, until)) return false;
  }
  return true;
}

void FenceTable::kill_up_to(FenceSlot& e, uint64_t gen) {
  uint64_t seen = e.killed.load();
  while (seen < gen && !e.killed.compare_exchange_weak(seen, gen)) {
  }
}

void FenceTable::announce(uint32_t slot, uint64_t gen, uint64_t start, uint64_t size) {
  if (slot >= header_->slots || gen == 0) return;
  std::lock_guard<std::mutex> lock(announcing_);
  FenceSlot& e = entries()[slot];
  const uint64_t now = e.announced.load();
  if (gen <= now || !alive(e, gen)) return;  // (the same one again, an older one, or one killed already)
  // 0 while the range changes: an entrant that read the range between sees the generation change.
  e.announced.store(0);
  e.start.store(start);
  e.size.store(size);
  e.written.store(0);
  e.writer.store(0);
  e.announced.store(gen);
  wake_waiters();
}

void FenceTable::wake_waiters() {
  // Dekker with wait_announced: it counts itself in, then reads `bumps` and the slot; we wrote the slot,
  // then read `waiters`. So either it sees our store, or we see it and bump past the value it sleeps on.
  if (header_->waiters.load() == 0) return;
  header_->bumps.fetch_add(1);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&header_->bumps), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool FenceTable::matches(const FenceSlot& e, uint64_t gen, uint64_t offset, uint64_t length) const {
  if (e.announced.load() != gen) return false;
  const uint64_t start = e.start.load(), size = e.size.load();
  if (e.announced.load() != gen) return false;
  return offset >= start && length <= size && offset - start <= size - length;
}

bool FenceTable::wait_announced(const FenceSlot& e, uint64_t gen, int wait_ms,
                                const std::function<bool()>& abandon) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  header_->waiters.fetch_add(1);
  bool announced = false;
  for (;;) {
    const uint32_t bumps = header_->bumps.load();
    const uint64_t now = e.announced.load();
    if (now == gen) {
      announced = true;
      break;
    }
    // Never announced while another live allocation holds the slot, and never below the last one.
    if (!alive(e, gen) || gen < now || (now != 0 && alive(e, now))) break;
    const int64_t left =
        std::chrono::duration_cast<std::chrono::nanoseconds>(until - std::chrono::steady_clock::now())
            .count();
    if (left <= 0 || (abandon && abandon())) break;
    futex_wait(header_->bumps, bumps, std::min(left, kAbandonCheckNs));
  }
  header_->waiters.fetch_sub(1);
  return announced;
}

bool FenceTable::take_unwritten(FenceSlot& e, uint64_t length) {
  const uint64_t size = e.size.load();
  uint64_t seen = e.written.load();
  do {
    if (length > size - std::min(seen, size)) return false;
  } while (!e.written.compare_exchange_weak(seen, seen + length));
  return true;
}

bool FenceTable::admit_write(FenceSlot& e, uint64_t length, uint64_t writer, uint64_t* took) {
  // Its first writer's session may write its bytes again: a resend (an acknowledgement lost, a path
  // that failed mid-payload) rewrites the same bytes; a reader's session never matches.
  // (Its new bytes count as written all the same: the allocation is sealed once `size` bytes are in.)
  if (!take_unwritten(e, length)) return writer != 0 && e.writer.load() == writer;
  uint64_t none = 0;
  if (writer != 0) e.writer.compare_exchange_strong(none, writer);
  if (took != nullptr) *took = length;
  return true;
}

bool FenceTable::enter(uint32_t slot, uint64_t gen, uint64_t offset, uint64_t length, bool write, int wait_ms,
                       uint64_t writer, const std::function<bool()>& abandon, uint64_t* took) {
  if (slot >= header_->slots || gen == 0) return false;
  FenceSlot& e = entries()[slot];
  if (e.announced.load() != gen && !wait_announced(e, gen, wait_ms, abandon)) return false;
  e.active.fetch_add(1);
  // (`written` is this generation's: the next announcement resets it only after this one's kill)
  if (alive(e, gen) && matches(e, gen, offset, length) && (!write || admit_write(e, length, writer, took))) {
    return true;
  }
  e.active.fetch_sub(1);
  return false;
}

void FenceTable::unwrite(uint32_t slot, uint64_t gen, uint64_t length) {
  if (slot >= header_->slots) return;
  FenceSlot& e = entries()[slot];
  // (still admitted: the slot cannot have moved on to another allocation, whose count this would be)
  if (e.announced.load() == gen) e.written.fetch_sub(length);
}

bool FenceTable::enter_owned(uint32_t slot, uint64_t gen) {
  if (slot >= header_->slots || gen == 0) return false;
  FenceSlot& e = entries()[slot];
  e.active.fetch_add(1);
  if (alive(e, gen)) return true;
  e.active.fetch_sub(1);
  return false;
}

FenceEntry::FenceEntry(FenceTable* table, uint32_t slot, uint64_t gen, uint64_t offset, uint64_t length,
                       bool write, int wait_ms, uint64_t writer, const std::function<bool()>& abandon)
    : table_(table), slot_(slot), gen_(gen) {
  if (table == nullptr) {
    if (gen != 0) status_ = Status(Code::kNotSupported, "region has no allocation fences");
    return;
  }
  if (gen == 0) {
    status_ = Status(Code::kPermissionDenied, "region is fenced: a transfer must name its allocation");
    return;
  }
  admitted_ = table->enter(slot, gen, offset, length, write, wait_ms, writer, abandon, &took_);
  if (!admitted_) {
    status_ =
        Status(Code::kStale, write ? "not the live allocation there, or written already: a stale location"
                                   : "not the live allocation there (freed, or never handed out): a stale "
                                     "location");
  }
}

}  // namespace kvs
