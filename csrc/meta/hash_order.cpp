#include "meta/hash_order.h"

namespace kvs::meta {

HashOrder::HashOrder() : index_(64, kNone) {}

uint32_t HashOrder::find(uint64_t h) const {
  const size_t mask = index_.size() - 1;
  for (size_t pos = h & mask;; pos = (pos + 1) & mask) {
    const uint32_t n = index_[pos];
    if (n == kNone) return kNone;
    if (nodes_[n].h == h) return n;
  }
}

void HashOrder::index_insert(uint32_t n) {
  const size_t mask = index_.size() - 1;
  size_t pos = nodes_[n].h & mask;
  while (index_[pos] != kNone) pos = (pos + 1) & mask;
  index_[pos] = n;
}

// Linear probing's deletion by backward shift (no tombstones: lookups never stop short).
void HashOrder::index_erase(uint64_t h) {
  const size_t mask = index_.size() - 1;
  size_t hole = h & mask;
  while (nodes_[index_[hole]].h != h) hole = (hole + 1) & mask;
  for (size_t j = (hole + 1) & mask;; j = (j + 1) & mask) {
    const uint32_t n = index_[j];
    if (n == kNone) break;
    const size_t home = nodes_[n].h & mask;
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!stays) {
      index_[hole] = n;
      hole = j;
    }
  }
  index_[hole] = kNone;
}

// Doubles the index (at half full): a shadow grows with the cache it samples, a doubling at a time.
void HashOrder::grow() {
  std::vector<uint32_t> old(index_.size() * 2, kNone);
  index_.swap(old);
  for (uint32_t n : old) {
    if (n != kNone) index_insert(n);
  }
}

void HashOrder::link_last(uint32_t n) {
  nodes_[n].prev = last_;
  nodes_[n].next = kNone;
  (last_ == kNone ? first_ : nodes_[last_].next) = n;
  last_ = n;
}

void HashOrder::link_first(uint32_t n) {
  nodes_[n].prev = kNone;
  nodes_[n].next = first_;
  (first_ == kNone ? last_ : nodes_[first_].prev) = n;
  first_ = n;
}

void HashOrder::unlink(uint32_t n) {
  const Node& node = nodes_[n];
  (node.prev == kNone ? first_ : nodes_[node.prev].next) = node.next;
  (node.next == kNone ? last_ : nodes_[node.next].prev) = node.prev;
}

void HashOrder::add(uint64_t h, bool front) {
  uint32_t n = find(h);
  if (n != kNone) {
    unlink(n);
  } else {
    if ((size_ + 1) * 2 > index_.size()) grow();
    if (!free_.empty()) {
      n = free_.back();
      free_.pop_back();
    } else {
      n = static_cast<uint32_t>(nodes_.size());
      nodes_.emplace_back();
    }
    nodes_[n].h = h;
    index_insert(n);
    ++size_;
  }
  front ? link_first(n) : link_last(n);
}

bool HashOrder::touch(uint64_t h) {
  const uint32_t n = find(h);
  if (n == kNone) return false;
  unlink(n);
  link_last(n);
  return true;
}

bool HashOrder::discard(uint64_t h) {
  const uint32_t n = find(h);
  if (n == kNone) return false;
  unlink(n);
  index_erase(h);
  free_.push_back(n);
  --size_;
  return true;
}

std::optional<uint64_t> HashOrder::pop_first() {
  if (first_ == kNone) return std::nullopt;
  const uint64_t h = nodes_[first_].h;
  discard(h);
  return h;
}

size_t HashOrder::trim(size_t limit) {
  size_t removed = 0;
  for (; size_ > limit; ++removed) discard(nodes_[first_].h);
  return removed;
}

size_t HashOrder::memory_bytes() const {
  return nodes_.capacity() * sizeof(Node) + free_.capacity() * sizeof(uint32_t) +
         index_.capacity() * sizeof(uint32_t);
}

}  // namespace kvs::meta
