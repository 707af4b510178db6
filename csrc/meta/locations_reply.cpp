#include "meta/locations_reply.h"

#include <cstddef>

namespace kvs::meta {
namespace {

constexpr uint64_t kSizeEnd = 1ull << 63;  // a put's size is at most 2^63 - 1 (kvstore.rpc PutItem)
constexpr uint64_t kDiskTier = 1;          // tiers are 0 (memory) and 1 (disk)
constexpr size_t kEntryFields = 3;         // ObjectLocation: size, checksum, locations
constexpr size_t kCopyFields = 8;          // Location's fields

// The few msgpack forms the common shape is made of; any other form reads as "not taken".
class Reader {
 public:
  explicit Reader(std::string_view bytes) : at_(bytes.data()), end_(bytes.data() + bytes.size()) {}

  bool done() const { return at_ == end_; }

  bool nil() {
    if (at_ == end_ || static_cast<uint8_t>(*at_) != 0xc0) return false;
    ++at_;
    return true;
  }

  bool array(uint64_t& n) {
    if (at_ == end_) return false;
    const uint8_t tag = static_cast<uint8_t>(*at_++);
    if ((tag & 0xf0) == 0x90) {
      n = tag & 0x0f;
    } else if (tag == 0xdc) {
      if (!big_endian(2, n)) return false;
    } else if (tag == 0xdd) {
      if (!big_endian(4, n)) return false;
    } else {
      return false;
    }
    return n <= static_cast<uint64_t>(end_ - at_);  // (each item takes a byte at least)
  }

  bool uint(uint64_t& v) {
    if (at_ == end_) return false;
    const uint8_t tag = static_cast<uint8_t>(*at_++);
    if (tag < 0x80) {
      v = tag;
      return true;
    }
    if (tag < 0xcc || tag > 0xcf) return false;
    return big_endian(size_t{1} << (tag - 0xcc), v);
  }

  bool str(std::string_view& s) {
    if (at_ == end_) return false;
    const uint8_t tag = static_cast<uint8_t>(*at_++);
    uint64_t n = 0;
    if ((tag & 0xe0) == 0xa0) {
      n = tag & 0x1f;
    } else if (tag >= 0xd9 && tag <= 0xdb) {
      if (!big_endian(size_t{1} << (tag - 0xd9), n)) return false;
    } else {
      return false;
    }
    if (n > static_cast<uint64_t>(end_ - at_)) return false;
    s = std::string_view(at_, static_cast<size_t>(n));
    at_ += n;
    return true;
  }

 private:
  bool big_endian(size_t width, uint64_t& v) {
    if (static_cast<size_t>(end_ - at_) < width) return false;
    v = 0;
    for (size_t i = 0; i < width; ++i) v = (v << 8) | static_cast<uint8_t>(at_[i]);
    at_ += width;
    return true;
  }

  const char* at_;
  const char* end_;
};

bool read_copy(Reader& r, LocatedCopy& c) {
  uint64_t fields = 0;
  return r.array(fields) && fields == kCopyFields && r.uint(c.tier) && c.tier <= kDiskTier &&
         r.str(c.host_id) && r.str(c.engine) && !c.engine.empty() && r.uint(c.region_id) &&
         r.uint(c.offset) && r.uint(c.slot) && r.uint(c.gen) && r.str(c.path);
}

bool read_entry(Reader& r, LocationsReply& out) {
  LocatedEntry& e = out.entries.emplace_back();
  if (r.nil()) return true;
  uint64_t fields = 0, copies = 0;
  if (!(r.array(fields) && fields == kEntryFields && r.uint(e.size) && e.size < kSizeEnd &&
        r.uint(e.checksum) && r.array(copies))) {
    return false;
  }
  e.hit = true;
  e.first = static_cast<uint32_t>(out.copies.size());
  e.count = static_cast<uint32_t>(copies);
  for (uint64_t i = 0; i < copies; ++i) {
    if (!read_copy(r, out.copies.emplace_back())) return false;
  }
  return true;
}

}  // namespace

bool read_locations_reply(std::string_view frame, LocationsReply& out) {
  Reader r(frame);
  uint64_t parts = 0, code = 0, keys = 0;
  std::string_view message;
  if (!(r.array(parts) && parts == 4 && r.uint(out.msg_id) && r.uint(code) && code == 0 && r.str(message) &&
        r.array(keys))) {
    return false;
  }
  out.entries.clear();
  out.copies.clear();
  out.entries.reserve(static_cast<size_t>(keys));
  out.copies.reserve(static_cast<size_t>(keys));
  for (uint64_t i = 0; i < keys; ++i) {
    if (!read_entry(r, out)) return false;
  }
  return r.done();
}

}  // namespace kvs::meta
