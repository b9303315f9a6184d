// C++ errors become ember's Python exception classes (ember/errors.py), for both extensions.
#include "common.h"

namespace ember::bind {
namespace {

// Maps an ErrorKind to the Python class defined in ember/errors.py (imported lazily).
PyObject* error_class(ErrorKind kind) {
  // Leaked on purpose: a static py::object would be released after the interpreter is gone.
  static PyObject* mod = py::module_::import("ember.errors").release().ptr();
  const char* name = "EmberError";
  switch (kind) {
    case ErrorKind::Shape: name = "ShapeError"; break;
    case ErrorKind::DType: name = "DTypeError"; break;
    case ErrorKind::Type: name = "EmberTypeError"; break;
    case ErrorKind::Device: name = "DeviceError"; break;
    case ErrorKind::Index: name = "IndexOutOfRange"; break;
    case ErrorKind::Unsupported: name = "UnsupportedOp"; break;
    case ErrorKind::Memory: name = "OutOfMemory"; break;
    case ErrorKind::Value: name = "EmberValueError"; break;
    case ErrorKind::Interrupted: name = "EmberError"; break;
  }
  return py::handle(mod).attr(name).ptr();
}

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const Error& e) {
    // An op stopped by Ctrl-C: Python's handler raises KeyboardInterrupt (or whatever it does);
    // if it raises nothing, the op still did not complete, which an EmberError says.
    if (e.kind == ErrorKind::Interrupted && PyErr_CheckSignals() != 0) return;
    PyErr_SetString(error_class(e.kind), e.what());
  }
}

}  // namespace

// _C's is global (as before); the testing extension links its own copy of the core, so its translator is
// local to its own functions and Error type.
void register_error_translator(bool local) {
  if (local) py::register_local_exception_translator(&translate);
  else py::register_exception_translator(&translate);
}

}  // namespace ember::bind
