// batch_norm on CPU: a fused forward (per-channel mean and variance over (n, positions) in two exact passes,
// the running statistics updated in place, the affine folded in) and a fused backward (dx, dweight, dbias),
// threaded over channels (over pieces of each channel when there are few), or along the rows when the
// positions per sample are few (BatchNorm1d on (N, C)); f16/bf16 through f32.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_storage.h"
#include "cpu/norm_kernels.h"
#include "cpu/parallel.h"
#include "families/batch_norm.h"
#include "registry.h"

namespace ember::cpu {
namespace {

// The rows path (few positions per sample): each kernel walks one sample's c * s values, elementwise
// against per-position arrays (a channel's value repeated s times), so it vectorises along the row.
#define EMBER_BN_ROW_KERNELS(T)                                                                      \
  EMBER_NORM_CLONES void rw_add(const T* __restrict x, T* __restrict acc, int64_t k) {                 \
    for (int64_t i = 0; i < k; ++i) acc[i] += x[i];                                                  \
  }                                                                                                  \
  EMBER_NORM_CLONES void rw_sq(const T* __restrict x, const T* __restrict mu, T* __restrict acc,       \
                             int64_t k) {                                                            \
    for (int64_t i = 0; i < k; ++i) acc[i] += (x[i] - mu[i]) * (x[i] - mu[i]);                       \
  }                                                                                                  \
  EMBER_NORM_CLONES void rw_dot(const T* __restrict g, const T* __restrict x, const T* __restrict mu,  \
                              T* __restrict a1, T* __restrict a2, int64_t k) {                       \
    for (int64_t i = 0; i < k; ++i) {                                                                \
      a1[i] += g[i];                                                                                 \
      a2[i] += g[i] * (x[i] - mu[i]);                                                                \
    }                                                                                                \
  }                                                                                                  \
  /* y = x * a + b */                                                                                \
  EMBER_NORM_CLONES void rw_affine(const T* __restrict x, T* __restrict y, const T* __restrict a,      \
                                 const T* __restrict b, int64_t k) {                                 \
    for (int64_t i = 0; i < k; ++i) y[i] = x[i] * a[i] + b[i];                                       \
  }                                                                                                  \
  /* dx = g * a + x * b + c */                                                                       \
  EMBER_NORM_CLONES void rw_dx(const T* __restrict g, const T* __restrict x, T* __restrict dx,         \
                             const T* __restrict a, const T* __restrict b, const T* __restrict c,    \
                             int64_t k) {                                                            \
    for (int64_t i = 0; i < k; ++i) dx[i] = g[i] * a[i] + x[i] * b[i] + c[i];                        \
  }

EMBER_BN_ROW_KERNELS(float)
EMBER_BN_ROW_KERNELS(double)
#undef EMBER_BN_ROW_KERNELS


// A (c,) tensor read through its layout into the compute type; `dflt` when absent.
template <typename T> std::vector<T> param(const BackendStorage* p, const Layout* l, int64_t c, T dflt) {
  std::vector<T> v(c, dflt);
  if (!p) return v;
  auto f = as_cpu(*p).to_dtype(*l, std::is_same_v<T, double> ? DType::F64 : DType::F32);
  const T* d = as_cpu(*f).template data<T>();
  std::copy(d, d + c, v.begin());
  return v;
}

struct Dims {
  int64_t n, c, s, m;  // samples, channels, positions per sample, values per channel (n * s)
};
Dims dims_of(const Layout& l) {
  const int64_t n = l.shape()[0], c = l.shape()[1], s = (n != 0 && c != 0) ? l.numel() / (n * c) : 0;
  return {n, c, s, n * s};
}

// x through l as a dense (n, c, s) buffer of the compute type: itself when it already is one, else a copy.
StoragePtr dense_as(const CpuStorage& s, const Layout& l, DType ct) {
  if (s.dtype() == ct && l.is_contiguous() && l.offset() == 0)
    return std::const_pointer_cast<BackendStorage>(s.shared_from_this());
  return s.to_dtype(l, ct);
}
// A dense result of the compute type as l's shape in dtype dt.
StoragePtr out_as(const CpuStoragePtr& out, const Layout& l, DType dt) {
  return out->dtype() == dt ? StoragePtr(out) : out->to_dtype(Layout::contiguous(l.shape()), dt);
}

// ---- the channel path: a channel's n runs of s values, each run SIMD. Threaded over channels, and over
// pieces of each channel when the channels are fewer than the threads.
struct Geo {
  int64_t c, s, cs, m, pieces;  // cs: one sample's stride (c * s)
};
Geo geo_of(const Dims& d) {
  Geo g{d.c, d.s, d.c * d.s, d.m, 1};
  // About four tasks per thread in all, none under 16k values.
  const int64_t threads = get_num_threads();
  if (d.c > 0 && d.c < 2 * threads)
    g.pieces = std::clamp<int64_t>((4 * threads + d.c - 1) / d.c, 1, std::max<int64_t>(1, d.m / 16384));
  return g;
}
// Calls f(offset, len) for each contiguous run of channel ch's values [p0, p1) (value k of a channel is
// sample k / s, position k % s).
template <typename F> inline void for_range(const Geo& g, int64_t ch, int64_t p0, int64_t p1, F&& f) {
  while (p0 < p1) {
    const int64_t i = p0 / g.s, j = p0 - i * g.s, len = std::min(g.s - j, p1 - p0);
    f(i * g.cs + ch * g.s + j, len);
    p0 += len;
  }
}
inline int64_t piece_lo(const Geo& g, int64_t p) { return g.m * p / g.pieces; }

// Runs the per-item phases: with one piece per channel all of a channel's phases in one task (its data
// stays in cache between them), else each phase over every (channel, piece), the per-channel step between.
template <typename P1, typename F1, typename P2, typename F2, typename P3>
void run_phases(const Geo& g, P1&& ph1, F1&& fin1, P2&& ph2, F2&& fin2, P3&& ph3) {
  if (g.pieces == 1) {
    const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, g.m));
    parallel_for(g.c, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t ch = lo; ch < hi; ++ch) {
        ph1(ch, 0);
        fin1(ch);
        ph2(ch, 0);
        fin2(ch);
        ph3(ch, 0);
      }
    });
    return;
  }
  auto over = [&](auto&& ph) {
    parallel_for(g.c * g.pieces, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t it = lo; it < hi; ++it) ph(it / g.pieces, it % g.pieces);
    });
  };
  over(ph1);
  for (int64_t ch = 0; ch < g.c; ++ch) fin1(ch);
  over(ph2);
  for (int64_t ch = 0; ch < g.c; ++ch) fin2(ch);
  over(ph3);
}

// ---- the rows path: with fewer positions than this per sample a channel's runs are too short for SIMD,
// so the kernels run along each sample's row of c * s values instead, threaded over blocks of samples.
constexpr int64_t kMinRun = 16;
constexpr int64_t kRowBlock = 128;  // samples summed in the compute type before the block's double partial

// Per-channel double totals of `nacc` row sums: body(i, acc) adds sample i into acc (nacc arrays of c * s).
template <typename T, typename Body>
std::vector<std::vector<double>> rows_reduce(const Dims& d, int nacc, Body&& body) {
  const int64_t k = d.c * d.s, blocks = (d.n + kRowBlock - 1) / kRowBlock;
  std::vector<double> part((size_t)(blocks * nacc * d.c), 0.0);
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, kRowBlock * k));
  parallel_for(blocks, grain, [&](int64_t lo, int64_t hi) {
    std::vector<T> acc((size_t)(nacc * k));
    for (int64_t b = lo; b < hi; ++b) {
      std::fill(acc.begin(), acc.end(), T(0));
      for (int64_t i = b * kRowBlock; i < std::min(d.n, (b + 1) * kRowBlock); ++i) body(i, acc.data());
      for (int a = 0; a < nacc; ++a)
        for (int64_t j = 0; j < k; ++j) part[(b * nacc + a) * d.c + j / d.s] += (double)acc[a * k + j];
    }
  });
  std::vector<std::vector<double>> tot(nacc, std::vector<double>(d.c, 0.0));
  for (int64_t b = 0; b < blocks; ++b)
    for (int a = 0; a < nacc; ++a)
      for (int64_t ch = 0; ch < d.c; ++ch) tot[a][ch] += part[(b * nacc + a) * d.c + ch];
  return tot;
}
// fn(i) for every sample, threaded.
template <typename F> void rows_each(const Dims& d, F&& fn) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, d.c * d.s));
  parallel_for(d.n, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) fn(i);
  });
}
// A per-channel array repeated per position: the rows path's operand of one row.
template <typename T> std::vector<T> per_pos(const std::vector<T>& v, const Dims& d) {
  std::vector<T> out((size_t)(d.c * d.s));
  for (int64_t j = 0; j < d.c * d.s; ++j) out[j] = v[j / d.s];
  return out;
}

// new = (1 - momentum) * old + momentum * stat, written into r (any float dtype) through lr.
template <typename T>
void update_running(BackendStorage* r, const Layout* lr, const std::vector<double>& stat, double momentum, DType ct) {
  const int64_t c = (int64_t)stat.size();
  const std::vector<T> old = param<T>(r, lr, c, T(0));
  auto nv = new_cpu(ct, c);
  T* p = nv->data<T>();
  for (int64_t ch = 0; ch < c; ++ch) p[ch] = (T)((1.0 - momentum) * (double)old[ch] + momentum * stat[ch]);
  StoragePtr src = nv;
  if (r->dtype() != ct) src = nv->to_dtype(Layout::contiguous({c}), r->dtype());
  src->copy_into(Layout::contiguous({c}), *r, *lr);
}

template <typename T>
std::tuple<StoragePtr, StoragePtr, StoragePtr> fwd(const CpuStorage& x, const Layout& l, const BackendStorage* w,
                                                   const Layout* lw, const BackendStorage* b, const Layout* lb,
                                                   BackendStorage* rm, const Layout* lrm, BackendStorage* rv,
                                                   const Layout* lrv, bool training, double momentum, double eps) {
  constexpr DType ct = std::is_same_v<T, double> ? DType::F64 : DType::F32;
  const Dims d = dims_of(l);
  const int64_t c = d.c;
  auto mean = new_cpu(ct, c), rstd = new_cpu(ct, c);
  T *mp = mean->data<T>(), *rp = rstd->data<T>();
  auto y = new_cpu(ct, l.numel());
  if (l.numel() == 0) {  // no value per channel: the statistics of an empty set, and nothing to update
    std::fill(mp, mp + c, T(0));
    std::fill(rp, rp + c, T(1.0 / std::sqrt(eps)));
    return {out_as(y, l, x.dtype()), mean, rstd};
  }
  auto xs = dense_as(x, l, ct);
  const T* xp = as_cpu(*xs).data<T>();
  T* yp = y->data<T>();
  const std::vector<T> wv = param<T>(w, lw, c, T(1)), bv = param<T>(b, lb, c, T(0));
  std::vector<T> ca(c), cb(c);  // y = x * ca + cb per channel
  std::vector<double> var(c);
  auto fold = [&](int64_t ch) {
    const double a = (double)rp[ch] * (double)wv[ch];
    ca[ch] = (T)a;
    cb[ch] = (T)((double)bv[ch] - (double)mp[ch] * a);
  };
  if (!training) {
    const std::vector<T> m0 = param<T>(rm, lrm, c, T(0)), v0 = param<T>(rv, lrv, c, T(1));
    for (int64_t ch = 0; ch < c; ++ch) {
      mp[ch] = m0[ch];
      rp[ch] = (T)(1.0 / std::sqrt((double)v0[ch] + eps));
    }
  }
  if (d.s < kMinRun) {  // the rows path: statistics in two passes over the rows, then the affine
    if (training) {
      const auto sum = rows_reduce<T>(d, 1, [&](int64_t i, T* acc) { rw_add(xp + i * c * d.s, acc, c * d.s); });
      for (int64_t ch = 0; ch < c; ++ch) mp[ch] = (T)(sum[0][ch] / (double)d.m);
      const std::vector<T> mu = per_pos(std::vector<T>(mp, mp + c), d);
      const auto sq =
          rows_reduce<T>(d, 1, [&](int64_t i, T* acc) { rw_sq(xp + i * c * d.s, mu.data(), acc, c * d.s); });
      for (int64_t ch = 0; ch < c; ++ch) {
        var[ch] = sq[0][ch] / (double)d.m;
        rp[ch] = (T)(1.0 / std::sqrt(var[ch] + eps));
      }
    }
    for (int64_t ch = 0; ch < c; ++ch) fold(ch);
    const std::vector<T> ak = per_pos(ca, d), bk = per_pos(cb, d);
    rows_each(d, [&](int64_t i) { rw_affine(xp + i * c * d.s, yp + i * c * d.s, ak.data(), bk.data(), c * d.s); });
  } else {
    const Geo g = geo_of(d);
    auto apply = [&](int64_t ch, int64_t p) {
      for_range(g, ch, piece_lo(g, p), piece_lo(g, p + 1),
                [&](int64_t o, int64_t len) { norm_affine(xp + o, yp + o, len, ca[ch], cb[ch]); });
    };
    if (!training) {
      for (int64_t ch = 0; ch < c; ++ch) fold(ch);
      const int64_t grain = std::max<int64_t>(1, 65536 * g.pieces / std::max<int64_t>(1, g.m));
      parallel_for(c * g.pieces, grain, [&](int64_t lo, int64_t hi) {
        for (int64_t it = lo; it < hi; ++it) apply(it / g.pieces, it % g.pieces);
      });
    } else {
      std::vector<double> part(c * g.pieces);
      auto total = [&](int64_t ch) {
        double t = 0;
        for (int64_t p = 0; p < g.pieces; ++p) t += part[ch * g.pieces + p];
        return t;
      };
      run_phases(
          g,
          [&](int64_t ch, int64_t p) {
            double t = 0;
            for_range(g, ch, piece_lo(g, p), piece_lo(g, p + 1),
                      [&](int64_t o, int64_t len) { t += norm_sum(xp + o, len); });
            part[ch * g.pieces + p] = t;
          },
          [&](int64_t ch) { mp[ch] = (T)(total(ch) / (double)g.m); },
          [&](int64_t ch, int64_t p) {
            double t = 0;
            for_range(g, ch, piece_lo(g, p), piece_lo(g, p + 1),
                      [&](int64_t o, int64_t len) { t += norm_sqdev(xp + o, len, mp[ch]); });
            part[ch * g.pieces + p] = t;
          },
          [&](int64_t ch) {
            var[ch] = total(ch) / (double)g.m;
            rp[ch] = (T)(1.0 / std::sqrt(var[ch] + eps));
            fold(ch);
          },
          apply);
    }
  }
  if (training && rm) {
    std::vector<double> mu(c), unbiased(c);
    for (int64_t ch = 0; ch < c; ++ch) {
      mu[ch] = (double)mp[ch];
      unbiased[ch] = var[ch] * (double)d.m / (double)(d.m - 1);
    }
    update_running<T>(rm, lrm, mu, momentum, ct);
    update_running<T>(rv, lrv, unbiased, momentum, ct);
  }
  return {out_as(y, l, x.dtype()), mean, rstd};
}

template <typename T>
std::tuple<StoragePtr, StoragePtr, StoragePtr> bwd(const CpuStorage& x, const Layout& l, const BackendStorage* w,
                                                   const Layout* lw, const CpuStorage& mean, const CpuStorage& rstd,
                                                   const CpuStorage& gr, const Layout& lg, bool training) {
  constexpr DType ct = std::is_same_v<T, double> ? DType::F64 : DType::F32;
  const Dims d = dims_of(l);
  const int64_t c = d.c;
  auto dx = new_cpu(ct, l.numel());
  auto dw = new_cpu(ct, c), db = new_cpu(ct, c);
  T *dwp = dw->data<T>(), *dbp = db->data<T>();
  auto finish = [&]() -> std::tuple<StoragePtr, StoragePtr, StoragePtr> {
    return {out_as(dx, l, x.dtype()), out_as(dw, Layout::contiguous({c}), x.dtype()),
            out_as(db, Layout::contiguous({c}), x.dtype())};
  };
  if (l.numel() == 0) {
    std::fill(dwp, dwp + c, T(0));
    std::fill(dbp, dbp + c, T(0));
    return finish();
  }
  auto xs = dense_as(x, l, ct), gs = dense_as(gr, lg, ct);
  const T *xp = as_cpu(*xs).data<T>(), *gp = as_cpu(*gs).data<T>();
  const T *mp = mean.data<T>(), *rp = rstd.data<T>();
  T* dxp = dx->data<T>();
  const std::vector<T> wv = param<T>(w, lw, c, T(1));
  std::vector<T> ka(c), kb(c), kc(c);  // dx = g * ka + x * kb + kc per channel
  for (int64_t ch = 0; ch < c; ++ch) ka[ch] = (T)((double)rp[ch] * (double)wv[ch]);
  // From the channel's sum(g) and sum(g (x - mean)): dw, db, and dx's coefficients.
  auto params = [&](int64_t ch, double sg, double sc) {
    const double r = rp[ch], a = ka[ch], m = (double)d.m;
    dwp[ch] = (T)(sc * r);
    dbp[ch] = (T)sg;
    // dx = r w (g - sg/m - xhat r sc/m) = g a + x b + c, b = -a r^2 sc/m, c = -a sg/m - mu b
    const double bx = training ? -a * r * r * sc / m : 0.0;
    kb[ch] = (T)bx;
    kc[ch] = (T)(training ? -a * sg / m - (double)mp[ch] * bx : 0.0);
  };
  if (d.s < kMinRun) {  // the rows path: the sums over the rows, then dx per row
    const int64_t k = c * d.s;
    const std::vector<T> mu = per_pos(std::vector<T>(mp, mp + c), d);
    const auto sums = rows_reduce<T>(d, 2, [&](int64_t i, T* acc) {
      rw_dot(gp + i * k, xp + i * k, mu.data(), acc, acc + k, k);
    });
    for (int64_t ch = 0; ch < c; ++ch) params(ch, sums[0][ch], sums[1][ch]);
    const std::vector<T> ak = per_pos(ka, d), bk = per_pos(kb, d), ck = per_pos(kc, d);
    rows_each(d, [&](int64_t i) { rw_dx(gp + i * k, xp + i * k, dxp + i * k, ak.data(), bk.data(), ck.data(), k); });
    return finish();
  }
  const Geo g = geo_of(d);
  std::vector<double> psg(c * g.pieces), psc(c * g.pieces);
  auto sums = [&](int64_t ch, int64_t p) {  // eval writes dx = g * r * w in the same pass
    double sg = 0, sc = 0;
    for_range(g, ch, piece_lo(g, p), piece_lo(g, p + 1), [&](int64_t o, int64_t len) {
      double a, b2;
      norm_dot(gp + o, xp + o, training ? nullptr : dxp + o, len, mp[ch], ka[ch], a, b2);
      sg += a, sc += b2;
    });
    psg[ch * g.pieces + p] = sg;
    psc[ch * g.pieces + p] = sc;
  };
  auto fin = [&](int64_t ch) {
    double sg = 0, sc = 0;
    for (int64_t p = 0; p < g.pieces; ++p) sg += psg[ch * g.pieces + p], sc += psc[ch * g.pieces + p];
    params(ch, sg, sc);
  };
  auto write_dx = [&](int64_t ch, int64_t p) {
    if (!training) return;
    for_range(g, ch, piece_lo(g, p), piece_lo(g, p + 1),
              [&](int64_t o, int64_t len) { norm_dx(gp + o, xp + o, dxp + o, len, ka[ch], kb[ch], kc[ch]); });
  };
  run_phases(g, sums, fin, write_dx, [](int64_t) {}, [](int64_t, int64_t) {});
  return finish();
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> batch_norm_fwd(const BackendStorage& xs, const Layout& l,
                                                              const BackendStorage* w, const Layout* lw,
                                                              const BackendStorage* b, const Layout* lb,
                                                              BackendStorage* rm, const Layout* lrm,
                                                              BackendStorage* rv, const Layout* lrv, bool training,
                                                              double momentum, double eps) {
  const CpuStorage& x = as_cpu(xs);
  if (x.dtype() == DType::F64) return fwd<double>(x, l, w, lw, b, lb, rm, lrm, rv, lrv, training, momentum, eps);
  return fwd<float>(x, l, w, lw, b, lb, rm, lrm, rv, lrv, training, momentum, eps);
}

std::tuple<StoragePtr, StoragePtr, StoragePtr> batch_norm_bwd(const BackendStorage& xs, const Layout& l,
                                                              const BackendStorage* w, const Layout* lw,
                                                              const BackendStorage& mean, const BackendStorage& rstd,
                                                              const BackendStorage& g, const Layout& lg,
                                                              bool training) {
  const CpuStorage& x = as_cpu(xs);
  if (x.dtype() == DType::F64) return bwd<double>(x, l, w, lw, as_cpu(mean), as_cpu(rstd), as_cpu(g), lg, training);
  return bwd<float>(x, l, w, lw, as_cpu(mean), as_cpu(rstd), as_cpu(g), lg, training);
}

}  // namespace

void register_batch_norm() {
  Kernels<BatchNormFwd>::set(DeviceKind::Cpu, &batch_norm_fwd);
  Kernels<BatchNormBwd>::set(DeviceKind::Cpu, &batch_norm_bwd);
}

}  // namespace ember::cpu
