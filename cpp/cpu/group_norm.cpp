// group_norm on CPU: a fused forward (mean and rstd per (sample, group), the per-channel affine folded in)
// and a fused backward (dx, dweight, dbias), threaded over (sample, group) rows; f16/bf16 through f32.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_storage.h"
#include "cpu/norm_kernels.h"
#include "cpu/parallel.h"
#include "families/group_norm.h"
#include "registry.h"

namespace ember::cpu {
namespace {

// A (c,) parameter read through its layout into the compute type; `dflt` when absent.
template <typename T> std::vector<T> param(const CpuStorage* p, const Layout* l, int64_t c, T dflt) {
  std::vector<T> v(c, dflt);
  if (!p) return v;
  auto f = p->to_dtype(*l, std::is_same_v<T, double> ? DType::F64 : DType::F32);
  const T* d = as_cpu(*f).template data<T>();
  std::copy(d, d + c, v.begin());
  return v;
}

// x through l as a dense buffer of the compute type: itself when it already is one, else a copy.
StoragePtr dense_as(const CpuStorage& s, const Layout& l, DType ct) {
  if (s.dtype() == ct && l.is_contiguous() && l.offset() == 0)
    return std::const_pointer_cast<BackendStorage>(s.shared_from_this());
  return s.to_dtype(l, ct);
}

struct Dims {
  int64_t n, c, groups, cg, s;
};
Dims dims_of(const Layout& l, int64_t groups) {
  const int64_t n = l.shape()[0], c = l.shape()[1];
  return {n, c, groups, c / groups, (n != 0 && c != 0) ? l.numel() / (n * c) : 0};
}
// Rows per task: about 64k elements, so small rows do not pay the pool's hand-off each.
int64_t row_grain(const Dims& d) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(1, d.cg * d.s)); }

template <typename T>
std::tuple<StoragePtr, StoragePtr, StoragePtr> fwd(const CpuStorage& x, const Layout& l, int64_t groups,
                                                   const CpuStorage* w, const Layout* lw, const CpuStorage* b,
                                                   const Layout* lb, double eps) {
  constexpr DType ct = std::is_same_v<T, double> ? DType::F64 : DType::F32;
  const Dims d = dims_of(l, groups);
  auto xs = dense_as(x, l, ct);
  const T* xp = as_cpu(*xs).data<T>();
  auto y = new_cpu(ct, l.numel());
  auto mean = new_cpu(ct, d.n * groups), rstd = new_cpu(ct, d.n * groups);
  const std::vector<T> wv = param<T>(w, lw, d.c, T(1)), bv = param<T>(b, lb, d.c, T(0));
  T *yp = y->data<T>(), *mp = mean->data<T>(), *rp = rstd->data<T>();
  const int64_t len = d.cg * d.s;
  parallel_for(d.n * groups, row_grain(d), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const T* xr = xp + row * len;
      const double mu = len ? norm_sum(xr, len) / (double)len : 0.0;
      const double var = len ? norm_sqdev(xr, len, (T)mu) / (double)len : 0.0;
      const double r = 1.0 / std::sqrt(var + eps);
      mp[row] = (T)mu;
      rp[row] = (T)r;
      const int64_t c0 = (row % groups) * d.cg;
      for (int64_t j = 0; j < d.cg; ++j) {  // y = (x - mu) * r * w + b, as one multiply-add per element
        const double a = r * wv[c0 + j];
        norm_affine(xr + j * d.s, yp + row * len + j * d.s, d.s, (T)a, (T)(bv[c0 + j] - mu * a));
      }
    }
  });
  StoragePtr out = y;
  if (x.dtype() != ct) out = y->to_dtype(Layout::contiguous(l.shape()), x.dtype());
  return {out, mean, rstd};
}

template <typename T>
std::tuple<StoragePtr, StoragePtr, StoragePtr> bwd(const CpuStorage& x, const Layout& l, int64_t groups,
                                                   const CpuStorage* w, const Layout* lw, const CpuStorage& mean,
                                                   const CpuStorage& rstd, const CpuStorage& g, const Layout& lg) {
  constexpr DType ct = std::is_same_v<T, double> ? DType::F64 : DType::F32;
  const Dims d = dims_of(l, groups);
  auto xs = dense_as(x, l, ct), gs = dense_as(g, lg, ct);
  const T *xp = as_cpu(*xs).data<T>(), *gp = as_cpu(*gs).data<T>();
  const T *mp = mean.data<T>(), *rp = rstd.data<T>();
  const std::vector<T> wv = param<T>(w, lw, d.c, T(1));
  auto dx = new_cpu(ct, l.numel());
  T* dxp = dx->data<T>();
  // Per (sample, channel) sums of g and g * xhat, added over the samples in order afterwards.
  std::vector<double> pw(d.n * d.c), pb(d.n * d.c);
  const int64_t len = d.cg * d.s;
  parallel_for(d.n * groups, row_grain(d), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t i = row / groups, c0 = (row % groups) * d.cg;
      const double mu = mp[row], r = rp[row];
      const T *xr = xp + row * len, *gr = gp + row * len;
      double m1 = 0, m2 = 0;  // sum(g w), sum(g w xhat)
      for (int64_t j = 0; j < d.cg; ++j) {
        double sg, sgc;  // sum(g), sum(g (x - mu))
        norm_dot(gr + j * d.s, xr + j * d.s, nullptr, d.s, (T)mu, T(0), sg, sgc);
        const double gxhat = r * sgc;
        pb[i * d.c + c0 + j] = sg;
        pw[i * d.c + c0 + j] = gxhat;
        m1 += wv[c0 + j] * sg;
        m2 += wv[c0 + j] * gxhat;
      }
      m1 /= (double)std::max<int64_t>(1, len);
      m2 /= (double)std::max<int64_t>(1, len);
      // dx = r (g w - m1 - xhat m2) = g (r w) + x (-r^2 m2) + r (r mu m2 - m1)
      const double bx = -r * r * m2, cc = r * (r * mu * m2 - m1);
      for (int64_t j = 0; j < d.cg; ++j)
        norm_dx(gr + j * d.s, xr + j * d.s, dxp + row * len + j * d.s, d.s, (T)(r * wv[c0 + j]), (T)bx, (T)cc);
    }
  });
  auto dw = new_cpu(ct, d.c), db = new_cpu(ct, d.c);
  T *dwp = dw->data<T>(), *dbp = db->data<T>();
  for (int64_t ch = 0; ch < d.c; ++ch) {
    double sw = 0, sb = 0;
    for (int64_t i = 0; i < d.n; ++i) sw += pw[i * d.c + ch], sb += pb[i * d.c + ch];
    dwp[ch] = (T)sw;
    dbp[ch] = (T)sb;
  }
  if (x.dtype() == ct) return {dx, dw, db};
  return {dx->to_dtype(Layout::contiguous(l.shape()), x.dtype()), dw->to_dtype(Layout::contiguous({d.c}), x.dtype()),
          db->to_dtype(Layout::contiguous({d.c}), x.dtype())};
}

const CpuStorage* opt(const BackendStorage* s) { return s ? &as_cpu(*s) : nullptr; }

std::tuple<StoragePtr, StoragePtr, StoragePtr> group_norm_fwd(const BackendStorage& xs, const Layout& l,
                                                              int64_t groups, const BackendStorage* w,
                                                              const Layout* lw, const BackendStorage* b,
                                                              const Layout* lb, double eps) {
  const CpuStorage& x = as_cpu(xs);
  if (x.dtype() == DType::F64) return fwd<double>(x, l, groups, opt(w), lw, opt(b), lb, eps);
  return fwd<float>(x, l, groups, opt(w), lw, opt(b), lb, eps);
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> group_norm_bwd(const BackendStorage& xs, const Layout& l,
                                                              int64_t groups, const BackendStorage* w,
                                                              const Layout* lw, const BackendStorage& mean,
                                                              const BackendStorage& rstd, const BackendStorage& g,
                                                              const Layout& lg) {
  const CpuStorage& x = as_cpu(xs);
  if (x.dtype() == DType::F64) return bwd<double>(x, l, groups, opt(w), lw, as_cpu(mean), as_cpu(rstd), as_cpu(g), lg);
  return bwd<float>(x, l, groups, opt(w), lw, as_cpu(mean), as_cpu(rstd), as_cpu(g), lg);
}

}  // namespace

void register_group_norm() {
  Kernels<GroupNormFwd>::set(DeviceKind::Cpu, &group_norm_fwd);
  Kernels<GroupNormBwd>::set(DeviceKind::Cpu, &group_norm_bwd);
}

}  // namespace ember::cpu
