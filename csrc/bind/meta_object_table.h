// The object table's binding, part of kvstore._meta: meta_object_table.cpp binds the table and its single
// objects, meta_object_batches.cpp its calls over a batch of keys, meta_puts.cpp its puts.
#pragma once

#include <pybind11/pybind11.h>

#include "meta/object_table.h"

namespace kvs::bind {

void register_object_table(pybind11::module_& m);
void register_object_batches(pybind11::class_<meta::ObjectTable>& c);
void register_puts(pybind11::class_<meta::ObjectTable>& c);

}  // namespace kvs::bind
