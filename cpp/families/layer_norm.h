// layer_norm's kernel family: the forward and backward every device registers (see registry.h).
#pragma once
#include <tuple>

#include "../backend.h"
#include "../registry.h"
#include "checks.h"

namespace ember {

// Forward over the last dim of x through l; w, b (n,) optional (ones / zeros). Returns (y, mean, rstd),
// the stats one stats-dtype value per row.
struct LayerNormFwd {
  static constexpr const char* kName = "layer_norm";
  // The entry point: checks every argument, then calls the kernel of x's device (kernels re-check nothing).
  static std::tuple<StoragePtr, StoragePtr, StoragePtr> run(const BackendStorage& x, const Layout& l,
                                                            const BackendStorage* w, const Layout* lw,
                                                            const BackendStorage* b, const Layout* lb, double eps) {
    const char* op = "layer_norm";
    checks::float_input(x, op, "input");
    if (w) checks::like(x, *w, op, "weight");
    if (b) checks::like(x, *b, op, "bias");
    EMBER_CHECK(l.ndim() >= 1, Shape, "[layer_norm] expected at least 1 dim, got a scalar");
    checks::in_bounds(x, l, op);
    checks::opt_param(x, w, lw, checks::last_dim(l), op, "weight");
    checks::opt_param(x, b, lb, checks::last_dim(l), op, "bias");
    return Kernels<LayerNormFwd>::of(x)(x, l, w, w ? lw : nullptr, b, b ? lb : nullptr, eps);
  }
  using Fn = decltype(&run);
};

// Backward, g: y's gradient. Returns (dx, dw, db); dw and db are null when w is absent or `want_params` is
// false (no gradient is wanted for them: the kernel then skips their sums). `add` (x's shape, dtype and
// device; optional): dx + add is returned instead of dx, rounded as the separate add would round it (the
// gradient x already has from a residual path, summed in the same pass).
struct LayerNormBwd {
  static constexpr const char* kName = "layer_norm_bwd";
  // The entry point: checks every argument, then calls the kernel of x's device (kernels re-check nothing).
  static std::tuple<StoragePtr, StoragePtr, StoragePtr> run(const BackendStorage& x, const Layout& l,
                                                            const BackendStorage* w, const Layout* lw,
                                                            const BackendStorage& mean, const BackendStorage& rstd,
                                                            const BackendStorage& g, const Layout& lg,
                                                            bool want_params, const BackendStorage* add = nullptr,
                                                            const Layout* ladd = nullptr) {
    const char* op = "layer_norm_bwd";
    checks::float_input(x, op, "input");
    if (w) checks::like(x, *w, op, "weight");
    checks::like(x, g, op, "grad");
    checks::grad_shape(l, lg, op);
    EMBER_CHECK(l.ndim() >= 1, Shape, "[layer_norm_bwd] expected at least 1 dim, got a scalar");
    checks::in_bounds(x, l, op);
    checks::in_bounds(g, lg, op);
    checks::stats(x, mean, checks::rows_of(l), op, "mean and rstd", "row");
    checks::stats(x, rstd, checks::rows_of(l), op, "mean and rstd", "row");
    checks::opt_param(x, w, lw, checks::last_dim(l), op, "weight");
    if (add) checks::dx_add(x, l, *add, ladd, op);
    return Kernels<LayerNormBwd>::of(x)(x, l, w, w ? lw : nullptr, mean, rstd, g, lg, want_params && w, add,
                                        add ? ladd : nullptr);
  }
  using Fn = decltype(&run);
};

}  // namespace ember
