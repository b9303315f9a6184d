// rms_norm's kernel family: the forward and backward every device registers (see registry.h).
#pragma once
#include <tuple>

#include "../backend.h"

namespace ember {

// Forward over the last dim of x through l; w (n,) optional (ones). Returns (y, rstd: one stats-dtype
// value per row). The seam (fused.cpp) has validated every argument.
struct RmsNormFwd {
  static constexpr const char* kName = "rms_norm";
  using Fn = std::tuple<StoragePtr, StoragePtr> (*)(const BackendStorage& x, const Layout& l, const BackendStorage* w,
                                                    const Layout* lw, double eps);
};

// Backward, g: y's gradient. Returns (dx, dw); dw is null when w is absent or `want_params` is false (no
// gradient is wanted for w: the kernel then skips its sums).
struct RmsNormBwd {
  static constexpr const char* kName = "rms_norm_bwd";
  using Fn = std::tuple<StoragePtr, StoragePtr> (*)(const BackendStorage& x, const Layout& l, const BackendStorage* w,
                                                    const Layout* lw, const BackendStorage& rstd,
                                                    const BackendStorage& g, const Layout& lg, bool want_params);
};

}  // namespace ember
