// The put_start reply's encoder, part of kvstore._meta.
#pragma once

#include <pybind11/pybind11.h>

namespace kvs::bind {

void register_put_reply(pybind11::module_& m);

}  // namespace kvs::bind
