#include "meta/object_orders.h"

#include <stdexcept>

namespace kvs::meta {

Order order_of(int o) {
  if (o != 0 && o != 1) throw std::invalid_argument("order is 0 (memory eviction) or 1 (disk eviction)");
  return static_cast<Order>(o);
}

void link_rows(ObjectTable& t, Order order, const std::vector<Row>& rows, bool front) {
  for (const Row row : rows) front ? t.push_front(order, row) : t.push_back(order, row);
}

bool touch(ObjectTable& t, Order order, std::string_view key) {
  const Row row = t.find(key);
  if (row == kNoRow || !t.linked(order, row)) return false;
  t.push_back(order, row);
  return true;
}

std::vector<bool> touch_all(ObjectTable& t, Order order, const std::vector<std::string_view>& keys) {
  std::vector<bool> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out[i] = touch(t, order, keys[i]);
  return out;
}

bool unlink_key(ObjectTable& t, Order order, std::string_view key) {
  const Row row = t.find(key);
  if (row == kNoRow || !t.linked(order, row)) return false;
  t.unlink(order, row);
  return true;
}

std::vector<uint32_t> unlink_keys(ObjectTable& t, Order order, const std::vector<std::string_view>& keys) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (unlink_key(t, order, keys[i])) out.push_back(static_cast<uint32_t>(i));
  }
  return out;
}

bool linked_key(const ObjectTable& t, Order order, std::string_view key) {
  const Row row = t.find(key);
  return row != kNoRow && t.linked(order, row);
}

}  // namespace kvs::meta
