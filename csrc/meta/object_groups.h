// Store groups in the object table: a member key is `<group>#<i>of<n>` (kvstore.blocks.member_key; the
// master marks only keys of that form as members). Readers see a member only while its whole group is
// stored, and a lease on one member holds them all (eviction and removal take a group whole).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "meta/object_table.h"

namespace kvs::meta {

struct GroupName {
  std::string_view group;  // the key before its last '#'
  uint32_t members = 0;    // n; 0 for a key of another form
};

// The group part of a member key and its member count ({"", 0} for a key of another form).
GroupName group_of(std::string_view key);

// Whether a key may name a group member at all (it has a '#'): the put path's cheap first test.
inline bool may_be_member(std::string_view key) {
  return key.find('#') != std::string_view::npos;
}

// Readers see it: committed, and not a member of a group missing some member.
inline bool visible(const Object& o) {
  return o.complete && o.group != kHidden;
}

// Raises the lease of every member of `key`'s group in the table to `until` (never lowers one).
void lease_group(ObjectTable& t, std::string_view key, double until);

// lease_group of each key that the table holds as a group member.
void lease_groups(ObjectTable& t, const std::vector<std::string_view>& keys, double until);

// Sets the group state (kNotMember, kShown or kHidden) of those of the keys in the table;
// std::invalid_argument for another state.
void set_group_state(ObjectTable& t, const std::vector<std::string_view>& keys, uint8_t state);

}  // namespace kvs::meta
