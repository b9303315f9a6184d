// Bindings for the Metal device layer over its public surface (metal/api.h): MetalStorage and the device's
// synchronize / memory controls and counters.
#include "common.h"
#include "device.h"
#include "metal/api.h"
#include "storage.h"

namespace ember::bind {
namespace {

using MetalStorage = metal::MetalStorageView;

py::dtype np_dtype_of(DType dt) {
  static PyObject* dtypes = py::module_::import("ember.dtypes").release().ptr();
  return py::dtype::from_args(py::handle(dtypes).attr("numpy_dtype")(py::handle(dtypes).attr("BY_CODE")[py::int_((int)dt)]));
}

// A dense copy of (s, l) on any device as a new host array of the storage's dtype.
py::array host_copy(const BackendStorage& s) {
  py::array out(np_dtype_of(s.dtype()), std::vector<ssize_t>{(ssize_t)s.numel()});
  DeviceBackend& b = device_backend(s.device(), "numpy");
  {
    py::gil_scoped_release nogil;
    b.to_host(s, out.mutable_data());
  }
  return out;
}

}  // namespace

void bind_metal_storage(py::module_& m) {
  metal::register_backend();
  py::class_<MetalStorage, BackendStorage, std::shared_ptr<MetalStorage>>(
      m, "MetalStorage",
      "A storage in a Metal buffer from the device's pool (shared memory). A custom op's metal_fwd receives "
      "its inputs as MetalStorages and returns a new one.")
      .def("numpy", [](const MetalStorage& s) { return host_copy(s); },
           "A new flat numpy array with the buffer's values: waits for the device's pending work, then copies.")
      .def_property_readonly("nbytes", &MetalStorage::nbytes, "The size of the storage in bytes.")
      .def_property_readonly("byte_offset", &MetalStorage::byte_offset, "Where the storage starts in its buffer.")
      .def_static(
          "_empty_code",
          [](int64_t n, int code, int index) {
            return metal::empty(index, to_dtype(code), n);
          },
          py::arg("n"), py::arg("code"), py::arg("index") = 0);
  m.def("_metal_backend_kind", [] {
    const char* k = metal::backend_kind();
    return k ? py::object(py::str(k)) : py::object(py::none());
  });
  m.def("_metal_describe", &metal::describe, py::arg("index") = 0);
  m.def("_metal_synchronize", &metal::synchronize, py::arg("index") = 0, py::call_guard<py::gil_scoped_release>());
  m.def("_metal_stats", [](int index) {
    py::dict d;
    for (const auto& [name, v] : metal::stats(index)) d[py::str(name)] = v;
    return d;
  }, py::arg("index") = 0);
  m.def("_metal_empty_cache", &metal::empty_cache, py::arg("index") = 0);
  m.def("_metal_set_cache_limit", [](size_t n, int index) { metal::set_cache_limit(n, index); }, py::arg("bytes"),
        py::arg("index") = 0);
  m.def("_metal_set_memory_limit", [](size_t n, int index) { metal::set_memory_limit(n, index); }, py::arg("bytes"),
        py::arg("index") = 0);
  m.def("_metal_reset_peak_memory", &metal::reset_peak_memory, py::arg("index") = 0);
}

}  // namespace ember::bind
