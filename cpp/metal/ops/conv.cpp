// Metal launchers for the convolution windows (metal/conv.metal): im2col (unfold) through any input
// strides, and col2im (fold) from contiguous columns.
#include <algorithm>

#include "metal/launch.h"
#include "metal/ops/ops.h"

namespace ember::metal::ops {
namespace {

// conv.metal's g: the geometry, then the input's offset and its four strides.
std::vector<int64_t> geom_meta(const ConvGeom& g, int64_t offset, const Shape& strides) {
  std::vector<int64_t> m = {g.n, g.c, g.h, g.w, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.oh, g.ow, offset};
  m.insert(m.end(), strides.begin(), strides.end());
  return m;
}

}  // namespace

StoragePtr im2col(const MetalStorage& s, const Layout& l, const ConvGeom& g) {
  MetalDevice& dev = s.metal_device();
  type_suffix(s.dtype(), "unfold");  // refuses f64
  const int64_t rows = g.n * g.c * g.kh * g.kw, pos = g.oh * g.ow;
  auto out = new_metal(dev, s.dtype(), rows * pos, "unfold");
  if (rows * pos == 0) return out;
  const uint32_t gx = checked_u32(pos, "unfold"), gy = checked_u32(rows, "unfold");
  // pure data movement: the kernel is chosen by the element's width
  Launch(dev, "conv.metal", "im2col_" + std::to_string(itemsize(s.dtype())))
      .input(s).output(*out).array(geom_meta(g, l.offset(), l.stride()))
      .dispatch(Dim3{gx, gy, 1}, Dim3{std::min<uint32_t>(gx, 64), std::min<uint32_t>(gy, 4), 1});
  return out;
}

StoragePtr col2im(const MetalStorage& s, const ConvGeom& g) {
  MetalDevice& dev = s.metal_device();
  const char* tname = type_suffix(s.dtype(), "fold");
  const int64_t planes = g.n * g.c, pixels = g.h * g.w;
  auto out = new_metal(dev, s.dtype(), planes * pixels, "fold");
  if (planes * pixels == 0) return out;
  const uint32_t gx = checked_u32(pixels, "fold"), gy = checked_u32(planes, "fold");
  // each pixel gathers the column entries that read it: no two threads write one place
  Launch(dev, "conv.metal", std::string("col2im_") + tname)
      .input(s).output(*out).array(geom_meta(g, 0, Shape{0, 0, 0, 0}))
      .dispatch(Dim3{gx, gy, 1}, Dim3{std::min<uint32_t>(gx, 64), std::min<uint32_t>(gy, 4), 1});
  return out;
}

}  // namespace ember::metal::ops
