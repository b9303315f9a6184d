// softmax's kernel family (log_softmax too): the forward and backward every device registers (see registry.h).
#pragma once
#include "../backend.h"

namespace ember {

// Forward: softmax (log_softmax when `log`) over the last dim of x through l. Returns y, dense, in x's
// dtype. The seam (fused.cpp) has validated every argument.
struct SoftmaxFwd {
  static constexpr const char* kName = "softmax";
  using Fn = StoragePtr (*)(const BackendStorage& x, const Layout& l, bool log);
};

// Backward: y the forward's output, g its gradient (same shape). Returns dx.
struct SoftmaxBwd {
  static constexpr const char* kName = "softmax_bwd";
  using Fn = StoragePtr (*)(const BackendStorage& y, const Layout& l, const BackendStorage& g, const Layout& lg,
                            bool log);
};

}  // namespace ember
