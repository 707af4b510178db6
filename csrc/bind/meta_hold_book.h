// kvstore._meta.HoldBook: what each storage node is told it holds (csrc/meta/hold_book.h).
#pragma once

#include <pybind11/pybind11.h>

namespace kvs::bind {

void register_hold_book(pybind11::module_& m);

}  // namespace kvs::bind
