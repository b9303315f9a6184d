// bias_gelu's kernel family: gelu(x + b), b broadcast over the last dim, forward and backward (see registry.h).
#pragma once
#include <tuple>

#include "../backend.h"
#include "../registry.h"
#include "checks.h"

namespace ember {

// Forward: y = gelu(x + b) (the exact erf gelu), x through l, b (n,) over x's last dim; y dense. The sum is
// rounded to x's dtype before gelu, so y is exactly the unfused (x + b).gelu().
struct BiasGeluFwd {
  static constexpr const char* kName = "bias_gelu";
  // The entry point: checks every argument, then calls the kernel of x's device (kernels re-check nothing).
  static StoragePtr run(const BackendStorage& x, const Layout& l, const BackendStorage& b, const Layout& lb) {
    const char* op = "bias_gelu";
    checks::float_input(x, op, "input");
    checks::like(x, b, op, "bias");
    EMBER_CHECK(l.ndim() >= 1, Shape, "[bias_gelu] expected at least 1 dim, got a scalar");
    checks::in_bounds(x, l, op);
    checks::param(x, b, lb, checks::last_dim(l), op, "bias");
    return Kernels<BiasGeluFwd>::of(x)(x, l, b, lb);
  }
  using Fn = decltype(&run);
};

// Backward, g: y's gradient. Returns (dx, db): dx = g * gelu'(x + b) dense, and db its sum over every dim but
// the last, computed in the same pass; db is null when `want_bias` is false (its sums are skipped).
struct BiasGeluBwd {
  static constexpr const char* kName = "bias_gelu_bwd";
  // The entry point: checks every argument, then calls the kernel of x's device (kernels re-check nothing).
  static std::tuple<StoragePtr, StoragePtr> run(const BackendStorage& x, const Layout& l, const BackendStorage& b,
                                                const Layout& lb, const BackendStorage& g, const Layout& lg,
                                                bool want_bias) {
    const char* op = "bias_gelu_bwd";
    checks::float_input(x, op, "input");
    checks::like(x, b, op, "bias");
    checks::like(x, g, op, "grad");
    EMBER_CHECK(l.ndim() >= 1, Shape, "[bias_gelu_bwd] expected at least 1 dim, got a scalar");
    checks::grad_shape(l, lg, op);
    checks::in_bounds(x, l, op);
    checks::in_bounds(g, lg, op);
    checks::param(x, b, lb, checks::last_dim(l), op, "bias");
    return Kernels<BiasGeluBwd>::of(x)(x, l, b, lb, g, lg, want_bias);
  }
  using Fn = decltype(&run);
};

}  // namespace ember
