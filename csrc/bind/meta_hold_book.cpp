// kvstore._meta.HoldBook (csrc/meta/hold_book.h), bound over the object table it reads: nodes are the
// caller's numbers (kvstore.master.ledger.holds numbers client ids), a batch of holds crosses once, and
// take answers with the holds array already msgpack-encoded.
#include "bind/meta_hold_book.h"

#include <pybind11/numpy.h>

#include <string>
#include <vector>

#include "meta/hold_book.h"

namespace py = pybind11;

namespace kvs::bind {
namespace {

using meta::HeldCopy;
using meta::HoldBook;
using meta::ObjectTable;

using Refs = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;

py::list numbers(const std::vector<uint32_t>& values) {
  py::list out(static_cast<Py_ssize_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i)
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), PyLong_FromUnsignedLong(values[i]));
  return out;
}

py::tuple hold_rows(HoldBook& book, const Refs& refs) {
  const std::vector<meta::Ref> wanted(refs.data(), refs.data() + refs.size());
  std::vector<uint32_t> nodes;
  const meta::HoldRowsCheck check = book.hold_rows(wanted, nodes);
  if (check.stale != SIZE_MAX)
    throw py::key_error("stale object reference at position " + std::to_string(check.stale));
  return py::make_tuple(numbers(nodes), check.unknown_segment);
}

py::tuple take(HoldBook& book, uint32_t node, size_t limit) {
  std::string out;
  const meta::Taken taken = book.take(node, limit, out);
  return py::make_tuple(py::bytes(out.data(), out.size()), taken.sent, taken.dropped);
}

}  // namespace

void register_hold_book(py::module_& m) {
  py::class_<HoldBook>(m, "HoldBook",
                       "Per node, the replicas it is told it holds, in number order, read from the table.")
      .def(py::init<ObjectTable&>(), py::arg("table"), py::keep_alive<1, 2>())
      .def("add_segment", &HoldBook::add_segment, py::arg("segment"), py::arg("node"), py::arg("region"),
           "A segment's copies are held on `node`, in `region`.")
      .def(
          "has_segment", [](const HoldBook& b, uint32_t segment) { return b.place(segment) != nullptr; },
          py::arg("segment"))
      .def(
          "hold",
          [](HoldBook& b, uint32_t node, uint64_t ref, uint32_t segment, uint64_t region, uint64_t offset,
             uint32_t slot,
             uint64_t gen) { return b.hold(node, ref, HeldCopy{segment, region, offset, slot, gen}); },
          py::arg("node"), py::arg("ref"), py::arg("segment"), py::arg("region"), py::arg("offset"),
          py::arg("slot"), py::arg("gen"),
          "Holds one copy of the object `ref`; returns the hold's number (that of an earlier hold of the "
          "same copy not sent yet).")
      .def("hold_rows", &hold_rows, py::arg("refs"),
           "Every copy of each object of `refs` held, each row's hold_seq set: (the nodes held on, 0); "
           "(nothing held) ([], a copy's segment not added) or KeyError for a stale reference.")
      .def("cancel", &HoldBook::cancel, py::arg("node"), py::arg("region"), py::arg("slot"), py::arg("gen"))
      .def("acknowledge", &HoldBook::acknowledge, py::arg("node"), py::arg("through"),
           "The node has every hold numbered up to `through`, at most the highest number it was sent.")
      .def("drop_node", &HoldBook::drop_node, py::arg("node"))
      .def("drop_region", &HoldBook::drop_region, py::arg("node"), py::arg("region"))
      .def("lowest", &HoldBook::lowest, py::arg("node"), "The lowest number not acknowledged; 0: none.")
      .def("take", &take, py::arg("node"), py::arg("limit"),
           "(the msgpack array of at most `limit` holds, oldest first; how many; how many were dropped)")
      .def_property_readonly("last_seq", &HoldBook::last_seq)
      .def_property_readonly("sent", &HoldBook::sent)
      .def_property_readonly("outstanding", &HoldBook::outstanding);
}

}  // namespace kvs::bind
