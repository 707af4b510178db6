#include "meta/object_groups.h"

#include <stdexcept>
#include <string>

namespace kvs::meta {

GroupName group_of(std::string_view key) {
  const size_t hash = key.rfind('#');
  const size_t of = hash == std::string_view::npos ? hash : key.find("of", hash);
  if (of == std::string_view::npos || of + 2 >= key.size()) return {};
  uint32_t n = 0;
  for (const char ch : key.substr(of + 2)) {
    if (ch < '0' || ch > '9' || n > 1024) return {};
    n = n * 10 + static_cast<uint32_t>(ch - '0');
  }
  return {key.substr(0, hash), n};
}

void lease_group(ObjectTable& t, std::string_view key, double until) {
  const GroupName g = group_of(key);
  std::string name(g.group);
  name += '#';
  const size_t base = name.size();
  const std::string tail = "of" + std::to_string(g.members);
  for (uint32_t i = 0; i < g.members; ++i) {
    name.resize(base);
    name += std::to_string(i);
    name += tail;
    const Row row = t.find(name);
    if (row != kNoRow && t.at(row).lease_until < until) t.at(row).lease_until = until;
  }
}

void lease_groups(ObjectTable& t, const std::vector<std::string_view>& keys, double until) {
  for (const std::string_view key : keys) {
    const Row row = t.find(key);
    if (row != kNoRow && t.at(row).group != kNotMember) lease_group(t, key, until);
  }
}

void set_group_state(ObjectTable& t, const std::vector<std::string_view>& keys, uint8_t state) {
  if (state > kHidden) throw std::invalid_argument("group state is 0, 1 or 2");
  for (const std::string_view key : keys) {
    const Row row = t.find(key);
    if (row != kNoRow) t.at(row).group = state;
  }
}

}  // namespace kvs::meta
