// The object table's binding, part of kvstore._meta.
#pragma once

#include <pybind11/pybind11.h>

namespace kvs::bind {

void register_object_table(pybind11::module_& m);

}  // namespace kvs::bind
