// softmax's kernel family (log_softmax too): the forward and backward every device registers (see registry.h).
#pragma once
#include "../backend.h"
#include "../registry.h"
#include "checks.h"

namespace ember {

// Forward: softmax (log_softmax when `log`) over the last dim of x through l. Returns y, dense, in x's
// dtype.
struct SoftmaxFwd {
  static constexpr const char* kName = "softmax";
  // The entry point: checks every argument, then calls the kernel of x's device (kernels re-check nothing).
  static StoragePtr run(const BackendStorage& x, const Layout& l, bool log) {
    const char* op = log ? "log_softmax" : "softmax";
    checks::float_input(x, op, "input");
    checks::in_bounds(x, l, op);
    return Kernels<SoftmaxFwd>::of(x)(x, l, log);
  }
  using Fn = decltype(&run);
};

// Backward: y the forward's output, g its gradient (same shape). Returns dx.
struct SoftmaxBwd {
  static constexpr const char* kName = "softmax_bwd";
  // The entry point: checks every argument, then calls the kernel of x's device (kernels re-check nothing).
  static StoragePtr run(const BackendStorage& y, const Layout& l, const BackendStorage& g, const Layout& lg, bool log) {
    const char* op = log ? "log_softmax_bwd" : "softmax_bwd";
    checks::float_input(y, op, "input");
    checks::like(y, g, op, "grad");
    checks::grad_shape(l, lg, op);
    checks::in_bounds(y, l, op);
    checks::in_bounds(g, lg, op);
    return Kernels<SoftmaxBwd>::of(y)(y, l, g, lg, log);
  }
  using Fn = decltype(&run);
};

}  // namespace ember
