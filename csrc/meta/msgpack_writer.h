// A msgpack writer of the few types the master's replies carry (arrays, unsigned integers, strings, nil,
// booleans), so a batch's reply is encoded where its records are read, with no Python object per record.
// Encodings are msgpack's smallest for each value, as msgpack-python writes them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace kvs::meta {

class MsgpackWriter {
 public:
  void array(uint32_t n) {
    if (n < 16) {
      byte(0x90 | n);
    } else if (n < 65536) {
      byte(0xdc);
      be(n, 2);
    } else {
      byte(0xdd);
      be(n, 4);
    }
  }
  void uint(uint64_t v) {
    if (v < 128) {
      byte(static_cast<uint8_t>(v));
    } else if (v < 256) {
      byte(0xcc);
      be(v, 1);
    } else if (v < 65536) {
      byte(0xcd);
      be(v, 2);
    } else if (v <= 0xFFFFFFFFull) {
      byte(0xce);
      be(v, 4);
    } else {
      byte(0xcf);
      be(v, 8);
    }
  }
  void str(std::string_view s) {
    const size_t n = s.size();
    if (n < 32) {
      byte(0xa0 | static_cast<uint8_t>(n));
    } else if (n < 256) {
      byte(0xd9);
      be(n, 1);
    } else if (n < 65536) {
      byte(0xda);
      be(n, 2);
    } else {
      byte(0xdb);
      be(n, 4);
    }
    out_.append(s);
  }
  void nil() { byte(0xc0); }
  void boolean(bool b) { byte(b ? 0xc3 : 0xc2); }
  // Bytes encoded by another writer (a value written once and repeated).
  void raw(std::string_view encoded) { out_.append(encoded); }

  const std::string& data() const { return out_; }
  std::string take() { return std::move(out_); }  // the encoding, leaving the writer empty
  void reserve(size_t n) { out_.reserve(n); }

 private:
  void byte(uint8_t b) { out_.push_back(static_cast<char>(b)); }
  void be(uint64_t v, int width) {
    for (int i = width - 1; i >= 0; --i) byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::string out_;
};

}  // namespace kvs::meta
