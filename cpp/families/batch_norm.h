// batch_norm's kernel family: the forward and backward every device registers (see registry.h).
#pragma once
#include <tuple>

#include "../backend.h"

namespace ember {

// Forward: x (n, c, ...) through l, each channel normalised over (n, positions); w, b (c,) optional.
// training: with the batch's mean and biased variance, and rm / rv (c,), when given, updated in place as
// r = (1 - momentum) r + momentum * stat with the unbiased variance (torch's rule); else with rm / rv
// (both given). Returns (y, mean, rstd), the statistics used (c,) in the stats dtype. The seam
// (fused.cpp) has validated every argument and bumps the running statistics' versions.
struct BatchNormFwd {
  static constexpr const char* kName = "batch_norm";
  using Fn = std::tuple<StoragePtr, StoragePtr, StoragePtr> (*)(const BackendStorage& x, const Layout& l,
                                                                const BackendStorage* w, const Layout* lw,
                                                                const BackendStorage* b, const Layout* lb,
                                                                BackendStorage* rm, const Layout* lrm,
                                                                BackendStorage* rv, const Layout* lrv,
                                                                bool training, double momentum, double eps);
};

// Backward, g: y's gradient; mean, rstd: the forward's. Returns (dx, dw, db) in x's dtype: dx through the
// batch statistics when `training`, else g * w * rstd; dw = sum(g * xhat), db = sum(g) per channel (c,).
struct BatchNormBwd {
  static constexpr const char* kName = "batch_norm_bwd";
  using Fn = std::tuple<StoragePtr, StoragePtr, StoragePtr> (*)(const BackendStorage& x, const Layout& l,
                                                                const BackendStorage* w, const Layout* lw,
                                                                const BackendStorage& mean,
                                                                const BackendStorage& rstd, const BackendStorage& g,
                                                                const Layout& lg, bool training);
};

}  // namespace ember
