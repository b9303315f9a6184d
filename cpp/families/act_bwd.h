// The fused activations' backward (see ActKind in backend.h): the kernel every device registers (see registry.h).
#pragma once
#include "../backend.h"

namespace ember {

// dx = g * f'(a) for `kind`: a = y (the forward's output) for Sigmoid, x otherwise, through la; g through
// lg, same shape. p0, p1: the forward's parameters (ignored by sigmoid, silu, gelu). The seam (fused.cpp)
// has validated every argument.
struct ActBwd {
  static constexpr const char* kName = "act_bwd";
  using Fn = StoragePtr (*)(const BackendStorage& a, const Layout& la, const BackendStorage& g, const Layout& lg,
                            ActKind kind, double p0, double p1);
};

}  // namespace ember
