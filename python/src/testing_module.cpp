// ember._C_testing: hooks that exist only for the tests (the MSL emulator run on numpy buffers, the Metal
// policy classes, the embedded sources). Built and installed beside _C; ember never imports it.
#include "common.h"

PYBIND11_MODULE(_C_testing, m) {
  m.doc() = "ember's test-only hooks (the Metal emulator and policy classes); not part of ember's API";
  ember::bind::init_module(true);
  ember::bind::bind_metal_testing(m);
}
