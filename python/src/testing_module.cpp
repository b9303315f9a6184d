// ember._C_testing: hooks that exist only for the tests (the MSL emulator run on numpy buffers, the Metal
// policy classes, the embedded sources, the CPU kernel cache's directory). Installed beside _C; ember never
// imports it.
#include "common.h"

PYBIND11_MODULE(_C_testing, m) {
  m.doc() = "ember's test-only hooks (the Metal emulator and policy classes); not part of ember's API";
  ember::bind::init_module(true);
  ember::bind::bind_metal_testing(m);
  ember::bind::bind_cuda_testing(m);
  ember::bind::bind_cuda_kernels_testing(m);
  m.def("cpu_kernel_cache_dir", [] { return ember::bind::cpu_kernel_cache().dir(); },
        "The directory of em.cpu.Kernel's on-disk cache (resolved as _C resolves it).");
}
