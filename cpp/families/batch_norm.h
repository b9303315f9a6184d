// batch_norm's kernel family: the forward and backward every device registers (see registry.h).
#pragma once
#include <cmath>
#include <tuple>

#include "../backend.h"
#include "../registry.h"
#include "checks.h"

namespace ember {

// Forward: x (n, c, ...) through l, each channel normalised over (n, positions); w, b (c,) optional.
// training: with the batch's mean and biased variance, and rm / rv (c,), when given, updated in place as
// r = (1 - momentum) r + momentum * stat with the unbiased variance (torch's rule); else with rm / rv
// (both given). Returns (y, mean, rstd), the statistics used (c,) in the stats dtype.
struct BatchNormFwd {
  static constexpr const char* kName = "batch_norm";
  // The running statistics are written in place: their versions are bumped before and after, as storage.cpp's
  // writes are.
  // The entry point: checks every argument, then calls the kernel of x's device (kernels re-check nothing).
  static std::tuple<StoragePtr, StoragePtr, StoragePtr> run(const BackendStorage& x, const Layout& l,
                                                            const BackendStorage* w, const Layout* lw,
                                                            const BackendStorage* b, const Layout* lb,
                                                            BackendStorage* rm, const Layout* lrm, BackendStorage* rv,
                                                            const Layout* lrv, bool training, double momentum,
                                                            double eps) {
    const char* op = "batch_norm";
    checks::float_input(x, op, "input");
    if (w) checks::like(x, *w, op, "weight");
    if (b) checks::like(x, *b, op, "bias");
    const int64_t c = checks::batch_channels(l, op);
    checks::in_bounds(x, l, op);
    checks::opt_param(x, w, lw, c, op, "weight");
    checks::opt_param(x, b, lb, c, op, "bias");
    EMBER_CHECK((rm == nullptr) == (rv == nullptr), Value, "[", op,
                "] give both running_mean and running_var, or neither");
    EMBER_CHECK(training || rm, Value, "[", op, "] running_mean and running_var are needed when not training");
    checks::running(x, rm, lrm, c, op, "running_mean");
    checks::running(x, rv, lrv, c, op, "running_var");
    EMBER_CHECK(std::isfinite(eps) && eps >= 0, Value, "[", op, "] eps must be finite and non-negative, got ", eps);
    if (training) {
      const int64_t count = c ? l.numel() / c : 0;
      EMBER_CHECK(count != 1, Shape, "[", op, "] expected more than 1 value per channel when training, got input ",
                  shape_str(l.shape()));
    }
    const auto fwd = Kernels<BatchNormFwd>::of(x);
    const bool writes = training && rm;
    if (writes) rm->bump_version(), rv->bump_version();
    auto out = fwd(x, l, w, w ? lw : nullptr, b, b ? lb : nullptr, rm, lrm, rv, lrv, training, momentum, eps);
    if (writes) rm->bump_version(), rv->bump_version();
    return out;
  }
  using Fn = decltype(&run);
};

// Backward, g: y's gradient; mean, rstd: the forward's. Returns (dx, dw, db) in x's dtype: dx through the
// batch statistics when `training`, else g * w * rstd; dw = sum(g * xhat), db = sum(g) per channel (c,).
struct BatchNormBwd {
  static constexpr const char* kName = "batch_norm_bwd";
  // The entry point: checks every argument, then calls the kernel of x's device (kernels re-check nothing).
  static std::tuple<StoragePtr, StoragePtr, StoragePtr> run(const BackendStorage& x, const Layout& l,
                                                            const BackendStorage* w, const Layout* lw,
                                                            const BackendStorage& mean, const BackendStorage& rstd,
                                                            const BackendStorage& g, const Layout& lg, bool training) {
    const char* op = "batch_norm_bwd";
    checks::float_input(x, op, "input");
    if (w) checks::like(x, *w, op, "weight");
    checks::like(x, g, op, "grad");
    checks::grad_shape(l, lg, op);
    const int64_t c = checks::batch_channels(l, op);
    checks::in_bounds(x, l, op);
    checks::in_bounds(g, lg, op);
    checks::stats(x, mean, c, op, "mean and rstd", "channel");
    checks::stats(x, rstd, c, op, "mean and rstd", "channel");
    checks::opt_param(x, w, lw, c, op, "weight");
    return Kernels<BatchNormBwd>::of(x)(x, l, w, w ? lw : nullptr, mean, rstd, g, lg, training);
  }
  using Fn = decltype(&run);
};

}  // namespace ember
