// The table's eviction orders by key, as an eviction policy calls them (kvstore.master.objects.TableOrder):
// one call per key or per batch of keys.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "meta/object_table.h"

namespace kvs::meta {

// The order numbered `o` (0: memory eviction, 1: disk eviction); std::invalid_argument for another number.
Order order_of(int o);

// Links the rows first or last, in turn (each moved if linked).
void link_rows(ObjectTable& t, Order order, const std::vector<Row>& rows, bool front);

// Moves a linked object last; false (nothing done) if absent or not linked.
bool touch(ObjectTable& t, Order order, std::string_view key);
// touch of each key.
std::vector<bool> touch_all(ObjectTable& t, Order order, const std::vector<std::string_view>& keys);

// Unlinks the object; false if absent or not linked.
bool unlink_key(ObjectTable& t, Order order, std::string_view key);
// unlink_key of each key; the indexes of those that were linked.
std::vector<uint32_t> unlink_keys(ObjectTable& t, Order order, const std::vector<std::string_view>& keys);

// Whether the table holds the key and it is linked in the order.
bool linked_key(const ObjectTable& t, Order order, std::string_view key);

}  // namespace kvs::meta
