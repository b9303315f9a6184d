// ember._C: the pybind11 module. Bindings only; C++ errors become ember's Python exception classes.
#include "common.h"
#include "cpu/allocator.h"
#include "cpu/dispatch.h"
#include "cpu/parallel.h"
#include "storage.h"

namespace {

// Maps an ErrorKind to the Python class defined in ember/errors.py (imported lazily).
PyObject* error_class(ember::ErrorKind kind) {
  // Leaked on purpose: a static py::object would be released after the interpreter is gone.
  static PyObject* mod = py::module_::import("ember.errors").release().ptr();
  const char* name = "EmberError";
  switch (kind) {
    case ember::ErrorKind::Shape: name = "ShapeError"; break;
    case ember::ErrorKind::DType: name = "DTypeError"; break;
    case ember::ErrorKind::Type: name = "EmberTypeError"; break;
    case ember::ErrorKind::Device: name = "DeviceError"; break;
    case ember::ErrorKind::Index: name = "IndexOutOfRange"; break;
    case ember::ErrorKind::Unsupported: name = "UnsupportedOp"; break;
    case ember::ErrorKind::Memory: name = "OutOfMemory"; break;
    case ember::ErrorKind::Value: name = "EmberValueError"; break;
  }
  return py::handle(mod).attr(name).ptr();
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "ember's C++ core (storage, layout, CPU kernels)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ember::Error& e) {
      PyErr_SetString(error_class(e.kind), e.what());
    }
  });
  ember::bind::bind_layout(m);
  ember::bind::bind_storage(m);
  ember::bind::bind_ops(m);
  bind_fused(m);

  m.def("get_num_threads", &ember::cpu::get_num_threads);
  m.def("set_num_threads", &ember::cpu::set_num_threads, py::arg("n"));
  m.def("manual_seed", [](uint64_t s) { ember::manual_seed(s); });
  m.def("isa", [] { return std::string(ember::cpu::isa_name(ember::cpu::active_isa())); });
  m.def("cached_bytes", &ember::cpu::cached_bytes);
  m.def("empty_cache", &ember::cpu::empty_cache);
}
