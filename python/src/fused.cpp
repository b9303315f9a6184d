// Bindings for the fused kernels (placeholder until the fused kernels land).
#include "common.h"
void bind_fused(py::module_& m) { m.def_submodule("fused"); }
