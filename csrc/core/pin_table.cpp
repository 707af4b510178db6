#include "core/pin_table.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace kvs {

PinTable::PinTable() {
  const size_t bytes = sizeof(PinSlot) * kSlots;
  fd_ = memfd_create("kvstore-pins", MFD_CLOEXEC);
  if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(bytes)) != 0) return;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return;
  slots_ = static_cast<PinSlot*>(p);  // zero-filled by the kernel: every slot revoked, no pins
  free_.reserve(kSlots);
  for (uint32_t i = kSlots; i > 0; --i) free_.push_back(i - 1);
}

PinTable::~PinTable() {
  if (slots_) munmap(slots_, sizeof(PinSlot) * kSlots);
  if (fd_ >= 0) close(fd_);
}

uint32_t PinTable::publish(uint64_t region_id) {
  if (!slots_) return kNoSlot;
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) return kNoSlot;
  const uint32_t slot = free_.back();
  free_.pop_back();
  slots_[slot].live_id.store(region_id);
  return slot;
}

void PinTable::revoke(uint32_t slot, int timeout_ms) {
  if (!slots_ || slot >= kSlots) return;
  slots_[slot].live_id.store(0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (slots_[slot].pins.load() != 0) {
    if (std::chrono::steady_clock::now() > until) return;  // leaked: never handed out again
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(slot);
}

bool PinTable::pin(PinSlot* table, uint32_t slot, uint64_t region_id) {
  if (slot >= kSlots) return false;
  table[slot].pins.fetch_add(1);
  if (table[slot].live_id.load() == region_id) return true;
  table[slot].pins.fetch_sub(1);
  return false;
}

void PinTable::unpin(PinSlot* table, uint32_t slot) {
  table[slot].pins.fetch_sub(1);
}

}  // namespace kvs
