// The pooling kernel families: max / avg / adaptive-avg pooling and its gradient (see registry.h).
#pragma once
#include <tuple>

#include "../backend.h"

namespace ember {

// Pooling over (n, c, h, w) planes (1-D is h == kh == 1). Max and Avg: windows of (kh, kw) taps at
// stride (sh, sw) starting at -ph / -pw, taps dilated by (dh, dw) (1 for Avg), output (oh, ow) (ceil_mode
// is in the output size). Max pads with -inf and returns torch's flat indices into h*w (its first maximum
// in row-major order; a NaN wins); Avg pads with zeros and divides by `divisor` when > 0, else by the
// window's size clipped to the padded input (count_include_pad) or to the input. AdaptiveAvg averages
// torch's windows [floor(i*h/oh), ceil((i+1)*h/oh)) and ignores kernel, stride, padding and dilation.
enum class PoolKind : uint8_t { Max, Avg, AdaptiveAvg, Count };
inline constexpr const char* kPoolNames[(int)PoolKind::Count] = {"max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"};
struct PoolGeom {
  int64_t n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
  int64_t divisor;  // Avg's divisor_override, 0 for none
  bool count_include_pad;
};
// Pooling (see PoolGeom): x (n, c, h, w) through l -> (values (n, c, oh, ow), Max's int64
// indices when `with_indices`, else null).
struct Pool2d {
  static constexpr const char* kName = "pool2d";
  using Fn = std::tuple<StoragePtr, StoragePtr> (*)(const BackendStorage& x, PoolKind kind, const Layout& l,
                                                    const PoolGeom& g, bool with_indices);
};

// Its gradient: gy, the output's gradient (n, c, oh, ow) through lg; ids: Max's indices (contiguous; one
// outside h*w adds nowhere), null otherwise. Returns dx (n, c, h, w).
struct Pool2dBwd {
  static constexpr const char* kName = "pool2d_bwd";
  using Fn = StoragePtr (*)(const BackendStorage& gy, PoolKind kind, const Layout& lg, const BackendStorage* ids,
                            const PoolGeom& g);
};

}  // namespace ember
