#include "meta/hold_book.h"

#include <algorithm>
#include <utility>

namespace kvs::meta {

void HoldBook::add_segment(uint32_t segment, uint32_t node, uint64_t region) {
  segments_[segment] = SegmentPlace{node, region};
}

const SegmentPlace* HoldBook::place(uint32_t segment) const {
  const auto it = segments_.find(segment);
  return it == segments_.end() ? nullptr : &it->second;
}

HoldBook::Queue& HoldBook::queue(uint32_t node) {
  if (node >= queues_.size()) queues_.resize(static_cast<size_t>(node) + 1);
  return queues_[node];
}

uint64_t HoldBook::push(uint32_t node, Ref ref, const HeldCopy& c) {
  Queue& q = queue(node);
  const uint64_t position = q.base + q.holds.size();
  auto [it, fresh] = q.position.try_emplace(Where{c.region, c.slot}, position);
  if (!fresh) {
    // Held again. The earlier hold stays queued under its number: a put may wait on it, and turning it
    // into a gap would let the node's lowest unacknowledged number pass that put's mark before the node
    // received any hold of the copy. Never sent yet and naming the same copy, it is this hold already
    // (what a hold tells is read from the row when sent); else the new one goes to the end.
    Hold& earlier = q.holds[it->second - q.base];
    if (earlier.seq > q.taken && earlier.ref == ref && earlier.copy == c) return earlier.seq;
    it->second = position;
  }
  q.holds.push_back(Hold{++seq_, ref, c});
  return seq_;
}

uint64_t HoldBook::hold(uint32_t node, Ref ref, const HeldCopy& c) {
  return push(node, ref, c);
}

HoldRowsCheck HoldBook::hold_rows(const std::vector<Ref>& refs, std::vector<uint32_t>& nodes) {
  HoldRowsCheck check;
  for (size_t i = 0; i < refs.size(); ++i) {
    const Row row = row_of(table_, refs[i]);
    if (row == kNoRow) {
      check.stale = i;
      return check;
    }
    for (size_t k = 0; k < table_.copy_count(row); ++k) {
      const uint32_t segment = table_.copy(row, k).segment;
      if (segments_.count(segment) == 0) {
        check.unknown_segment = segment;
        return check;
      }
    }
  }
  std::vector<bool> told;  // by node: appended to `nodes` already
  for (const Ref ref : refs) {
    const Row row = row_of(table_, ref);
    uint64_t last = 0;  // the highest number of the row's holds (one held again may keep its own)
    for (size_t k = 0; k < table_.copy_count(row); ++k) {
      const MemoryCopy& m = table_.copy(row, k);
      const SegmentPlace& place = segments_.at(m.segment);
      last =
          std::max(last, push(place.node, ref, HeldCopy{m.segment, place.region, m.offset, m.slot, m.gen}));
      if (place.node >= told.size()) told.resize(static_cast<size_t>(place.node) + 1);
      if (!told[place.node]) {
        told[place.node] = true;
        nodes.push_back(place.node);
      }
    }
    table_.at(row).hold_seq = last;
  }
  return check;
}

void HoldBook::forget(Queue& q, size_t index) {
  const Hold& h = q.holds[index];
  const auto it = q.position.find(Where{h.copy.region, h.copy.slot});
  if (it != q.position.end() && it->second == q.base + index) q.position.erase(it);
}

void HoldBook::kill(Queue& q, size_t index) {
  forget(q, index);
  q.holds[index].seq = 0;
  ++q.gaps;
}

void HoldBook::settle(Queue& q) {
  while (!q.holds.empty() && q.holds.front().seq == 0) {
    q.holds.pop_front();
    ++q.base;
    --q.gaps;
  }
  // A node that does not acknowledge while its holds are cancelled and held again would keep every gap:
  // once gaps are most of the queue, only the live holds are kept (amortized O(1) a hold).
  if (q.gaps <= 64 || q.gaps * 2 <= q.holds.size()) return;
  std::deque<Hold> live;
  for (const Hold& h : q.holds) {
    if (h.seq == 0) continue;
    q.position[Where{h.copy.region, h.copy.slot}] = q.base + live.size();
    live.push_back(h);
  }
  q.holds = std::move(live);
  q.gaps = 0;
}

bool HoldBook::cancel(uint32_t node, uint64_t region, uint32_t slot, uint64_t gen) {
  if (node >= queues_.size()) return false;
  Queue& q = queues_[node];
  const auto it = q.position.find(Where{region, slot});
  if (it == q.position.end()) return false;
  const size_t index = it->second - q.base;
  if (q.holds[index].copy.gen != gen) return false;
  kill(q, index);
  settle(q);
  return true;
}

void HoldBook::acknowledge(uint32_t node, uint64_t through) {
  if (node >= queues_.size()) return;
  Queue& q = queues_[node];
  through = std::min(through, q.taken);  // a node has nothing it was not sent
  while (!q.holds.empty() && q.holds.front().seq <= through) {
    forget(q, 0);
    q.holds.pop_front();
    ++q.base;
    settle(q);
  }
}

void HoldBook::drop_node(uint32_t node) {
  if (node < queues_.size()) queues_[node] = Queue{};
}

void HoldBook::drop_region(uint32_t node, uint64_t region) {
  if (node >= queues_.size()) return;
  Queue& q = queues_[node];
  for (size_t i = 0; i < q.holds.size(); ++i)
    if (q.holds[i].seq != 0 && q.holds[i].copy.region == region) kill(q, i);
  settle(q);
}

uint64_t HoldBook::lowest(uint32_t node) const {
  if (node >= queues_.size() || queues_[node].holds.empty()) return 0;
  return queues_[node].holds.front().seq;
}

bool HoldBook::row_has(Row row, const HeldCopy& c) const {
  const MemoryCopy want{c.segment, c.slot, c.offset, c.gen};
  for (size_t k = 0; k < table_.copy_count(row); ++k)
    if (table_.copy(row, k) == want) return true;
  return false;
}

bool HoldBook::current(const Hold& h) const {
  const Row row = row_of(table_, h.ref);
  return row != kNoRow && row_has(row, h.copy);
}

void HoldBook::encode(const Hold& h, MsgpackWriter& w) const {
  const Row row = row_of(table_, h.ref);
  const Object& o = table_.at(row);
  w.array(11);
  w.uint(h.seq);
  w.uint(h.copy.region);
  w.uint(h.copy.offset);
  w.uint(h.copy.slot);
  w.uint(h.copy.gen);
  w.str(table_.key(row));
  w.uint(o.size);
  w.uint(o.checksum);
  w.boolean(o.pinned);
  w.uint(o.base_replicas);
  w.uint(o.target_replicas);
}

Taken HoldBook::take(uint32_t node, size_t limit, std::string& out) {
  Taken taken;
  MsgpackWriter body;
  if (node < queues_.size()) {
    Queue& q = queues_[node];
    for (size_t i = 0; i < q.holds.size() && taken.sent < limit; ++i) {
      Hold& h = q.holds[i];
      if (h.seq == 0) continue;
      if (!current(h)) {
        kill(q, i);
        ++taken.dropped;
        continue;
      }
      encode(h, body);
      ++taken.sent;
      q.taken = std::max(q.taken, h.seq);
    }
    settle(q);
  }
  MsgpackWriter header;
  header.array(static_cast<uint32_t>(taken.sent));
  out.append(header.data());
  out.append(body.data());
  sent_ += taken.sent;
  return taken;
}

size_t HoldBook::outstanding() const {
  size_t n = 0;
  for (const Queue& q : queues_) n += q.holds.size() - q.gaps;
  return n;
}

}  // namespace kvs::meta
