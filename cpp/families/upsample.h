// The resampling kernel families: upsample (nearest, nearest-exact, linear) and its gradient (see registry.h).
#pragma once

#include "../backend.h"

namespace ember {

// Resampling (n, c, h, w) planes to (oh, ow) (1-D is h == oh == 1) by torch's source-index rules: Nearest
// floor(dst * scale) (the identity when the sizes match, dst / 2 when out == 2 * in), NearestExact
// floor((dst + 0.5) * scale), Linear two taps per dim (align_corners maps the corner centres onto each
// other). sf_h / sf_w: the user's scale factor (scale = 1 / sf), or 0 for scale = in / out.
enum class UpsampleMode : uint8_t { Nearest, NearestExact, Linear, Count };
inline constexpr const char* kUpsampleNames[(int)UpsampleMode::Count] = {"nearest", "nearest-exact", "linear"};
struct UpsampleGeom {
  int64_t n, c, h, w, oh, ow;
  double sf_h, sf_w;
  bool align_corners;
};

// Resampling (see UpsampleGeom): x (n, c, h, w) through l -> (n, c, oh, ow).
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
