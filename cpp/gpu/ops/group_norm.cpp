// GPU launchers for group_norm (metal/group_norm.metal): x and the gradient read dense (a strided operand
// is copied once), statistics in float per (sample, group), dw / db per channel.
#include <string>

#include "families/group_norm.h"
#include "gpu/launch.h"
#include "gpu/ops/ops.h"
#include "registry.h"

namespace ember::gpu::ops {
namespace {

constexpr uint32_t kThreads = 256;  // group_norm.metal's threadgroup size

template <class R> struct GroupNormArgs {  // must match group_norm.metal (R: double for the float64 kernels)
  int64_t n, c, groups, s;
  int64_t w_off, w_st, b_off, b_st;
  R eps;
  uint32_t has_w, has_b;
};

template <class R = float>
GroupNormArgs<R> args_of(const Layout& l, int64_t groups, const Layout* lw, const Layout* lb, double eps) {
  GroupNormArgs<R> a{};
  a.n = l.shape()[0];
  a.c = l.shape()[1];
  a.groups = groups;
  a.s = (a.n != 0 && a.c != 0) ? l.numel() / (a.n * a.c) : 0;
  a.eps = (R)eps;
  a.has_w = lw != nullptr;
  a.has_b = lb != nullptr;
  if (lw) a.w_off = lw->offset(), a.w_st = lw->stride()[0];
  if (lb) a.b_off = lb->offset(), a.b_st = lb->stride()[0];
  return a;
}

std::string kname(const char* base, DType dt, const char* op) { return std::string(base) + type_suffix(dt, op); }

std::tuple<StoragePtr, StoragePtr, StoragePtr> group_norm_fwd(const BackendStorage& xs, const Layout& l,
                                                              int64_t groups, const BackendStorage* w,
                                                              const Layout* lw, const BackendStorage* b,
                                                              const Layout* lb, double eps) {
  const char* op = "group_norm";
  const GpuStorage& x = as_gpu(xs);
  GpuDevice& dev = x.gpu_device();
  const DType ft = compute_dtype(x.dtype());
  const auto a = args_of(l, groups, w ? lw : nullptr, b ? lb : nullptr, eps);
  const auto a64 = args_of<double>(l, groups, w ? lw : nullptr, b ? lb : nullptr, eps);
  const int64_t rows = a.n * groups;
  auto y = new_storage(dev, x.dtype(), l.numel(), op);
  auto mean = new_storage(dev, ft, rows, op);
  auto rstd = new_storage(dev, ft, rows, op);
  if (l.numel() == 0) return {y, mean, rstd};
  auto xd = dense_or_copy(x, l, op);
  const GpuStorage& xm = as_gpu(*xd);
  // Without a weight or bias the kernel reads neither; x is bound in their place.
  Launch(dev, "group_norm.metal", kname("group_norm_fwd_", x.dtype(), op))
      .input(xm)
      .input(w ? as_gpu(*w) : xm)
      .input(b ? as_gpu(*b) : xm)
      .output(*y)
      .output(*mean)
      .output(*rstd)
      .scalar_of(ft, a, a64)
      .dispatch_rows(checked_u32(rows, op), kThreads);
  return {y, mean, rstd};
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> group_norm_bwd(const BackendStorage& xs, const Layout& l,
                                                              int64_t groups, const BackendStorage* w,
                                                              const Layout* lw, const BackendStorage& mean,
                                                              const BackendStorage& rstd, const BackendStorage& g,
                                                              const Layout& lg) {
  const char* op = "group_norm_bwd";
  const GpuStorage& x = as_gpu(xs);
  GpuDevice& dev = x.gpu_device();
  const DType ft = compute_dtype(x.dtype());
  const auto a = args_of(l, groups, w ? lw : nullptr, nullptr, 0.0);
  const auto a64 = args_of<double>(l, groups, w ? lw : nullptr, nullptr, 0.0);
  auto dx = new_storage(dev, x.dtype(), l.numel(), op);
  auto dw = new_storage(dev, x.dtype(), a.c, op);
  auto db = new_storage(dev, x.dtype(), a.c, op);
  if (a.c == 0) return {dx, dw, db};
  if (l.numel() == 0) {  // no position: the parameters' gradients are empty sums
    fill(*dw, Layout::contiguous({a.c}), 0.0);
    fill(*db, Layout::contiguous({a.c}), 0.0);
    return {dx, dw, db};
  }
  auto xd = dense_or_copy(x, l, op), gd = dense_or_copy(as_gpu(g), lg, op);
  const GpuStorage &xm = as_gpu(*xd), &gm = as_gpu(*gd);
  Launch(dev, "group_norm.metal", kname("group_norm_bwd_dx_", x.dtype(), op))
      .input(xm)
      .input(w ? as_gpu(*w) : xm)
      .input(as_gpu(mean))
      .input(as_gpu(rstd))
      .input(gm)
      .output(*dx)
      .scalar_of(ft, a, a64)
      .dispatch_rows(checked_u32(a.n * groups, op), kThreads);
  Launch(dev, "group_norm.metal", kname("group_norm_bwd_params_", x.dtype(), op))
      .input(xm)
      .input(as_gpu(mean))
      .input(as_gpu(rstd))
      .input(gm)
      .output(*dw)
      .output(*db)
      .scalar_of(ft, a, a64)
      .dispatch_rows(checked_u32(a.c, op), kThreads);
  return {dx, dw, db};
}

}  // namespace

void register_group_norm(DeviceKind kind) {
  Kernels<GroupNormFwd>::set(kind, &group_norm_fwd);
  Kernels<GroupNormBwd>::set(kind, &group_norm_bwd);
}

}  // namespace ember::gpu::ops
