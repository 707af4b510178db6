// The memory space's binding, part of kvstore._meta.
#pragma once

#include <pybind11/pybind11.h>

namespace kvs::bind {

void register_memory_space(pybind11::module_& m);

}  // namespace kvs::bind
