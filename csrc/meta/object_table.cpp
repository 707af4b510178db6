#include "meta/object_table.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "meta/key_hash.h"

namespace kvs::meta {
namespace {

constexpr Row kTombstone = kNoRow - 1;  // in the old index only: an entry erased before it was moved
constexpr size_t kFirstIndexSlots = 1024;
constexpr size_t kMovesPerInsert = 8;  // old slots scanned per insert while the index grows: done long
                                       // before the new one fills (it is twice the size)

}  // namespace

ObjectTable::ObjectTable(uint64_t seed) : seed_(seed ^ 0x9E3779B97F4A7C15ull) {
  index_.reset(kFirstIndexSlots);
}

ObjectTable::~ObjectTable() {
  for (Row r = 0; r < rows_; ++r) std::free(const_cast<char*>(slot(r).key));
}

uint64_t ObjectTable::hash(std::string_view key) const {
  return hash_key(key, seed_);
}

Row ObjectTable::lookup(const Index& ix, std::string_view key, uint64_t h, size_t* where) const {
  const bool moving = &ix == &old_;
  const uint8_t tag = tag_of(h);
  for (size_t pos = h & ix.mask();; pos = (pos + 1) & ix.mask()) {
    const Row r = ix.slots[pos];
    if (r == kNoRow) return kNoRow;
    if (ix.tags[pos] != tag) continue;                               // another key: its row is not read
    if (r == kTombstone || (moving && pos < old_cursor_)) continue;  // erased, or moved already
    const Slot& s = slot(r);
    if (s.hash == h && s.key_len == key.size() && std::memcmp(s.key, key.data(), key.size()) == 0) {
      if (where != nullptr) *where = pos;
      return r;
    }
  }
}

Row ObjectTable::find(std::string_view key) const {
  const uint64_t h = hash(key);
  const Row r = lookup(index_, key, h, nullptr);
  if (r != kNoRow || old_.slots.empty()) return r;
  return lookup(old_, key, h, nullptr);
}

void ObjectTable::place(Index& ix, Row row) {
  const uint64_t h = slot(row).hash;
  size_t pos = h & ix.mask();
  while (ix.slots[pos] != kNoRow) pos = (pos + 1) & ix.mask();
  ix.slots[pos] = row;
  ix.tags[pos] = tag_of(h);
  ++ix.used;
}

// Linear probing's deletion: later entries of the same probe run shift back into the hole, so no lookup
// ever stops short of its entry.
void ObjectTable::remove_at(Index& ix, size_t where) {
  const size_t mask = ix.mask();
  size_t hole = where;
  for (size_t j = (hole + 1) & mask;; j = (j + 1) & mask) {
    const Row r = ix.slots[j];
    if (r == kNoRow) break;
    const size_t home = slot(r).hash & mask;
    // Moves back unless its home lies cyclically in (hole, j].
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!stays) {
      ix.slots[hole] = r;
      ix.tags[hole] = ix.tags[j];
      hole = j;
    }
  }
  ix.slots[hole] = kNoRow;
  --ix.used;
}

void ObjectTable::migrate(size_t budget) {
  while (budget-- > 0 && old_cursor_ < old_.slots.size()) {
    const Row r = old_.slots[old_cursor_++];
    if (r != kNoRow && r != kTombstone) place(index_, r);
  }
  if (old_cursor_ >= old_.slots.size()) {
    old_ = Index();
    old_cursor_ = 0;
  }
}

Row ObjectTable::insert(std::string_view key) {
  if (key.size() > UINT32_MAX) throw std::length_error("key too long");
  const uint64_t h = hash(key);
  if (lookup(index_, key, h, nullptr) != kNoRow) return kNoRow;
  if (!old_.slots.empty()) {
    if (lookup(old_, key, h, nullptr) != kNoRow) return kNoRow;
    migrate(kMovesPerInsert);
  }
  if ((index_.used + 1) * 4 > index_.slots.size() * 3) {  // over 3/4 full: grow, moving entries lazily
    if (!old_.slots.empty()) migrate(old_.slots.size());  // (cannot happen with kMovesPerInsert >= 2)
    old_ = std::move(index_);
    old_cursor_ = 0;
    index_ = Index();
    index_.reset(old_.slots.size() * 2);
    migrate(kMovesPerInsert);
  }
  Row row;
  if (!free_rows_.empty()) {
    row = free_rows_.back();
    free_rows_.pop_back();
  } else {
    if (rows_ == kTombstone) throw std::length_error("object table is full");
    if ((rows_ >> kChunkShift) == chunks_.size()) chunks_.emplace_back(new Slot[kChunkRows]);
    row = rows_++;
  }
  char* copy = static_cast<char*>(std::malloc(key.empty() ? 1 : key.size()));
  if (copy == nullptr) throw std::bad_alloc();
  std::memcpy(copy, key.data(), key.size());
  Slot& s = slot(row);
  const uint32_t inc = s.incarnation + 1;
  s = Slot();
  s.key = copy;
  s.key_len = static_cast<uint32_t>(key.size());
  s.incarnation = inc;
  s.hash = h;
  place(index_, row);
  ++count_;
  key_bytes_ += key.size();
  return row;
}

void ObjectTable::erase(Row row) {
  Slot& s = slot(row);
  const std::string_view k(s.key, s.key_len);
  size_t where = 0;
  if (lookup(index_, k, s.hash, &where) == row) {
    remove_at(index_, where);
  } else if (!old_.slots.empty() && lookup(old_, k, s.hash, &where) == row) {
    old_.slots[where] = kTombstone;  // (not shifted: positions below the cursor mean "moved")
  } else {
    throw std::logic_error("erase of a row that is not in the index");
  }
  end_put(row);
  for (int o = 0; o < kOrders; ++o) unlink(static_cast<Order>(o), row);
  clear_copies(row);
  key_bytes_ -= s.key_len;
  std::free(const_cast<char*>(s.key));
  s.key = nullptr;
  s.key_len = 0;
  ++s.incarnation;
  --count_;
  free_rows_.push_back(row);
}

void ObjectTable::end_put(Row row) {
  Object& o = slot(row).object;
  if (o.put_copies == 0) return;
  puts_.end(o.writer, o.size * o.put_copies);
  o.put_copies = 0;
}

std::string_view ObjectTable::key(Row row) const {
  const Slot& s = slot(row);
  return {s.key, s.key_len};
}

uint32_t ObjectTable::incarnation(Row row) const {
  return slot(row).incarnation;
}

bool ObjectTable::alive(Row row, uint32_t inc) const {
  return row < rows_ && (inc & 1u) && slot(row).incarnation == inc;
}

bool ObjectTable::live(Row row) const {
  return row < rows_ && (slot(row).incarnation & 1u);
}

const MemoryCopy& ObjectTable::copy(Row row, size_t i) const {
  const Slot& s = slot(row);
  if (i >= s.copies) throw std::out_of_range("no such copy");
  return i == 0 ? s.first_copy : extra_copies_.at(row)[i - 1];
}

void ObjectTable::add_copy(Row row, const MemoryCopy& c) {
  Slot& s = slot(row);
  if (s.copies == UINT8_MAX) throw std::length_error("too many copies");
  if (s.copies == 0) {
    s.first_copy = c;
  } else {
    extra_copies_[row].push_back(c);
  }
  ++s.copies;
}

bool ObjectTable::drop_copy(Row row, const MemoryCopy& c) {
  Slot& s = slot(row);
  if (s.copies == 0) return false;
  if (s.first_copy == c) {
    if (s.copies > 1) {
      auto& extra = extra_copies_[row];
      s.first_copy = extra.front();
      extra.erase(extra.begin());
      if (extra.empty()) extra_copies_.erase(row);
    }
    --s.copies;
    return true;
  }
  auto it = extra_copies_.find(row);
  if (it == extra_copies_.end()) return false;
  auto& extra = it->second;
  for (auto e = extra.begin(); e != extra.end(); ++e) {
    if (*e == c) {
      extra.erase(e);
      if (extra.empty()) extra_copies_.erase(it);
      --s.copies;
      return true;
    }
  }
  return false;
}

void ObjectTable::clear_copies(Row row) {
  Slot& s = slot(row);
  if (s.copies > 1) extra_copies_.erase(row);
  s.copies = 0;
}

Links& ObjectTable::links(Order o, Row row) {
  return row == kNoRow ? heads_[static_cast<int>(o)] : slot(row).links[static_cast<int>(o)];
}

const Links& ObjectTable::links(Order o, Row row) const {
  return row == kNoRow ? heads_[static_cast<int>(o)] : slot(row).links[static_cast<int>(o)];
}

// A row is linked when something points at it: the head, or its neighbours. (A lone row's links both
// name the head, kNoRow: the head's next is then the row itself.)
bool ObjectTable::linked(Order o, Row row) const {
  const Links& l = links(o, row);
  return l.prev != kNoRow || l.next != kNoRow || first(o) == row;
}

void ObjectTable::push_back(Order o, Row row) {
  unlink(o, row);
  Links& head = heads_[static_cast<int>(o)];
  const Row last = head.prev;
  Links& l = links(o, row);
  l.prev = last;
  l.next = kNoRow;
  links(o, last).next = row;
  head.prev = row;
  ++lengths_[static_cast<int>(o)];
}

void ObjectTable::push_front(Order o, Row row) {
  unlink(o, row);
  Links& head = heads_[static_cast<int>(o)];
  const Row first_row = head.next;
  Links& l = links(o, row);
  l.prev = kNoRow;
  l.next = first_row;
  links(o, first_row).prev = row;
  head.next = row;
  ++lengths_[static_cast<int>(o)];
}

void ObjectTable::unlink(Order o, Row row) {
  if (!linked(o, row)) return;
  Links& l = links(o, row);
  links(o, l.prev).next = l.next;
  links(o, l.next).prev = l.prev;
  l = Links();
  --lengths_[static_cast<int>(o)];
}

Row ObjectTable::next(Order o, Row row) const {
  return links(o, row).next;
}

size_t ObjectTable::memory_bytes() const {
  // Rows with spare copies are counted at a vector of two (the usual case: 2 or 3 replicas), not walked.
  const size_t spare = extra_copies_.size() * (48 + 2 * sizeof(MemoryCopy));
  return chunks_.size() * kChunkRows * sizeof(Slot) +
         (index_.slots.size() + old_.slots.size()) * (sizeof(Row) + sizeof(uint8_t)) + key_bytes_ +
         count_ * 16 /* malloc's header per key */ + free_rows_.capacity() * sizeof(Row) + spare +
         puts_.queue().size() * sizeof(PutsInProgress::Entry);
}

}  // namespace kvs::meta
