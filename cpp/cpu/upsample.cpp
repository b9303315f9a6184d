// Resampling on CPU: nearest, nearest-exact and (bi)linear interpolation of (n, c, h, w) planes, forward
// and backward, threaded over the planes. The source indices and weights follow torch's formulas in its
// arithmetic (float for f32/f16/bf16, double for f64); linear blends the two source rows along w first
// (vectorised), then takes the two taps of each output column.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu/cpu_storage.h"
#include "cpu/parallel.h"
#include "families/upsample.h"
#include "registry.h"

namespace ember::cpu {
namespace {

// One axis: output o reads i0[o] (weight w0[o]) and i1[o] (weight w1[o]); nearest has w0 = 1, w1 = 0.
template <typename A> struct Taps {
  std::vector<int64_t> i0, i1;
  std::vector<A> w0, w1;
};

// torch's nearest_idx / nearest_exact_idx: the scale in float, whatever the dtype.
int64_t nearest_src(int64_t o, int64_t in, int64_t out, double sf, bool exact) {
  const float scale = sf > 0 ? (float)(1.0 / sf) : (float)in / (float)out;
  if (exact) return std::min((int64_t)std::floor((float)((o + 0.5) * (double)scale)), in - 1);
  if (out == in) return o;
  if (out == 2 * in) return o >> 1;
  return std::min((int64_t)std::floor((float)o * scale), in - 1);
}

template <typename A> Taps<A> make_taps(UpsampleMode mode, int64_t in, int64_t out, double sf, bool align) {
  Taps<A> t;
  t.i0.resize(out), t.i1.resize(out), t.w0.assign(out, A(1)), t.w1.assign(out, A(0));
  if (mode != UpsampleMode::Linear) {
    for (int64_t o = 0; o < out; ++o) t.i0[o] = t.i1[o] = nearest_src(o, in, out, sf, mode == UpsampleMode::NearestExact);
    return t;
  }
  if (in == out) {  // torch copies an axis whose size does not change, whatever the scale factor
    for (int64_t o = 0; o < out; ++o) t.i0[o] = t.i1[o] = o;
    return t;
  }
  const A scale = align ? (out > 1 ? A(in - 1) / A(out - 1) : A(0)) : (sf > 0 ? A(1.0 / sf) : A(in) / A(out));
  for (int64_t o = 0; o < out; ++o) {
    const A real = align ? scale * A(o) : std::max(scale * (A(o) + A(0.5)) - A(0.5), A(0));
    const int64_t i = std::min((int64_t)std::floor(real), in - 1);
    const A lam = std::min(std::max(real - A(i), A(0)), A(1));
    t.i0[o] = i, t.i1[o] = i + (i < in - 1 ? 1 : 0), t.w0[o] = A(1) - lam, t.w1[o] = lam;
  }
  return t;
}

inline int64_t plane_grain(int64_t work) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(work, 1)); }

// Whether an axis's linear taps are torch's for exactly twice the size without align_corners: output 2i
// reads (i - 1, i) and output 2i + 1 reads (i, i + 1), each pair at one fixed pair of weights, for every
// output but the two at each end. Then the outputs need no index loads (the loop vectorises).
template <typename A> bool doubled_taps(const Taps<A>& t, int64_t in, int64_t out) {
  if (out != 2 * in || in < 3) return false;
  for (int64_t o = 1; o < out - 1; ++o) {
    const int64_t i = o / 2, p = 2 - (o & 1);  // taps (i - 1, i) for even o, (i, i + 1) for odd o
    const int64_t lo = (o & 1) ? i : i - 1;
    if (t.i0[o] != lo || t.i1[o] != lo + 1 || t.w0[o] != t.w0[p] || t.w1[o] != t.w1[p]) return false;
  }
  return true;
}

// One output row from its blended source row `src` (w elements); `twice`: doubled_taps holds.
template <typename T, typename A, typename S>
void linear_row(const S* src, const UpsampleGeom& g, const Taps<A>& tx, bool twice, T* o) {
  using C = typename Acc<T>::type;
  auto at = [&](int64_t ox) {
    o[ox] = store<T>((C)(tx.w0[ox] * (A)src[tx.i0[ox]] + tx.w1[ox] * (A)src[tx.i1[ox]]));
  };
  if (!twice) {
    for (int64_t ox = 0; ox < g.ow; ++ox) at(ox);
    return;
  }
  const A e0 = tx.w0[2], e1 = tx.w1[2], d0 = tx.w0[1], d1 = tx.w1[1];  // locals: the stores cannot alias them
  const int64_t w = g.w;
  for (int64_t i = 1; i < w - 1; ++i) {
    const A l = (A)src[i - 1], m = (A)src[i], r = (A)src[i + 1];
    o[2 * i] = store<T>((C)(e0 * l + e1 * m));
    o[2 * i + 1] = store<T>((C)(d0 * m + d1 * r));
  }
  for (int64_t ox : {(int64_t)0, (int64_t)1, 2 * w - 2, 2 * w - 1}) at(ox);
}

template <typename T, typename A>
void linear_plane(const T* x, int64_t sy, int64_t sx, const UpsampleGeom& g, const Taps<A>& ty, const Taps<A>& tx,
                  bool twice, T* out, A* tmp) {
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    T* o = out + oy * g.ow;
    const T* r0 = x + ty.i0[oy] * sy;
    const A a = ty.w0[oy], b = ty.w1[oy];
    if constexpr (std::is_same_v<T, A>) {
      if (sx == 1 && a == A(1) && b == A(0) && ty.i1[oy] == ty.i0[oy]) {  // one dense source row (1-D): no blend
        linear_row<T, A, T>(r0, g, tx, twice, o);
        continue;
      }
    }
    // output rows with the same source rows and weights (an unchanged axis, or a steady ratio) share the blend
    if (oy == 0 || ty.i0[oy] != ty.i0[oy - 1] || ty.w1[oy] != ty.w1[oy - 1]) {
      const T* r1 = x + ty.i1[oy] * sy;
      if (sx == 1) {
        for (int64_t i = 0; i < g.w; ++i) tmp[i] = a * (A)load<T>(r0[i]) + b * (A)load<T>(r1[i]);
      } else {
        for (int64_t i = 0; i < g.w; ++i) tmp[i] = a * (A)load<T>(r0[i * sx]) + b * (A)load<T>(r1[i * sx]);
      }
    }
    linear_row<T, A, A>(tmp, g, tx, twice, o);
  }
}

template <typename T>
void nearest_plane(const T* x, int64_t sy, int64_t sx, const UpsampleGeom& g, const std::vector<int64_t>& iy,
                   const std::vector<int64_t>& ix, bool twice, T* out) {
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    T* o = out + oy * g.ow;
    if (oy > 0 && iy[oy] == iy[oy - 1]) {  // the same source row: copy the row just written
      std::memcpy(o, o - g.ow, (size_t)g.ow * sizeof(T));
      continue;
    }
    const T* r = x + iy[oy] * sy;
    if (twice && sx == 1) {  // out == 2 * in: each source element twice
      for (int64_t i = 0; i < g.w; ++i) o[2 * i] = o[2 * i + 1] = r[i];
    } else {
      for (int64_t ox = 0; ox < g.ow; ++ox) o[ox] = r[ix[ox] * sx];
    }
  }
}

template <typename T> StoragePtr up_fwd(const CpuStorage& s, UpsampleMode mode, const Layout& l, const UpsampleGeom& g) {
  using A = typename Acc<T>::type;
  const Taps<A> ty = make_taps<A>(mode, g.h, g.oh, g.sf_h, g.align_corners);
  const Taps<A> tx = make_taps<A>(mode, g.w, g.ow, g.sf_w, g.align_corners);
  const bool twice = mode == UpsampleMode::Nearest && g.ow == 2 * g.w;
  const bool doubled = mode == UpsampleMode::Linear && doubled_taps(tx, g.w, g.ow);
  const int64_t planes = g.n * g.c, opl = g.oh * g.ow;
  auto out = new_cpu(s.dtype(), planes * opl);
  const T* x = s.data<T>() + l.offset();
  const auto& st = l.stride();
  T* o = out->data<T>();
  parallel_for(planes, plane_grain(opl + g.oh * g.w), [&](int64_t b, int64_t e) {
    std::vector<A> tmp(mode == UpsampleMode::Linear ? g.w : 0);
    for (int64_t p = b; p < e; ++p) {
      const T* xp = x + (p / g.c) * st[0] + (p % g.c) * st[1];
      if (mode == UpsampleMode::Linear) linear_plane<T, A>(xp, st[2], st[3], g, ty, tx, doubled, o + p * opl, tmp.data());
      else nearest_plane<T>(xp, st[2], st[3], g, ty.i0, tx.i0, twice, o + p * opl);
    }
  });
  return out;
}

// The adjoint, per plane into dx (zeroed, h*w, the accumulation type): each gradient row is spread over
// its source columns, then that row is added into its (one or two) source rows.
template <typename T, typename A>
void bwd_plane(const T* gp, int64_t sy, int64_t sx, const UpsampleGeom& g, const Taps<A>& ty, const Taps<A>& tx,
               A* dx, A* tmp) {
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    std::fill(tmp, tmp + g.w, A(0));
    const T* r = gp + oy * sy;
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const A v = (A)load<T>(r[ox * sx]);
      tmp[tx.i0[ox]] += tx.w0[ox] * v;
      tmp[tx.i1[ox]] += tx.w1[ox] * v;
    }
    A* d0 = dx + ty.i0[oy] * g.w;
    A* d1 = dx + ty.i1[oy] * g.w;
    const A a = ty.w0[oy], b = ty.w1[oy];
    for (int64_t i = 0; i < g.w; ++i) d0[i] += a * tmp[i];
    if (b != A(0))
      for (int64_t i = 0; i < g.w; ++i) d1[i] += b * tmp[i];
  }
}

template <typename T>
StoragePtr up_bwd(const CpuStorage& s, UpsampleMode mode, const Layout& lg, const UpsampleGeom& g) {
  using A = typename Acc<T>::type;
  const Taps<A> ty = make_taps<A>(mode, g.h, g.oh, g.sf_h, g.align_corners);
  const Taps<A> tx = make_taps<A>(mode, g.w, g.ow, g.sf_w, g.align_corners);
  const int64_t planes = g.n * g.c, hw = g.h * g.w;
  const DType adt = std::is_same_v<A, T> ? s.dtype() : DType::F32;  // halves add up in float, round once
  auto dx = new_cpu(adt, planes * hw, /*zeroed=*/true);
  const T* gp = s.data<T>() + lg.offset();
  const auto& st = lg.stride();
  A* d = dx->data<A>();
  parallel_for(planes, plane_grain(g.oh * g.ow + g.oh * g.w), [&](int64_t b, int64_t e) {
    std::vector<A> tmp(g.w);
    for (int64_t p = b; p < e; ++p)
      bwd_plane<T, A>(gp + (p / g.c) * st[0] + (p % g.c) * st[1], st[2], st[3], g, ty, tx, d + p * hw, tmp.data());
  });
  if (adt == s.dtype()) return dx;
  return dx->to_dtype(Layout::contiguous({dx->numel()}), s.dtype());
}


StoragePtr upsample(const BackendStorage& x_, UpsampleMode mode, const Layout& l, const UpsampleGeom& g) {
  const CpuStorage& x = as_cpu(x_);
  const DType dt = x.dtype();
  switch (dt) {
    case DType::F32: return up_fwd<float>(x, mode, l, g);
    case DType::F64: return up_fwd<double>(x, mode, l, g);
    case DType::F16: return up_fwd<f16>(x, mode, l, g);
    case DType::BF16: return up_fwd<bf16>(x, mode, l, g);
    default: break;
  }
  EMBER_CHECK(false, DType, "[interpolate] expected a float tensor, got ", dtype_name(dt));
  return nullptr;
}

StoragePtr upsample_bwd(const BackendStorage& gy_, UpsampleMode mode, const Layout& lg, const UpsampleGeom& g) {
  const CpuStorage& gy = as_cpu(gy_);
  const DType dt = gy.dtype();
  switch (dt) {
    case DType::F32: return up_bwd<float>(gy, mode, lg, g);
    case DType::F64: return up_bwd<double>(gy, mode, lg, g);
    case DType::F16: return up_bwd<f16>(gy, mode, lg, g);
    case DType::BF16: return up_bwd<bf16>(gy, mode, lg, g);
    default: break;
  }
  EMBER_CHECK(false, DType, "[interpolate] expected a float gradient, got ", dtype_name(dt));
  return nullptr;
}

}  // namespace

void register_upsample() {
  Kernels<Upsample>::set(DeviceKind::Cpu, &upsample);
  Kernels<UpsampleBwd>::set(DeviceKind::Cpu, &upsample_bwd);
}

}  // namespace ember::cpu
