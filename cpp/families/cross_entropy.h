// cross_entropy's kernel family (class-id targets): the forward and backward every device registers (see registry.h).
#pragma once
#include <tuple>

#include "../backend.h"

namespace ember {

// The loss of one row of logits x (C classes) at target t, with class weights w (ones when absent) and
// label smoothing eps: w[t] (1 - eps) (lse - x[t]) + eps / C * sum_c w[c] (lse - x[c]); 0 when
// t == ignore. The seam (fused.cpp) has validated every argument; a class id out of range gives NaN
// (never an out-of-bounds read), and the CPU kernel raises IndexOutOfRange for it.
struct CeArgs {
  const BackendStorage* x = nullptr;  // logits (..., C), any strides
  Layout lx;
  const BackendStorage* t = nullptr;  // class ids (...), int64 or int32, any strides
  Layout lt;
  const BackendStorage* w = nullptr;  // optional (C,) weights, x's dtype
  Layout lw;
  int64_t ignore = -100;
  double eps = 0.0;
};

// Forward: returns (loss: one value per row, dense, x's dtype; lse: one stats-dtype value per row).
struct CrossEntropyFwd {
  static constexpr const char* kName = "cross_entropy";
  using Fn = std::tuple<StoragePtr, StoragePtr> (*)(const CeArgs& a);
};

// Backward: lse the forward's, g (rows,) the loss's gradient in x's dtype. Returns dx, dense like x:
// g * (softmax(x) * W - q) with q[c] = (1 - eps) w[t] [c == t] + eps / C * w[c] and W = sum_c q[c].
struct CrossEntropyBwd {
  static constexpr const char* kName = "cross_entropy_bwd";
  using Fn = StoragePtr (*)(const CeArgs& a, const BackendStorage& lse, const BackendStorage& g, const Layout& lg);
};

}  // namespace ember
