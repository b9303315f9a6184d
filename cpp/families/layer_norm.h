// layer_norm's kernel family: the forward and backward every device registers (see registry.h).
#pragma once
#include <tuple>

#include "../backend.h"

namespace ember {

// Forward over the last dim of x through l; w, b (n,) optional (ones / zeros). Returns (y, mean, rstd),
// the stats one stats-dtype value per row. The seam (fused.cpp) has validated every argument.
struct LayerNormFwd {
  static constexpr const char* kName = "layer_norm";
  using Fn = std::tuple<StoragePtr, StoragePtr, StoragePtr> (*)(const BackendStorage& x, const Layout& l,
                                                                const BackendStorage* w, const Layout* lw,
                                                                const BackendStorage* b, const Layout* lb,
                                                                double eps);
};

// Backward, g: y's gradient. Returns (dx, dw, db); dw and db are null when w is absent or `want_params` is
// false (no gradient is wanted for them: the kernel then skips their sums).
struct LayerNormBwd {
  static constexpr const char* kName = "layer_norm_bwd";
  using Fn = std::tuple<StoragePtr, StoragePtr, StoragePtr> (*)(const BackendStorage& x, const Layout& l,
                                                                const BackendStorage* w, const Layout* lw,
                                                                const BackendStorage& mean,
                                                                const BackendStorage& rstd, const BackendStorage& g,
                                                                const Layout& lg, bool want_params);
};

}  // namespace ember
