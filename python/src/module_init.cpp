// What both extensions set up at import: C++ errors become ember's Python exception classes (ember/errors.py),
// Ctrl-C reaches the kernels, and the main thread is known (after a fork too).
#include <pthread.h>
#include <signal.h>

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

// SIGINT: Python's own C handler only sets a flag that its eval loop reads once the running kernel
// returns. This one also tells the kernels (cpu::note_interrupt) and then runs Python's. Installed
// only over a handler, not over SIG_DFL / SIG_IGN; a later signal.signal(SIGINT, ...) replaces it,
// and kernels then finish before KeyboardInterrupt, as before. Each extension has its own copy of the
// core, so each chains its own hook (the testing module's runs _C's, which runs Python's).
struct sigaction g_prev_sigint;
void on_sigint(int sig, siginfo_t* info, void* ctx) {
  // Python's first: once a kernel sees the interrupt, PyErr_CheckSignals (below) finds it pending.
  if (g_prev_sigint.sa_flags & SA_SIGINFO) g_prev_sigint.sa_sigaction(sig, info, ctx);
  else g_prev_sigint.sa_handler(sig);
  cpu::note_interrupt();
}
void install_sigint_hook() {
  struct sigaction cur;
  if (sigaction(SIGINT, nullptr, &cur) != 0) return;
  if (!(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN)) return;
  g_prev_sigint = cur;
  struct sigaction mine = cur;
  mine.sa_flags |= SA_SIGINFO;
  mine.sa_sigaction = on_sigint;
  sigaction(SIGINT, &mine, nullptr);
}
void after_fork_child() { g_main_thread = PyThread_get_thread_ident(); }

}  // namespace

// _C's translator is global (as before); the testing extension's is local to its own functions and its own
// copy of the Error type.
void init_module(bool testing) {
  if (testing) kcache::set_loader_tag("testing");  // its own module files: see kernel_cache.h
  if (testing) py::register_local_exception_translator(&translate);
  else py::register_exception_translator(&translate);
  g_main_thread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  pthread_atfork(nullptr, nullptr, after_fork_child);
  install_sigint_hook();
}

}  // namespace ember::bind
