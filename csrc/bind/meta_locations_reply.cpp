// kvstore._meta.decode_locations_reply: a get_replicas reply frame read in C++ (csrc/meta/locations_reply.h)
// and made into the client's records (kvstore.rpc.records.ObjectLocation and Location, named tuples) in
// one crossing, with no msgpack object in between. A frame of any other shape gives None: the caller
// decodes it the general way.
#include "bind/meta_locations_reply.h"

#include <cstring>
#include <string_view>
#include <vector>

#include "meta/locations_reply.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

constexpr size_t kCachedStrs = 16;  // distinct hosts, engines and paths reused within one reply

// The strs of one reply: a copy's host and engine repeat over the batch (a few nodes serve it all), so
// each distinct text is decoded once. nullptr where the bytes are not UTF-8 (the error is cleared: the
// general decoder refuses the frame).
class StrCache {
 public:
  PyObject* get(std::string_view text) {
    for (const auto& [seen, str] : seen_) {
      if (seen.size() == text.size() && std::memcmp(seen.data(), text.data(), text.size()) == 0) {
        return Py_NewRef(str.ptr());
      }
    }
    PyObject* str = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "strict");
    if (str == nullptr) {
      PyErr_Clear();
      return nullptr;
    }
    if (seen_.size() < kCachedStrs) seen_.emplace_back(text, py::reinterpret_borrow<py::object>(str));
    return str;
  }

 private:
  std::vector<std::pair<std::string_view, py::object>> seen_;
};

// A named tuple of `type` (a tuple subclass) holding `items` (new references, stolen). A nullptr item is
// a failure: an error raised (memory) is thrown, a str that is not UTF-8 gives an empty object.
py::object record(PyTypeObject* type, std::initializer_list<PyObject*> items) {
  py::object out =
      py::reinterpret_steal<py::object>(type->tp_alloc(type, static_cast<Py_ssize_t>(items.size())));
  bool whole = static_cast<bool>(out);
  Py_ssize_t i = 0;
  for (PyObject* item : items) {
    if (item == nullptr) {
      whole = false;
    } else if (out) {
      PyTuple_SET_ITEM(out.ptr(), i, item);
    } else {
      Py_DECREF(item);
    }
    ++i;
  }
  if (!out || PyErr_Occurred()) throw py::error_already_set();
  return whole ? out : py::object();
}

PyObject* u64(uint64_t v) {
  return PyLong_FromUnsignedLongLong(v);
}

py::object copy_record(PyTypeObject* type, const meta::LocatedCopy& c, StrCache& strs) {
  return record(type, {u64(c.tier), strs.get(c.host_id), strs.get(c.engine), u64(c.region_id), u64(c.offset),
                       u64(c.slot), u64(c.gen), strs.get(c.path)});
}

PyTypeObject* tuple_type(const py::handle& type, const char* what) {
  if (!PyType_Check(type.ptr()) ||
      !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type.ptr()), &PyTuple_Type)) {
    throw py::type_error(std::string(what) + " must be a tuple type (a NamedTuple)");
  }
  return reinterpret_cast<PyTypeObject*>(type.ptr());
}

// The records of a reply read, or None where a str is not UTF-8.
py::object records_of(const meta::LocationsReply& reply, PyTypeObject* entry_type, PyTypeObject* copy_type) {
  StrCache strs;
  py::list out(static_cast<Py_ssize_t>(reply.entries.size()));
  for (size_t i = 0; i < reply.entries.size(); ++i) {
    const meta::LocatedEntry& e = reply.entries[i];
    py::object entry = py::none();
    if (e.hit) {
      py::list copies(e.count);
      for (uint32_t k = 0; k < e.count; ++k) {
        py::object copy = copy_record(copy_type, reply.copies[e.first + k], strs);
        if (!copy) return py::none();
        PyList_SET_ITEM(copies.ptr(), k, copy.release().ptr());
      }
      entry = record(entry_type, {u64(e.size), u64(e.checksum), copies.release().ptr()});
      if (!entry) return py::none();
    }
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), entry.release().ptr());
  }
  return std::move(out);
}

py::object decode_locations_reply(const py::buffer& frame, uint64_t msg_id, const py::handle& entry_type,
                                  const py::handle& copy_type) {
  PyTypeObject* entries = tuple_type(entry_type, "entry_type");
  PyTypeObject* copies = tuple_type(copy_type, "copy_type");
  const py::buffer_info view = frame.request();
  if (view.ndim != 1 || view.itemsize != 1) throw py::type_error("frame must be a flat buffer of bytes");
  meta::LocationsReply reply;
  const std::string_view bytes(static_cast<const char*>(view.ptr), static_cast<size_t>(view.size));
  if (!meta::read_locations_reply(bytes, reply) || reply.msg_id != msg_id) return py::none();
  return records_of(reply, entries, copies);
}

}  // namespace

void register_locations_reply(py::module_& m) {
  m.def(
      "decode_locations_reply", &decode_locations_reply, py::arg("frame"), py::arg("msg_id"),
      py::arg("entry_type"), py::arg("copy_type"),
      "A get_replicas response frame (its msgpack body: [msg_id, 0, \"\", result]) as the client's records: "
      "per key entry_type(size, checksum, [copy_type(tier, host_id, engine, region_id, offset, slot, gen, "
      "path), ...]) or None. None instead where the frame is not a success for `msg_id` of the common shape "
      "(unsigned integers in their bounds, tier 0 or 1, UTF-8 strings, every copy served by an engine, "
      "nothing after it): the caller then decodes it the general way, which refuses what is malformed.");
}

}  // namespace kvs::bind
