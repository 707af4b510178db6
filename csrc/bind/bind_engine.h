// The engine's binding, part of transfer_engine._core: bind_engine.cpp binds the engine, its regions and
// peers; bind_engine_batches.cpp the batches (submit, wait, single transfers) and the regions' fences.
#pragma once

#include <pybind11/pybind11.h>

#include "engine/engine.h"

namespace kvs::bind {

// The Batch class (before the Engine class, whose methods return it).
void bind_batch(pybind11::module_& m);
void bind_engine_batches(pybind11::class_<Engine>& c);
void bind_engine_fences(pybind11::class_<Engine>& c);

}  // namespace kvs::bind
