// Bindings for Layout (the view rules live in cpp/layout.cpp).
#include "common.h"
#include "layout.h"

namespace ember::bind {

void bind_layout(py::module_& m) {
  py::class_<Layout>(m, "Layout",
                     "How a tensor reads its storage: a shape, a stride per dim (in elements) and a start "
                     "offset. Views (transpose, narrow, broadcast, ...) are new layouts over the same storage.")
      // Hand-made layouts are validated up front (one stride per dim, countable non-negative dims);
      // whether they fit a storage is checked where a storage meets them.
      .def(py::init([](Shape shape, Shape stride, int64_t offset) {
             EMBER_CHECK(shape.size() == stride.size(), Shape, "[Layout] shape ", shape_str(shape), " and stride ",
                         shape_str(stride), " differ in length");
             checked_numel(shape, "Layout");
             return Layout(std::move(shape), std::move(stride), offset);
           }),
           py::arg("shape"), py::arg("stride"), py::arg("start_offset") = 0,
           "A layout from a shape, strides in elements (0 for a broadcast dim) and the start offset in "
           "elements. Raises ShapeError when shape and stride differ in length.")
      // Tried only when the typed overload above cannot convert its arguments: pybind's own message
      // would be a bare TypeError without the op's name.
      .def(py::init([](const py::args&, const py::kwargs&) -> Layout {
        EMBER_CHECK(false, Type, "[Layout] expected Layout(shape, stride, start_offset=0): two sequences of "
                    "ints of one length and an int, each within int64");
      }))
      .def_static(
          "contiguous",
          [](const Shape& shape, int64_t offset) {
            checked_numel(shape, "Layout");
            return Layout::contiguous(shape, offset);
          },
          py::arg("shape"), py::arg("start_offset") = 0,
          "The dense row-major layout of shape, starting at start_offset.")
      .def_static("contiguous", [](const py::args&, const py::kwargs&) -> Layout {
        EMBER_CHECK(false, Type, "[Layout] expected Layout.contiguous(shape, start_offset=0): a sequence of ints "
                    "and an int, each within int64");
      })
      .def_property_readonly("shape", [](const Layout& l) { return py::tuple(py::cast(l.shape())); },
                             "The size of each dim, a tuple of ints.")
      .def_property_readonly("stride", [](const Layout& l) { return py::tuple(py::cast(l.stride())); },
                             "The step between neighbours of each dim, in elements (0 for a broadcast dim).")
      .def_property_readonly("start_offset", &Layout::offset, "The index of the first element in the storage.")
      .def_property_readonly("ndim", &Layout::ndim, "The number of dims.")
      .def("numel", &Layout::numel, "The number of elements, the product of the shape.")
      .def("is_contiguous", &Layout::is_contiguous, "True when the elements are dense and in row-major order.")
      .def("contiguous_offsets", &Layout::contiguous_offsets,
           "(start, end) of the storage range the elements fill, when they are dense and row-major; else None.")
      .def("transpose", &Layout::transpose, py::arg("d0"), py::arg("d1"), "The layout with dims d0 and d1 swapped.")
      .def("permute", &Layout::permute, py::arg("dims"), "The layout whose dim i is dim dims[i] of this one.")
      .def("narrow", &Layout::narrow, py::arg("dim"), py::arg("start"), py::arg("length"),
           "The layout of [start, start + length) along dim.")
      .def("slice", &Layout::slice, py::arg("dim"), py::arg("start"), py::arg("stop"), py::arg("step"),
           "The layout of start:stop:step along dim (step >= 1).")
      .def("select", &Layout::select, py::arg("dim"), py::arg("index"), "The layout of one index along dim, that dim removed.")
      .def("broadcast_as", &Layout::broadcast_as, py::arg("shape"),
           "The stride-0 layout of this one broadcast to shape (numpy's rules).")
      .def("squeeze", &Layout::squeeze, py::arg("dim"), "The layout without dim, which must have size 1.")
      .def("unsqueeze", &Layout::unsqueeze, py::arg("dim"), "The layout with a new size-1 dim at dim.")
      .def("reshape", &Layout::reshape, py::arg("shape"),
           "The layout of the same elements in shape without moving them, or None when no such layout exists.")
      .def("__repr__", &Layout::repr)
      .def("__eq__", [](const Layout& a, const Layout& b) {
        return a.shape() == b.shape() && a.stride() == b.stride() && a.offset() == b.offset();
      })
      .def("__hash__", [](const Layout& l) { return py::hash(py::make_tuple(py::tuple(py::cast(l.shape())),
                                                                            py::tuple(py::cast(l.stride())),
                                                                            l.offset())); });
  m.def("broadcast_shapes", &broadcast_shapes, py::arg("a"), py::arg("b"), py::arg("op") = "broadcast");
  m.def("resolve_reshape", &resolve_reshape);
  m.def("normalize_dim", &normalize_dim, py::arg("dim"), py::arg("ndim"), py::arg("op"));
}

}  // namespace ember::bind
