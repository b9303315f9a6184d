// GPU launchers for the convolution windows (metal/conv.metal): im2col (unfold) through any input
// strides, col2im (fold) from contiguous columns, and conv2d's three directions built on them and the
// matmul kernel (which reads the weight and the gradient through their strides, never copying them).
#include <algorithm>

#include "families/conv.h"
#include "gpu/launch.h"
#include "gpu/ops/ops.h"
#include "registry.h"

namespace ember::gpu::ops {
namespace {

// conv.metal's g: the geometry, then the input's offset and its four strides.
std::vector<int64_t> geom_meta(const ConvGeom& g, int64_t offset, const Shape& strides) {
  std::vector<int64_t> m = {g.n, g.c, g.h, g.w, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.oh, g.ow, offset};
  m.insert(m.end(), strides.begin(), strides.end());
  return m;
}

StoragePtr im2col(const BackendStorage& s_, const Layout& l, const ConvGeom& g) {
  const GpuStorage& s = as_gpu(s_);
  GpuDevice& dev = s.gpu_device();
  type_suffix(s.dtype(), "unfold");  // refuses f64
  const int64_t rows = g.n * g.c * g.kh * g.kw, pos = g.oh * g.ow;
  auto out = new_storage(dev, s.dtype(), rows * pos, "unfold");
  if (rows * pos == 0) return out;
  const uint32_t gx = checked_u32(pos, "unfold"), gy = checked_u32(rows, "unfold");
  // pure data movement: the kernel is chosen by the element's width
  Launch(dev, "conv.metal", "im2col_" + std::to_string(itemsize(s.dtype())))
      .input(s).output(*out).array(geom_meta(g, l.offset(), l.stride()))
      .dispatch_grid(Dim3{gx, gy, 1}, Dim3{64, 4, 1});
  return out;
}

StoragePtr col2im(const BackendStorage& s_, const ConvGeom& g) {
  const GpuStorage& s = as_gpu(s_);
  GpuDevice& dev = s.gpu_device();
  const char* tname = type_suffix(s.dtype(), "fold");
  EMBER_CHECK(s.dtype() != DType::Bool, DType, "[conv_transpose2d] not supported for bool");  // as the CPU
  const int64_t planes = g.n * g.c, pixels = g.h * g.w;
  auto out = new_storage(dev, s.dtype(), planes * pixels, "fold");
  if (planes * pixels == 0) return out;
  const uint32_t gx = checked_u32(pixels, "fold"), gy = checked_u32(planes, "fold");
  // each pixel gathers the column entries that read it: no two threads write one place
  Launch(dev, "conv.metal", std::string("col2im_") + tname)
      .input(s).output(*out).array(geom_meta(g, 0, Shape{0, 0, 0, 0}))
      .dispatch_grid(Dim3{gx, gy, 1}, Dim3{64, 4, 1});
  return out;
}

// (n, groups, rows, cols) views for the per-group matmuls: a 4-D (a, groups * rows, ...) tensor whose last
// dims merge as (rows, cols) with row stride rs and column stride cs; bstride 0 broadcasts over the images.
Layout group_view(const Layout& l, int64_t n, int64_t groups, int64_t rows, int64_t cols, int64_t bstride,
                  int64_t gstride, int64_t rs, int64_t cs) {
  return Layout({n, groups, rows, cols}, {bstride, gstride, rs, cs}, l.offset());
}
// A (d0, d1, d2, d3) layout's strides as (d0, d1, d2 * d3) when its last two dims merge (else false).
bool merged_plane(const Layout& l, int64_t& s0, int64_t& s1, int64_t& s2) {
  const auto& sh = l.shape();
  const auto& st = l.stride();
  if (sh[3] != 1 && sh[2] != 1 && st[2] != st[3] * sh[3]) return false;
  s0 = st[0];
  s1 = st[1];
  s2 = sh[3] != 1 ? st[3] : st[2];
  return true;
}
// gy (n, c_out, oh, ow) as a dense storage when its (oh, ow) plane does not merge.
std::pair<StoragePtr, Layout> plane_readable(const GpuStorage& s, const Layout& l) {
  int64_t a, b, c;
  if (merged_plane(l, a, b, c)) return {nullptr, l};
  auto out = new_storage(s.gpu_device(), s.dtype(), l.numel(), "conv2d");
  const Layout cl = Layout::contiguous(l.shape());
  copy_into(s, l, *out, cl);
  return {out, cl};
}

StoragePtr conv2d_fwd(const BackendStorage& x_, const Layout& l, const BackendStorage& w_, const Layout& lw,
                      const BackendStorage* b, const Layout* lb, const ConvGeom& g, int64_t groups) {
  const GpuStorage& x = as_gpu(x_);
  const GpuStorage& w = as_gpu(w_);
  const int64_t c_out = lw.shape()[0], og = c_out / groups, k = g.c / groups * g.kh * g.kw, L = g.oh * g.ow;
  auto cols = im2col(x, l, g);  // (n, groups, k, L)
  // w (c_out, c/groups, kh, kw) as (groups, og, k): its three last dims merge only when dense; else a copy.
  StoragePtr wc;
  Layout wl = lw;
  if (!lw.is_contiguous()) {
    wc = new_storage(x.gpu_device(), w.dtype(), lw.numel(), "conv2d");
    wl = Layout::contiguous(lw.shape());
    copy_into(w, lw, *wc, wl);
  }
  const GpuStorage& wm = wc ? as_gpu(*wc) : w;
  auto y = matmul(wm, group_view(wl, g.n, groups, og, k, 0, og * k, k, 1), *cols,
                  Layout::contiguous({g.n, groups, k, L}));
  if (!b) return y;
  const Layout yl = Layout::contiguous({g.n, c_out, L});
  return binary(as_gpu(*y), BinaryOp::Add, yl, *b, Layout({g.n, c_out, L}, {0, lb->stride()[0], 0}, lb->offset()));
}

StoragePtr conv2d_bwd_input(const BackendStorage& gy_, const Layout& l, const BackendStorage& w_, const Layout& lw,
                            const ConvGeom& g, int64_t groups) {
  const GpuStorage& gy = as_gpu(gy_);
  const GpuStorage& w = as_gpu(w_);
  const int64_t c_out = lw.shape()[0], og = c_out / groups, cg = g.c / groups, L = g.oh * g.ow;
  const int64_t k = cg * g.kh * g.kw;
  auto [gc, gl] = plane_readable(gy, l);
  const GpuStorage& gm = gc ? as_gpu(*gc) : gy;
  int64_t sn = 0, sc = 0, sp = 0;
  merged_plane(gl, sn, sc, sp);
  // w as (groups, k, og) transposed: element (gi, r, o) at w[gi*og + o, r]; needs the (cg, kh, kw) dims merged.
  StoragePtr wc;
  Layout wl = lw;
  if (!lw.is_contiguous()) {
    wc = new_storage(gy.gpu_device(), w.dtype(), lw.numel(), "conv2d_bwd_input");
    wl = Layout::contiguous(lw.shape());
    copy_into(w, lw, *wc, wl);
  }
  const GpuStorage& wm = wc ? as_gpu(*wc) : w;
  auto cols = matmul(wm, group_view(wl, g.n, groups, k, og, 0, og * k, 1, k), gm,
                     group_view(gl, g.n, groups, og, L, sn, og * sc, sc, sp));  // (n, groups, k, L)
  return col2im(as_gpu(*cols), g);
}

StoragePtr conv2d_bwd_weight(const BackendStorage& x_, const Layout& l, const BackendStorage& gy_, const Layout& lg,
                             const ConvGeom& g, int64_t groups) {
  const GpuStorage& x = as_gpu(x_);
  const GpuStorage& gy = as_gpu(gy_);
  const int64_t c_out = lg.shape()[1], og = c_out / groups, k = g.c / groups * g.kh * g.kw, L = g.oh * g.ow;
  auto cols = im2col(x, l, g);  // (n, groups, k, L), read transposed as (n, groups, L, k)
  auto [gc, gl] = plane_readable(gy, lg);
  const GpuStorage& gm = gc ? as_gpu(*gc) : gy;
  int64_t sn = 0, sc = 0, sp = 0;
  merged_plane(gl, sn, sc, sp);
  auto per_image = matmul(gm, group_view(gl, g.n, groups, og, L, sn, og * sc, sc, sp), *cols,
                          Layout({g.n, groups, L, k}, {groups * k * L, k * L, 1, L}, 0));  // (n, groups, og, k)
  if (g.n == 1) return per_image;
  return reduce(as_gpu(*per_image), ReduceOp::Sum, Layout::contiguous({g.n, c_out * k}), {0});
}

}  // namespace

void register_conv(DeviceKind kind) {
  Kernels<Im2col>::set(kind, &im2col);
  Kernels<Col2im>::set(kind, &col2im);
  Kernels<Conv2dFwd>::set(kind, &conv2d_fwd);
  Kernels<Conv2dBwdInput>::set(kind, &conv2d_bwd_input);
  Kernels<Conv2dBwdWeight>::set(kind, &conv2d_bwd_weight);
}

}  // namespace ember::gpu::ops
