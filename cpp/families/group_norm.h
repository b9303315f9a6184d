// group_norm's kernel family: the forward and backward every device registers (see registry.h).
#pragma once
#include <cstdint>
#include <tuple>

#include "../backend.h"
#include "../registry.h"
#include "checks.h"

namespace ember {

// Forward: x (n, c, ...) through l, each (sample, group of c/groups channels) normalised over its
// channels and positions; w, b (c,) optional. Returns (y, mean, rstd), the stats (n, groups) in float32
// (float64 for float64 x).
struct GroupNormFwd {
  static constexpr const char* kName = "group_norm";
  // The entry point: checks every argument, then calls the kernel of x's device (kernels re-check nothing).
  static std::tuple<StoragePtr, StoragePtr, StoragePtr> run(const BackendStorage& x, const Layout& l, int64_t groups,
                                                            const BackendStorage* w, const Layout* lw,
                                                            const BackendStorage* b, const Layout* lb, double eps) {
    const char* op = "group_norm";
    checks::float_input(x, op, "input");
    if (w) checks::like(x, *w, op, "weight");
    if (b) checks::like(x, *b, op, "bias");
    const int64_t c = checks::group_dims(l, groups, op).second;
    checks::in_bounds(x, l, op);
    checks::opt_param(x, w, lw, c, op, "weight");
    checks::opt_param(x, b, lb, c, op, "bias");
    return Kernels<GroupNormFwd>::of(x)(x, l, groups, w, w ? lw : nullptr, b, b ? lb : nullptr, eps);
  }
  using Fn = decltype(&run);
};

// Backward, g: y's gradient. Returns (dx, dw, db): dx in x's dtype; dw = sum(g * xhat), db = sum(g) per
// channel (c,), in x's dtype, computed whether or not w and b were given.
struct GroupNormBwd {
  static constexpr const char* kName = "group_norm_bwd";
  // The entry point: checks every argument, then calls the kernel of x's device (kernels re-check nothing).
  static std::tuple<StoragePtr, StoragePtr, StoragePtr> run(const BackendStorage& x, const Layout& l, int64_t groups,
                                                            const BackendStorage* w, const Layout* lw,
                                                            const BackendStorage& mean, const BackendStorage& rstd,
                                                            const BackendStorage& g, const Layout& lg) {
    const char* op = "group_norm_bwd";
    checks::float_input(x, op, "input");
    if (w) checks::like(x, *w, op, "weight");
    checks::like(x, g, op, "grad");
    checks::grad_shape(l, lg, op);
    const auto [n, c] = checks::group_dims(l, groups, op);
    checks::in_bounds(x, l, op);
    checks::in_bounds(g, lg, op);
    checks::stats(x, mean, n * groups, op, "mean and rstd", "(sample, group)");
    checks::stats(x, rstd, n * groups, op, "mean and rstd", "(sample, group)");
    checks::opt_param(x, w, lw, c, op, "weight");
    return Kernels<GroupNormBwd>::of(x)(x, l, groups, w, w ? lw : nullptr, mean, rstd, g, lg);
  }
  using Fn = decltype(&run);
};

}  // namespace ember
