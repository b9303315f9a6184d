// Scaled dot-product attention's kernel family: the forward and backward every device registers (see
// registry.h), both over the geometry the seam computes once (SdpaGeom, backend.h).
#pragma once
#include <tuple>

#include "../backend.h"

namespace ember {

// Forward of a (SdpaArgs: q, k, v, the optional mask) over g. Returns (out (B, H, Lq, Dv) dense in q's
// dtype, lse (B, H, Lq) in the stats dtype). The device is a.q's; the seam (fused.cpp) has validated
// every argument.
struct SdpaFwd {
  static constexpr const char* kName = "sdpa";
  using Fn = std::tuple<StoragePtr, StoragePtr> (*)(const SdpaArgs& a, const SdpaGeom& g);
};

// Backward: o, lse the forward's outputs, dout out's gradient (their strides in g.so, g.sg). Returns (dq,
// dk, dv), dense, shaped like q, k, v.
struct SdpaBwd {
  static constexpr const char* kName = "sdpa_bwd";
  using Fn = std::tuple<StoragePtr, StoragePtr, StoragePtr> (*)(const SdpaArgs& a, const SdpaGeom& g,
                                                                const BackendStorage& o, const Layout& lo,
                                                                const BackendStorage& lse,
                                                                const BackendStorage& dout, const Layout& ldout);
};

}  // namespace ember
