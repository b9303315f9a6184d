// The resampling kernel families: upsample (nearest, nearest-exact, linear) and its gradient (see registry.h).
#pragma once

#include "../backend.h"

namespace ember {

// Resampling (see UpsampleGeom, backend.h): x (n, c, h, w) through l -> (n, c, oh, ow).
struct Upsample {
  static constexpr const char* kName = "upsample";
  using Fn = StoragePtr (*)(const BackendStorage& x, UpsampleMode mode, const Layout& l, const UpsampleGeom& g);
};

// The gradient: gy, the output's gradient (n, c, oh, ow) through lg -> dx (n, c, h, w).
struct UpsampleBwd {
  static constexpr const char* kName = "upsample_bwd";
  using Fn = StoragePtr (*)(const BackendStorage& gy, UpsampleMode mode, const Layout& lg, const UpsampleGeom& g);
};

}  // namespace ember
