// A reference to an object of the table, (incarnation << 32) | row, as the master holds it between calls:
// a stale one (its object erased, the row perhaps reused) is refused instead of reaching another object.
#pragma once

#include <cstdint>

#include "meta/object_table.h"

namespace kvs::meta {

using Ref = uint64_t;

inline Ref ref_of(const ObjectTable& t, Row row) {
  return (static_cast<Ref>(t.incarnation(row)) << 32) | row;
}

inline bool ref_alive(const ObjectTable& t, Ref ref) {
  return t.alive(static_cast<Row>(ref & 0xFFFFFFFFu), static_cast<uint32_t>(ref >> 32));
}

// The row `ref` names, or kNoRow when the reference is stale.
inline Row row_of(const ObjectTable& t, Ref ref) {
  return ref_alive(t, ref) ? static_cast<Row>(ref & 0xFFFFFFFFu) : kNoRow;
}

}  // namespace kvs::meta
