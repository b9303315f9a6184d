// ember._C: the pybind11 module. Bindings only; C++ errors become ember's Python exception classes.
#include <pthread.h>
#include <signal.h>

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
    case ember::ErrorKind::Interrupted: name = "EmberError"; break;
  }
  return py::handle(mod).attr(name).ptr();
}

// SIGINT: Python's own C handler only sets a flag that its eval loop reads once the running kernel
// returns. This one also tells the kernels (cpu::note_interrupt) and then runs Python's. Installed
// only over a handler, not over SIG_DFL / SIG_IGN; a later signal.signal(SIGINT, ...) replaces it,
// and kernels then finish before KeyboardInterrupt, as before.
struct sigaction g_prev_sigint;
void on_sigint(int sig, siginfo_t* info, void* ctx) {
  // Python's first: once a kernel sees the interrupt, PyErr_CheckSignals (below) finds it pending.
  if (g_prev_sigint.sa_flags & SA_SIGINFO) g_prev_sigint.sa_sigaction(sig, info, ctx);
  else g_prev_sigint.sa_handler(sig);
  ember::cpu::note_interrupt();
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
void after_fork_child() { ember::bind::g_main_thread = PyThread_get_thread_ident(); }

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "ember's C++ core (storage, layout, CPU kernels)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ember::Error& e) {
      // An op stopped by Ctrl-C: Python's handler raises KeyboardInterrupt (or whatever it does);
      // if it raises nothing, the op still did not complete, which an EmberError says.
      if (e.kind == ember::ErrorKind::Interrupted && PyErr_CheckSignals() != 0) return;
      PyErr_SetString(error_class(e.kind), e.what());
    }
  });
  ember::bind::g_main_thread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  pthread_atfork(nullptr, nullptr, after_fork_child);
  install_sigint_hook();
  ember::bind::bind_layout(m);
  ember::bind::bind_metal_kernel(m);
  ember::bind::bind_storage(m);
  ember::bind::bind_ops(m);
  bind_fused(m);
  ember::bind::bind_metal(m);

  m.def("get_num_threads", &ember::cpu::get_num_threads);
  m.def("set_num_threads", &ember::cpu::set_num_threads, py::arg("n"));
  m.def("manual_seed", [](uint64_t s) { ember::manual_seed(s); });
  m.def("isa", [] { return std::string(ember::cpu::isa_name(ember::cpu::active_isa())); });
  m.def("cached_bytes", &ember::cpu::cached_bytes);
  m.def("empty_cache", &ember::cpu::empty_cache);
  m.def("memory_stats", [] {
    const auto st = ember::cpu::memory_stats();
    return py::make_tuple(st.allocated, st.cached, st.peak, st.cache_limit);
  }, "(allocated, cached, peak, cache_limit) bytes of the CPU allocator.");
  m.def("reset_peak_memory", &ember::cpu::reset_peak_memory);
  m.def("set_cache_limit", &ember::cpu::set_cache_limit, py::arg("bytes"));
}
