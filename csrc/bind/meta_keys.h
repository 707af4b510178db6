// Conversions the object table's binding shares: the str keys of a Python list read in place (their UTF-8
// is cached in the str for ASCII keys), and the fields of the master's objects read as C integers.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string_view>
#include <vector>

namespace kvs::bind {

inline std::string_view key_of(PyObject* item) {
  if (!PyUnicode_Check(item)) throw pybind11::type_error("keys must be str");
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(item, &size);
  if (data == nullptr) throw pybind11::error_already_set();
  return {data, static_cast<size_t>(size)};
}

// The keys of a list of str, as views into the strs (valid while the list holds them).
inline std::vector<std::string_view> keys_of(const pybind11::list& keys) {
  const Py_ssize_t n = PyList_GET_SIZE(keys.ptr());
  std::vector<std::string_view> out(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = key_of(PyList_GET_ITEM(keys.ptr(), i));
  return out;
}

// The items of `keys` at `indexes`, in order (the caller's own str objects).
inline pybind11::list picked(const pybind11::list& keys, const std::vector<uint32_t>& indexes) {
  pybind11::list out(static_cast<Py_ssize_t>(indexes.size()));
  for (size_t i = 0; i < indexes.size(); ++i) {
    PyObject* key = PyList_GET_ITEM(keys.ptr(), indexes[i]);
    Py_INCREF(key);
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), key);
  }
  return out;
}

// An attribute of an object the master made (NewObject, Replica), as a new reference.
inline pybind11::object attr_of(PyObject* obj, const pybind11::str& name) {
  PyObject* value = PyObject_GetAttr(obj, name.ptr());
  if (value == nullptr) throw pybind11::error_already_set();
  return pybind11::reinterpret_steal<pybind11::object>(value);
}

inline uint64_t u64_of(const pybind11::object& value) {
  const unsigned long long v = PyLong_AsUnsignedLongLong(value.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) throw pybind11::error_already_set();
  return v;
}

}  // namespace kvs::bind
