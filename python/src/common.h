// Shared helpers for the bindings: dtype/device codes and the pybind11 includes.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "backend.h"
#include "cpu/host_api.h"

namespace py = pybind11;

namespace ember::bind {

inline DType to_dtype(int code) {
  EMBER_CHECK(code >= 0 && code < kNumDTypes, DType, "[dtype] unknown dtype code ", code);
  return static_cast<DType>(code);
}
inline Device to_device(int kind, int index) {
  EMBER_CHECK(kind >= 0 && kind < kNumDeviceKinds, Value, "[device] unknown device kind code ", kind);
  return Device{static_cast<DeviceKind>(kind), index};
}
// Python's main thread (the one KeyboardInterrupt is raised in), set at import and in a forked child.
inline unsigned long g_main_thread = 0;
// Makes a kernel call from the main thread stoppable by Ctrl-C (cpu/parallel.h); built with the GIL
// held, before it is released.
struct Interruptible {
  std::optional<cpu::InterruptScope> scope;
  Interruptible() {
    if (PyThread_get_thread_ident() == g_main_thread) scope.emplace();
  }
};
using GilFree = py::call_guard<Interruptible, py::gil_scoped_release>;

void bind_layout(py::module_& m);
void bind_metal_kernel(py::module_& m);  // metal_kernel.cpp: em.metal.Kernel
void bind_cpu_kernel(py::module_& m);    // cpu_kernel.cpp: em.cpu.Kernel
void bind_storage(py::module_& m);
void bind_ops(py::module_& m);
void bind_metal(py::module_& m);
void bind_metal_policy(py::module_& m);
void bind_cuda(py::module_& m);         // cuda.cpp: CudaStorage, em.cuda, em.cuda.Kernel

}  // namespace ember::bind

void bind_fused(py::module_& m);
