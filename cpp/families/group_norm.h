// group_norm's kernel family: the forward and backward every device registers (see registry.h).
#pragma once
#include <cstdint>
#include <tuple>

#include "../backend.h"

namespace ember {

// Forward: x (n, c, ...) through l, each (sample, group of c/groups channels) normalised over its
// channels and positions; w, b (c,) optional. Returns (y, mean, rstd), the stats (n, groups) in float32
// (float64 for float64 x). The seam (fused.cpp) has validated every argument.
struct GroupNormFwd {
  static constexpr const char* kName = "group_norm";
  using Fn = std::tuple<StoragePtr, StoragePtr, StoragePtr> (*)(const BackendStorage& x, const Layout& l,
                                                                int64_t groups, const BackendStorage* w,
                                                                const Layout* lw, const BackendStorage* b,
                                                                const Layout* lb, double eps);
};

// Backward, g: y's gradient. Returns (dx, dw, db): dx in x's dtype; dw = sum(g * xhat), db = sum(g) per
// channel (c,), in x's dtype, computed whether or not w and b were given.
struct GroupNormBwd {
  static constexpr const char* kName = "group_norm_bwd";
  using Fn = std::tuple<StoragePtr, StoragePtr, StoragePtr> (*)(const BackendStorage& x, const Layout& l,
                                                                int64_t groups, const BackendStorage* w,
                                                                const Layout* lw, const BackendStorage& mean,
                                                                const BackendStorage& rstd, const BackendStorage& g,
                                                                const Layout& lg);
};

}  // namespace ember
