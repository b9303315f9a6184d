// Shared helpers for the bindings: dtype/device codes and the pybind11 includes.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "backend.h"
#include "cpu/host_api.h"
#include "kernel_cache.h"
#include "metal/api.h"

namespace py = pybind11;

// A storage returned to Python as shared_ptr<BackendStorage> gets its most derived bound class. Metal's
// storage class is internal; its public base (metal/api.h) is what em.MetalStorage binds, so the lookup is
// told to use that one for every storage on a Metal device.
namespace pybind11 {
template <> struct polymorphic_type_hook<ember::BackendStorage> {
  static const void* get(const ember::BackendStorage* src, const std::type_info*& type) {
    if (src && src->device().kind == ember::DeviceKind::Metal) {
      type = &typeid(ember::metal::MetalStorageView);
      return static_cast<const ember::metal::MetalStorageView*>(src);
    }
    type = src ? &typeid(*src) : nullptr;
    return dynamic_cast<const void*>(src);
  }
};
}  // namespace pybind11

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

// module_init.cpp: the error translator, the SIGINT hook and the main thread, for _C and _C_testing.
void init_module(bool testing);
// function_constants.cpp: the one reader of Metal function constants. `items` holds (index, type, value) or
// (index, value) tuples (the type from the value's: exactly bool, int or float).
metal::FunctionConstant parse_function_constant(py::handle index, const std::string& type, py::handle value);
std::vector<metal::FunctionConstant> parse_function_constants(const py::list& items, const char* who);

// em.cpu.Kernel's on-disk cache; the testing module's copy resolves the same directory (it reports it).
inline kcache::Cache& cpu_kernel_cache() {
  static auto* c = new kcache::Cache("cpu-kernel", "EMBER_CPU_KERNEL_CACHE", "cpu.Kernel");  // leaked: code may run at exit
  return *c;
}

void bind_layout(py::module_& m);
void bind_metal_kernel(py::module_& m);  // metal_kernel.cpp: em.metal.Kernel
void bind_cpu_kernel(py::module_& m);    // cpu_kernel.cpp: em.cpu.Kernel
void bind_storage(py::module_& m);
void bind_ops(py::module_& m);
void bind_metal_storage(py::module_& m);  // metal_storage.cpp: MetalStorage, em.metal's controls
// The testing extension (ember._C_testing) only:
void bind_metal_testing(py::module_& m);  // testing_metal.cpp: the emulator's and the sources' hooks
void bind_cuda_testing(py::module_& m);   // testing_cuda.cpp: CUDA backend pieces checked without a GPU
void bind_cuda_kernels_testing(py::module_& m);  // testing_cuda_kernels.cpp: ember's kernels translated to CUDA
void bind_metal_policy(py::module_& m);   // metal_policy.cpp
void bind_cuda(py::module_& m);           // cuda.cpp: CudaStorage, em.cuda, em.cuda.Kernel

}  // namespace ember::bind

void bind_fused(py::module_& m);
