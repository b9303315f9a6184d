// Bindings for Layout (the view rules live in cpp/layout.cpp).
#include "common.h"
#include "layout.h"

namespace ember::bind {

void bind_layout(py::module_& m) {
  py::class_<Layout>(m, "Layout")
      // Hand-made layouts are validated up front (one stride per dim, countable non-negative dims);
      // whether they fit a storage is checked where a storage meets them.
      .def(py::init([](Shape shape, Shape stride, int64_t offset) {
             EMBER_CHECK(shape.size() == stride.size(), Shape, "[Layout] shape ", shape_str(shape), " and stride ",
                         shape_str(stride), " differ in length");
             checked_numel(shape, "Layout");
             return Layout(std::move(shape), std::move(stride), offset);
           }),
           py::arg("shape"), py::arg("stride"), py::arg("start_offset") = 0)
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
          py::arg("shape"), py::arg("start_offset") = 0)
      .def_static("contiguous", [](const py::args&, const py::kwargs&) -> Layout {
        EMBER_CHECK(false, Type, "[Layout] expected Layout.contiguous(shape, start_offset=0): a sequence of ints "
                    "and an int, each within int64");
      })
      .def_property_readonly("shape", [](const Layout& l) { return py::tuple(py::cast(l.shape())); })
      .def_property_readonly("stride", [](const Layout& l) { return py::tuple(py::cast(l.stride())); })
      .def_property_readonly("start_offset", &Layout::offset)
      .def_property_readonly("ndim", &Layout::ndim)
      .def("numel", &Layout::numel)
      .def("is_contiguous", &Layout::is_contiguous)
      .def("contiguous_offsets", &Layout::contiguous_offsets)
      .def("transpose", &Layout::transpose)
      .def("permute", &Layout::permute)
      .def("narrow", &Layout::narrow)
      .def("slice", &Layout::slice)
      .def("select", &Layout::select)
      .def("broadcast_as", &Layout::broadcast_as)
      .def("squeeze", &Layout::squeeze)
      .def("unsqueeze", &Layout::unsqueeze)
      .def("reshape", &Layout::reshape)
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
