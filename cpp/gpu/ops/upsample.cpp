// GPU launchers for resampling (metal/upsample.metal): nearest, nearest-exact and (bi)linear over
// (n, c, h, w) planes through any input strides, one thread per output; the gradient one per input pixel.
#include <algorithm>

#include "families/upsample.h"
#include "gpu/launch.h"
#include "gpu/ops/ops.h"
#include "registry.h"

namespace ember::gpu::ops {
namespace {

// torch's source scale of one axis, in R: float, double for the float64 kernels (the CPU's make_taps in
// cpu/upsample.cpp).
template <class R> R axis_scale(UpsampleMode mode, int64_t in, int64_t out, double sf, bool align) {
  if (mode == UpsampleMode::Linear && align) return out > 1 ? (R)(in - 1) / (R)(out - 1) : R(0);
  return sf > 0 ? (R)(1.0 / sf) : (R)in / (R)out;
}

std::vector<int64_t> up_meta(UpsampleMode mode, const UpsampleGeom& g, const Layout& l) {
  std::vector<int64_t> m = {g.c, g.h, g.w, g.oh, g.ow, (int64_t)mode, g.align_corners, l.offset()};
  m.insert(m.end(), l.stride().begin(), l.stride().end());
  return m;
}

template <class R> struct Real2 {
  R x, y;
};

StoragePtr launch(const GpuStorage& s, UpsampleMode mode, const Layout& l, const UpsampleGeom& g, bool fwd) {
  GpuDevice& dev = s.gpu_device();
  const char* tname = type_suffix(s.dtype(), "interpolate");
  const int64_t planes = g.n * g.c, pos = fwd ? g.oh * g.ow : g.h * g.w;
  auto out = new_storage(dev, s.dtype(), planes * pos, "interpolate");
  if (planes * pos == 0) return out;
  const uint32_t gx = checked_u32(pos, "interpolate"), gy = checked_u32(planes, "interpolate");
  checked_u32(planes * pos, "interpolate");
  const Real2<float> scale{axis_scale<float>(mode, g.h, g.oh, g.sf_h, g.align_corners),
                           axis_scale<float>(mode, g.w, g.ow, g.sf_w, g.align_corners)};
  const Real2<double> scale64{axis_scale<double>(mode, g.h, g.oh, g.sf_h, g.align_corners),
                              axis_scale<double>(mode, g.w, g.ow, g.sf_w, g.align_corners)};
  Launch(dev, "upsample.metal", std::string(fwd ? "upsample_fwd_" : "upsample_bwd_") + tname)
      .input(s).output(*out).array(up_meta(mode, g, l)).scalar_of(s.dtype(), scale, scale64)
      .dispatch_grid(Dim3{gx, gy, 1}, Dim3{64, 4, 1});
  return out;
}

StoragePtr upsample(const BackendStorage& x, UpsampleMode mode, const Layout& l, const UpsampleGeom& g) {
  return launch(as_gpu(x), mode, l, g, true);
}

StoragePtr upsample_bwd(const BackendStorage& gy, UpsampleMode mode, const Layout& lg, const UpsampleGeom& g) {
  return launch(as_gpu(gy), mode, lg, g, false);
}

}  // namespace

void register_upsample(DeviceKind kind) {
  Kernels<Upsample>::set(kind, &upsample);
  Kernels<UpsampleBwd>::set(kind, &upsample_bwd);
}

}  // namespace ember::gpu::ops
