#include "meta/puts.h"

#include <algorithm>
#include <stdexcept>

#include "meta/crc32.h"

namespace kvs::meta {
namespace {

using Entry = PutsInProgress::Entry;

// The queued put still in progress: its row holds the same object, not yet committed.
bool in_progress(const ObjectTable& t, const Entry& e) {
  return t.alive(e.row, e.incarnation) && t.at(e.row).put_copies != 0;
}

void check_columns(const StartedPuts& p) {
  const size_t n = p.keys.size();
  if (p.sizes.size() != n || p.checksums.size() != n || (!p.hold_seqs.empty() && p.hold_seqs.size() != n))
    throw std::invalid_argument("one size, checksum (and hold number) per key");
  if (p.count == 0 || p.count > 255) throw std::invalid_argument("1 to 255 copies per put");
  if (p.copies.size() != n * p.count) throw std::invalid_argument("count copies per key");
}

// A new row per key, or none: a key in the table already or twice in the batch (insert refuses it) has
// the rows made before it erased. One lookup a key (a check before inserting took two, and a set).
std::vector<Row> insert_all(ObjectTable& t, const std::vector<std::string_view>& keys) {
  std::vector<Row> rows(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    rows[i] = t.insert(keys[i]);
    if (rows[i] == kNoRow) {
      for (size_t j = 0; j < i; ++j) t.erase(rows[j]);
      throw std::invalid_argument("a key is in the table already, or twice in the batch");
    }
  }
  return rows;
}

// Drops the ended entries from the queue (they outnumber the live ones).
void compact(ObjectTable& t) {
  std::deque<Entry>& q = t.puts().queue();
  q.erase(std::remove_if(q.begin(), q.end(), [&t](const Entry& e) { return !in_progress(t, e); }), q.end());
}

}  // namespace

std::vector<Row> start_puts(ObjectTable& t, const StartedPuts& p) {
  check_columns(p);
  std::vector<Row> rows = insert_all(t, p.keys);
  for (size_t i = 0; i < p.keys.size(); ++i) {
    const Row row = rows[i];
    Object& o = t.at(row);
    o.size = p.sizes[i];
    o.checksum = p.checksums[i];
    o.hold_seq = p.hold_seqs.empty() ? 0 : p.hold_seqs[i];
    o.writer = p.writer;
    o.pinned = p.pinned;
    o.last_access = p.started;
    o.base_replicas = p.base_replicas;
    o.put_copies = static_cast<uint8_t>(p.count);
    for (uint32_t c = 0; c < p.count; ++c) t.add_copy(row, p.copies[i * p.count + c]);
    t.puts().start(row, t.incarnation(row), p.writer, o.size * p.count, p.deadline);
  }
  if (t.puts().worth_compacting()) compact(t);
  return rows;
}

EndedPuts end_puts(ObjectTable& t, const std::vector<std::string_view>& keys, uint32_t writer,
                   std::optional<Order> link, uint32_t sample) {
  EndedPuts out;
  out.ended.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto index = static_cast<uint32_t>(i);
    const Row row = t.find(keys[i]);
    if (row == kNoRow || t.at(row).put_copies == 0 || t.at(row).writer != writer) {
      out.missing.push_back(index);
      continue;
    }
    Object& o = t.at(row);
    o.complete = true;
    t.end_put(row);
    if (link) t.push_back(*link, row);
    out.bytes += o.size;
    out.ended.push_back(index);
    if (sample != 0 && crc32(keys[i]) % sample == 0) out.sampled.push_back(index);
    const size_t copies = t.copy_count(row);
    if (copies < o.base_replicas) out.short_of_copies.push_back(index);
    for (size_t c = 0; c < copies; ++c) {
      uint64_t& mark = out.marks[t.copy(row, c).segment];
      mark = std::max(mark, o.hold_seq);
    }
  }
  return out;
}

std::vector<Row> expired_puts(ObjectTable& t, double now) {
  std::vector<Row> out;
  PutsInProgress& puts = t.puts();
  std::deque<Entry>& q = puts.queue();
  while (!q.empty() && !in_progress(t, q.front())) q.pop_front();
  for (const Entry& e : q) {
    if (!in_progress(t, e)) continue;
    if (!puts.due(e, now)) break;
    out.push_back(e.row);
  }
  return out;
}

std::vector<Row> puts_of(ObjectTable& t, uint32_t writer) {
  std::vector<Row> out;
  for (const Entry& e : t.puts().queue()) {
    if (in_progress(t, e) && (writer == 0 || t.at(e.row).writer == writer)) out.push_back(e.row);
  }
  return out;
}

}  // namespace kvs::meta
