// The convolution kernel families: im2col / col2im and conv2d's three directions (see registry.h).
#pragma once
#include <cstdint>

#include "../backend.h"

namespace ember {

// The geometry of a 2-D convolution window (1-D is h == kh == 1): input (n, c, h, w), kernel (kh, kw),
// stride, zero padding before each spatial dim, dilation, and the output size (oh, ow), which also
// fixes the padding after (asymmetric padding such as "same" is pad-before plus the output size).
struct ConvGeom {
  int64_t n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
};

// Convolution windows as columns: x (n, c, h, w) through l -> (n, c*kh*kw, oh*ow), zeros where a window
// reaches into the padding (im2col, torch's unfold).
struct Im2col {
  static constexpr const char* kName = "im2col";
  using Fn = StoragePtr (*)(const BackendStorage& x, const Layout& l, const ConvGeom& g);
};

// The adjoint: cols (n, c*kh*kw, oh*ow), contiguous, summed back into (n, c, h, w) (col2im, fold).
struct Col2im {
  static constexpr const char* kName = "col2im";
  using Fn = StoragePtr (*)(const BackendStorage& cols, const ConvGeom& g);
};

// Convolution as one kernel per direction (groups split the channels; every operand float, same dtype,
// checked by the seam in storage.cpp), each returning a new contiguous storage.
// Forward: x (n, c, h, w) through l, w (c_out, c/groups, kh, kw), b (c_out,) or null -> y (n, c_out, oh, ow).
struct Conv2dFwd {
  static constexpr const char* kName = "conv2d";
  using Fn = StoragePtr (*)(const BackendStorage& x, const Layout& l, const BackendStorage& w, const Layout& lw,
                            const BackendStorage* b, const Layout* lb, const ConvGeom& g, int64_t groups);
};
// gy (n, c_out, oh, ow) through l -> dx (n, c, h, w), the adjoint in x (also conv_transpose's forward).
struct Conv2dBwdInput {
  static constexpr const char* kName = "conv2d_bwd_input";
  using Fn = StoragePtr (*)(const BackendStorage& gy, const Layout& l, const BackendStorage& w, const Layout& lw,
                            const ConvGeom& g, int64_t groups);
};
// x through l, gy (n, c_out, oh, ow) through lg -> dw (c_out, c/groups, kh, kw).
struct Conv2dBwdWeight {
  static constexpr const char* kName = "conv2d_bwd_weight";
  using Fn = StoragePtr (*)(const BackendStorage& x, const Layout& l, const BackendStorage& gy, const Layout& lg,
                            const ConvGeom& g, int64_t groups);
};

}  // namespace ember
