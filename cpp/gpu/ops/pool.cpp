// GPU launchers for pooling (metal/pool.metal): max / average / adaptive average over (n, c, h, w)
// planes through any input strides, one thread per output; the gradients one thread per input pixel.
#include <algorithm>

#include "families/pool.h"
#include "gpu/launch.h"
#include "gpu/ops/ops.h"
#include "registry.h"

namespace ember::gpu::ops {
namespace {

// pool.metal's g: the geometry, the kind, then the layout read (offset and four strides).
std::vector<int64_t> pool_meta(PoolKind kind, const PoolGeom& g, const Layout& l) {
  std::vector<int64_t> m = {g.c,  g.h,  g.w,  g.kh, g.kw, g.sh,      g.sw,
                            g.ph, g.pw, g.dh, g.dw, g.oh, g.ow,      g.divisor,
                            g.count_include_pad, (int64_t)kind, l.offset()};
  m.insert(m.end(), l.stride().begin(), l.stride().end());
  return m;
}


std::tuple<StoragePtr, StoragePtr> pool2d(const BackendStorage& s_, PoolKind kind, const Layout& l,
                                          const PoolGeom& g, bool with_indices) {
  const GpuStorage& s = as_gpu(s_);
  const char* op = kPoolNames[(int)kind];
  GpuDevice& dev = s.gpu_device();
  const char* tname = type_suffix(s.dtype(), op);
  const int64_t planes = g.n * g.c, pos = g.oh * g.ow;
  auto out = new_storage(dev, s.dtype(), planes * pos, op);
  // without indices a one-element stand-in keeps the binding valid
  auto ids = new_storage(dev, DType::I64, with_indices ? planes * pos : 1, op);
  if (planes * pos == 0) return {out, with_indices ? ids : nullptr};
  const uint32_t gx = checked_u32(pos, op), gy = checked_u32(planes, op);
  checked_u32(planes * pos, op);
  Launch(dev, "pool.metal", std::string("pool_fwd_") + tname)
      .input(s).output(*out).output(*ids).array(pool_meta(kind, g, l)).scalar<uint32_t>(with_indices ? 1 : 0)
      .dispatch_grid(Dim3{gx, gy, 1}, Dim3{64, 4, 1});
  return {out, with_indices ? ids : nullptr};
}

StoragePtr pool2d_bwd(const BackendStorage& s_, PoolKind kind, const Layout& lg, const BackendStorage* ids,
                      const PoolGeom& g) {
  const GpuStorage& s = as_gpu(s_);
  const char* op = kPoolNames[(int)kind];
  GpuDevice& dev = s.gpu_device();
  const char* tname = type_suffix(s.dtype(), op);
  const int64_t planes = g.n * g.c, pixels = g.h * g.w;
  auto dx = new_storage(dev, s.dtype(), planes * pixels, op);
  if (planes * pixels == 0) return dx;
  const uint32_t gx = checked_u32(pixels, op), gy = checked_u32(planes, op);
  checked_u32(planes * pixels, op);
  GpuStoragePtr none;
  if (!ids) none = new_storage(dev, DType::I64, 1, op);  // the averages read no indices
  Launch(dev, "pool.metal", std::string("pool_bwd_") + tname)
      .input(s).input(ids ? as_gpu(*ids) : *none).output(*dx).array(pool_meta(kind, g, lg))
      .dispatch_grid(Dim3{gx, gy, 1}, Dim3{64, 4, 1});
  return dx;
}

}  // namespace

void register_pool(DeviceKind kind) {
  Kernels<Pool2d>::set(kind, &pool2d);
  Kernels<Pool2dBwd>::set(kind, &pool2d_bwd);
}

}  // namespace ember::gpu::ops
