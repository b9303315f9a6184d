// ember._C: the pybind11 module. Bindings only; C++ errors become ember's Python exception classes.
#include "common.h"
#include "device.h"
#include "dtype.h"
#include "registry.h"
#include "storage.h"

namespace {

// The codes Python's tables are derived from: names in enum order (the index is the code).
void bind_codes(py::module_& m) {
  using namespace ember;
  py::list unary, binary, reduce, dtypes, kinds;
  for (const char* n : kUnaryNames) unary.append(n);
  for (const char* n : kBinaryNames) binary.append(n);
  for (const char* n : kReduceNames) reduce.append(n);
  for (const char* n : kDeviceKindNames) kinds.append(n);
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dt = (DType)i;
    dtypes.append(py::make_tuple(dtype_name(dt), itemsize(dt), is_float(dt)));
  }
  m.attr("UNARY_OPS") = unary;
  m.attr("BINARY_OPS") = binary;
  m.attr("REDUCE_OPS") = reduce;
  m.attr("DTYPES") = dtypes;  // (name, itemsize, is_float)
  m.attr("DEVICE_KINDS") = kinds;
}

// Per-device controls through DeviceBackend: every function takes the device as (kind, index), the
// CPU by default.
void bind_devices(py::module_& m) {
  using namespace ember;
  using ember::bind::to_device;
  const auto dev = [](int kind, int index, const char* op) -> DeviceBackend& {
    return device_backend(to_device(kind, index), op);
  };
  m.def("device_available", [](int kind, int index) { return device_available(to_device(kind, index)); },
        py::arg("kind"), py::arg("index") = 0);
  m.def("device_describe", [dev](int kind, int index) { return dev(kind, index, "device").describe(); },
        py::arg("kind") = 0, py::arg("index") = 0);
  m.def("device_supports", [dev](int kind, int index, int dt) {
    return dev(kind, index, "device").supports(ember::bind::to_dtype(dt));
  }, py::arg("kind"), py::arg("index"), py::arg("dtype"));
  m.def("synchronize", [dev](int kind, int index) {
    DeviceBackend& b = dev(kind, index, "synchronize");
    py::gil_scoped_release nogil;
    b.synchronize();
  }, py::arg("kind") = 0, py::arg("index") = 0);
  m.def("memory_stats", [dev](int kind, int index) {
    const MemoryStats st = dev(kind, index, "memory_stats").memory_stats();
    return py::make_tuple(st.allocated, st.cached, st.peak, st.cache_limit);
  }, py::arg("kind") = 0, py::arg("index") = 0, "(allocated, cached, peak, cache_limit) bytes of a device's allocator.");
  m.def("cached_bytes", [dev](int kind, int index) { return dev(kind, index, "memory_stats").memory_stats().cached; },
        py::arg("kind") = 0, py::arg("index") = 0);
  m.def("empty_cache", [dev](int kind, int index) { dev(kind, index, "empty_cache").empty_cache(); },
        py::arg("kind") = 0, py::arg("index") = 0);
  m.def("reset_peak_memory", [dev](int kind, int index) { dev(kind, index, "reset_peak_memory").reset_peak_memory(); },
        py::arg("kind") = 0, py::arg("index") = 0);
  m.def("set_cache_limit", [dev](size_t bytes, int kind, int index) {
    dev(kind, index, "set_cache_limit").set_cache_limit(bytes);
  }, py::arg("bytes"), py::arg("kind") = 0, py::arg("index") = 0);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "ember's C++ core (storage, layout, CPU kernels)";
  ember::bind::init_module(false);
  ember::cpu::register_kernels();
  ember::bind::bind_layout(m);
  ember::bind::bind_metal_kernel(m);
  ember::bind::bind_cpu_kernel(m);
  ember::bind::bind_storage(m);
  ember::bind::bind_ops(m);
  bind_fused(m);
  ember::bind::bind_metal_storage(m);
  ember::bind::bind_cuda(m);

  bind_codes(m);
  bind_devices(m);
  m.def("get_num_threads", &ember::cpu::get_num_threads);
  m.def("set_num_threads", &ember::cpu::set_num_threads, py::arg("n"));
  m.def("manual_seed", [](uint64_t s) { ember::manual_seed(s); });
  m.def("rng_install", [](uint64_t seed, uint64_t counter) { ember::rng_install(seed, counter); });
  m.def("rng_uninstall", []() { return ember::rng_uninstall(); });
  m.def("rng_mix", [](uint64_t s) { return ember::rng_mix(s); });
  m.def("_rng_state", [] {
    const ember::RngDraw r = ember::rng_state();
    return py::make_tuple(r.seed, r.counter);
  });
  m.def("_set_rng_state", [](uint64_t seed, uint64_t counter) { ember::set_rng_state(seed, counter); },
        py::arg("seed"), py::arg("counter"));
  m.def("isa", &ember::cpu::isa);
  m.def("has_amx", &ember::cpu::has_amx);
}
