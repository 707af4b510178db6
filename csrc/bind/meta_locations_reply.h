// The get_replicas reply's reader for clients, part of kvstore._meta.
#pragma once

#include <pybind11/pybind11.h>

namespace kvs::bind {

void register_locations_reply(pybind11::module_& m);

}  // namespace kvs::bind
