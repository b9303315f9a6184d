// rms_norm's kernel family: the forward and backward every device registers (see registry.h).
#pragma once
#include <tuple>

#include "../backend.h"
#include "../registry.h"
#include "checks.h"

namespace ember {

// Forward over the last dim of x through l; w (n,) optional (ones). Returns (y, rstd: one stats-dtype
// value per row).
struct RmsNormFwd {
  static constexpr const char* kName = "rms_norm";
  // The entry point: checks every argument, then calls the kernel of x's device (kernels re-check nothing).
  static std::tuple<StoragePtr, StoragePtr> run(const BackendStorage& x, const Layout& l, const BackendStorage* w,
                                                const Layout* lw, double eps) {
    const char* op = "rms_norm";
    checks::float_input(x, op, "input");
    if (w) checks::like(x, *w, op, "weight");
    EMBER_CHECK(l.ndim() >= 1, Shape, "[rms_norm] expected at least 1 dim, got a scalar");
    checks::in_bounds(x, l, op);
    checks::opt_param(x, w, lw, checks::last_dim(l), op, "weight");
    return Kernels<RmsNormFwd>::of(x)(x, l, w, w ? lw : nullptr, eps);
  }
  using Fn = decltype(&run);
};

// Backward, g: y's gradient. Returns (dx, dw); dw is null when w is absent or `want_params` is false (no
// gradient is wanted for w: the kernel then skips its sums). `add` (x's shape, dtype and device; optional):
// dx + add is returned instead of dx, rounded as the separate add would round it (as layer_norm_bwd's).
struct RmsNormBwd {
  static constexpr const char* kName = "rms_norm_bwd";
  // The entry point: checks every argument, then calls the kernel of x's device (kernels re-check nothing).
  static std::tuple<StoragePtr, StoragePtr> run(const BackendStorage& x, const Layout& l, const BackendStorage* w,
                                                const Layout* lw, const BackendStorage& rstd, const BackendStorage& g,
                                                const Layout& lg, bool want_params,
                                                const BackendStorage* add = nullptr, const Layout* ladd = nullptr) {
    const char* op = "rms_norm_bwd";
    checks::float_input(x, op, "input");
    if (w) checks::like(x, *w, op, "weight");
    checks::like(x, g, op, "grad");
    checks::grad_shape(l, lg, op);
    EMBER_CHECK(l.ndim() >= 1, Shape, "[rms_norm_bwd] expected at least 1 dim, got a scalar");
    checks::in_bounds(x, l, op);
    checks::in_bounds(g, lg, op);
    checks::stats(x, rstd, checks::rows_of(l), op, "rstd", "row");
    checks::opt_param(x, w, lw, checks::last_dim(l), op, "weight");
    if (add) checks::dx_add(x, l, *add, ladd, op);
    return Kernels<RmsNormBwd>::of(x)(x, l, w, w ? lw : nullptr, rstd, g, lg, want_params && w, add,
                                      add ? ladd : nullptr);
  }
  using Fn = decltype(&run);
};

}  // namespace ember
