// Winograd F(2x2, 3x3) convolution on CPU for stride-1, undilated 3x3 windows in float32: the forward
// conv and, with the kernel flipped and transposed, its input gradient (see cpu/winograd.cpp).
#pragma once
#include <cstdint>

namespace ember::cpu {

// A float32 (n, groups * c, h, w) operand through its 4-D strides (in elements).
struct WinoInput {
  const float* p;
  int64_t st[4];
};

// Whether a stride-1 3x3 correlation with c in- and o out-channels per group over oh x ow outputs is
// worth Winograd's transforms (the channel counts make its GEMMs the larger part of the work).
bool winograd_worth(int64_t c, int64_t o, int64_t oh, int64_t ow);

// y (n, groups * o, oh, ow), contiguous = the stride-1 3x3 correlation of x (n, groups * c, h, w) with w,
// rows read from iy = oy - ph (zero outside the input), plus bias[k * bias_stride] when bias is non-null.
// w: dense (groups * o, c, 3, 3) when !adjoint; when adjoint, w is dense (groups * c, o, 3, 3) and is used
// flipped and transposed (w'[g, j, i, ki, kj] = w[g, i, j, 2 - ki, 2 - kj]): conv2d's input gradient.
void winograd_conv3x3(const WinoInput& x, int64_t n, int64_t groups, int64_t c, int64_t h, int64_t w, const float* wt,
                      bool adjoint, int64_t o, int64_t ph, int64_t pw, int64_t oh, int64_t ow, const float* bias,
                      int64_t bias_stride, float* y);

}  // namespace ember::cpu
