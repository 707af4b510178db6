// Little-endian byte codec with bounds-checked reads, for frames and descriptors from peers.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kvs {

class ByteWriter {
 public:
  template <typename T>
  void put(T value) {
    static_assert(std::is_integral_v<T>);
    const size_t at = buf_.size();
    buf_.resize(at + sizeof(T));
    std::memcpy(buf_.data() + at, &value, sizeof(T));  // hosts are little-endian (x86-64, aarch64)
  }
  void put_string(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  const std::vector<char>& bytes() const { return buf_; }
  std::vector<char>& bytes() { return buf_; }

 private:
  std::vector<char> buf_;
};

// Every read checks the remaining length; after the first failure all reads fail (check ok() once).
class ByteReader {
 public:
  ByteReader(const char* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T get() {
    T value{};
    if (!ok_ || size_ - pos_ < sizeof(T)) {
      ok_ = false;
      return value;
    }
    std::memcpy(&value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  std::string get_string(uint32_t max_len) {
    const auto len = get<uint32_t>();
    if (!ok_ || len > max_len || size_ - pos_ < len) {
      ok_ = false;
      return {};
    }
    std::string s(data_ + pos_, len);
    pos_ += len;
    return s;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == size_; }

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace kvs
