// GPU launchers for batch_norm (metal/batch_norm.metal): x and the gradient read dense (a strided operand
// is copied once), statistics in float per channel, the running statistics read and written back through
// float copies (any float dtype and layout).
#include <algorithm>
#include <cmath>
#include <string>

#include "families/batch_norm.h"
#include "gpu/launch.h"
#include "gpu/ops/ops.h"
#include "registry.h"

namespace ember::gpu::ops {
namespace {

constexpr uint32_t kThreads = 256;  // batch_norm.metal's threadgroup size for the per-channel kernels

template <class R> struct BatchNormArgs {  // must match batch_norm.metal (R: double for the float64 kernels)
  int64_t n, c, s;
  int64_t w_off, w_st, b_off, b_st;
  R eps, momentum;
  uint32_t has_w, has_b, training, has_running;
};

template <class R>
BatchNormArgs<R> args_of(const Layout& l, const Layout* lw, const Layout* lb, bool training, bool running,
                         double momentum, double eps) {
  BatchNormArgs<R> a{};
  a.n = l.shape()[0];
  a.c = l.shape()[1];
  a.s = (a.n != 0 && a.c != 0) ? l.numel() / (a.n * a.c) : 0;
  a.eps = (R)eps;
  a.momentum = (R)momentum;
  a.has_w = lw != nullptr;
  a.has_b = lb != nullptr;
  a.training = training;
  a.has_running = running;
  if (lw) a.w_off = lw->offset(), a.w_st = lw->stride()[0];
  if (lb) a.b_off = lb->offset(), a.b_st = lb->stride()[0];
  return a;
}

// A running statistic as a dense (c,) storage of the kernels' float type `ft`; `dflt` everywhere when absent.
StoragePtr running_f32(GpuDevice& dev, const BackendStorage* r, const Layout* lr, int64_t c, double dflt,
                       const char* op, DType ft) {
  if (r) return r->to_dtype(*lr, ft);
  auto out = new_storage(dev, ft, std::max<int64_t>(c, 1), op);
  fill(*out, Layout::contiguous({std::max<int64_t>(c, 1)}), dflt);
  return out;
}

// Writes the float (c,) values `v` into r through lr, in r's dtype.
void write_running(const BackendStorage& v, BackendStorage& r, const Layout& lr, int64_t c) {
  const Layout lc = Layout::contiguous({c});
  if (r.dtype() == v.dtype()) {
    v.copy_into(lc, r, lr);
    return;
  }
  v.to_dtype(lc, r.dtype())->copy_into(lc, r, lr);
}

std::string kname(const char* base, DType dt, const char* op) { return std::string(base) + type_suffix(dt, op); }

}  // namespace

std::tuple<StoragePtr, StoragePtr, StoragePtr> batch_norm_fwd(const BackendStorage& xs, const Layout& l,
                                                              const BackendStorage* w, const Layout* lw,
                                                              const BackendStorage* b, const Layout* lb,
                                                              BackendStorage* rm, const Layout* lrm, BackendStorage* rv,
                                                              const Layout* lrv, bool training, double momentum,
                                                              double eps) {
  const char* op = "batch_norm";
  const GpuStorage& x = as_gpu(xs);
  GpuDevice& dev = x.gpu_device();
  const DType ft = compute_dtype(x.dtype());
  return with_args(ft, [&](auto tag) -> std::tuple<StoragePtr, StoragePtr, StoragePtr> {
  using R = decltype(tag);
  const auto a = args_of<R>(l, w ? lw : nullptr, b ? lb : nullptr, training, rm != nullptr, momentum, eps);
  const int64_t c = a.c, m = a.n * a.s;
  auto y = new_storage(dev, x.dtype(), l.numel(), op);
  auto mean = new_storage(dev, ft, c, op);
  auto rstd = new_storage(dev, ft, c, op);
  if (c == 0) return {y, mean, rstd};
  if (training && m == 0) {  // no value per channel: the statistics of an empty set, and nothing to update
    fill(*mean, Layout::contiguous({c}), 0.0);
    fill(*rstd, Layout::contiguous({c}), 1.0 / std::sqrt(eps));
    return {y, mean, rstd};
  }
  auto rmf = running_f32(dev, rm, lrm, c, 0.0, op, ft), rvf = running_f32(dev, rv, lrv, c, 1.0, op, ft);
  auto rm_out = new_storage(dev, ft, c, op), rv_out = new_storage(dev, ft, c, op);
  auto xd = dense_or_copy(x, l, op);
  const GpuStorage& xm = as_gpu(*xd);
  Launch(dev, "batch_norm.metal", kname("batch_norm_stats_", x.dtype(), op))
      .input(xm)
      .input(as_gpu(*rmf))
      .input(as_gpu(*rvf))
      .output(*mean)
      .output(*rstd)
      .output(*rm_out)
      .output(*rv_out)
      .scalar(a)
      .dispatch_rows(checked_u32(c, op), kThreads);
  if (training && rm) {
    write_running(*rm_out, *rm, *lrm, c);
    write_running(*rv_out, *rv, *lrv, c);
  }
  if (m == 0) return {y, mean, rstd};
  // Without a weight or bias the kernel reads neither; x is bound in their place.
  Launch(dev, "batch_norm.metal", kname("batch_norm_apply_", x.dtype(), op))
      .input(xm)
      .input(w ? as_gpu(*w) : xm)
      .input(b ? as_gpu(*b) : xm)
      .input(*mean)
      .input(*rstd)
      .output(*y)
      .scalar(a)
      .dispatch_1d(checked_u32(l.numel(), op));
  return {y, mean, rstd};
  });
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> batch_norm_bwd(const BackendStorage& xs, const Layout& l,
                                                              const BackendStorage* w, const Layout* lw,
                                                              const BackendStorage& mean, const BackendStorage& rstd,
                                                              const BackendStorage& g, const Layout& lg,
                                                              bool training) {
  const char* op = "batch_norm_bwd";
  const GpuStorage& x = as_gpu(xs);
  GpuDevice& dev = x.gpu_device();
  const DType ft = compute_dtype(x.dtype());
  return with_args(ft, [&](auto tag) -> std::tuple<StoragePtr, StoragePtr, StoragePtr> {
  using R = decltype(tag);
  const auto a = args_of<R>(l, w ? lw : nullptr, nullptr, training, false, 0.0, 0.0);
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
  auto sums = new_storage(dev, ft, 2 * a.c, op);
  Launch(dev, "batch_norm.metal", kname("batch_norm_bwd_sums_", x.dtype(), op))
      .input(xm)
      .input(gm)
      .input(as_gpu(mean))
      .input(as_gpu(rstd))
      .output(*dw)
      .output(*db)
      .output(*sums)
      .scalar(a)
      .dispatch_rows(checked_u32(a.c, op), kThreads);
  Launch(dev, "batch_norm.metal", kname("batch_norm_bwd_dx_", x.dtype(), op))
      .input(xm)
      .input(gm)
      .input(w ? as_gpu(*w) : xm)
      .input(as_gpu(mean))
      .input(as_gpu(rstd))
      .input(*sums)
      .output(*dx)
      .scalar(a)
      .dispatch_1d(checked_u32(l.numel(), op));
  return {dx, dw, db};
  });
}

void register_batch_norm(DeviceKind kind) {
  Kernels<BatchNormFwd>::set(kind, &batch_norm_fwd);
  Kernels<BatchNormBwd>::set(kind, &batch_norm_bwd);
}

}  // namespace ember::gpu::ops
