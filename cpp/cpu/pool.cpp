// Pooling on CPU: max (values, and torch's indices when asked), average and adaptive average over
// (n, c, h, w) planes, forward and backward, threaded over the planes. Every output row is a vertical
// pass over its window's input rows (along w, which the compiler vectorises) and then a horizontal pass
// over each output column's taps.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/cpu_storage.h"
#include "cpu/gemm.h"
#include "cpu/parallel.h"
#include "cpu/row_sums.h"
#include "families/pool.h"
#include "registry.h"

namespace ember::cpu {
namespace {

// One axis's windows: output o reads count[o] taps first[o], first[o] + step, ...; size[o] is its factor
// of the average's divisor.
struct Axis {
  std::vector<int64_t> first, count, size;
  int64_t step = 1;
};

Axis make_axis(PoolKind kind, int64_t n, int64_t o, int64_t k, int64_t s, int64_t p, int64_t d, bool include_pad) {
  Axis a;
  a.first.resize(o), a.count.resize(o), a.size.resize(o);
  a.step = kind == PoolKind::Max ? d : 1;
  for (int64_t i = 0; i < o; ++i) {
    if (kind == PoolKind::AdaptiveAvg) {  // torch's windows [floor(i n / o), ceil((i + 1) n / o))
      const int64_t st = i * n / o, en = ((i + 1) * n + o - 1) / o;
      a.first[i] = st, a.count[i] = a.size[i] = en - st;
    } else if (kind == PoolKind::Max) {  // the first tap inside the input, as torch steps over the padding
      const int64_t st = i * s - p, end = std::min(st + (k - 1) * d + 1, n);
      const int64_t f = st < 0 ? st + (-st + d - 1) / d * d : st;
      a.first[i] = f, a.count[i] = f < end ? (end - f + d - 1) / d : 0, a.size[i] = 1;
    } else {  // a ceil_mode window's part past the right padding never counts
      const int64_t st = i * s - p, en = std::min(st + k, n + p);
      const int64_t lo = std::max<int64_t>(st, 0), hi = std::min(en, n);
      a.first[i] = lo, a.count[i] = std::max<int64_t>(hi - lo, 0), a.size[i] = include_pad ? en - st : hi - lo;
    }
  }
  return a;
}

inline int64_t plane_grain(int64_t work) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(work, 1)); }

// The input of one plane: element (y, x) at x[y * sy + x * sx].
template <typename T> struct Plane {
  const T* p;
  int64_t sy, sx;
  const T* row(int64_t y) const { return p + y * sy; }
};

// The outputs o in [0, n_out) whose tap at offset `off` reads an input position: o * s - p + off in [0, n_in).
inline void valid_range(int64_t n_in, int64_t n_out, int64_t s, int64_t p, int64_t off, int64_t& lo, int64_t& hi) {
  const int64_t first = p - off, last = n_in - 1 + p - off;  // o * s in [first, last]
  lo = first <= 0 ? 0 : (first + s - 1) / s;
  hi = last < 0 ? 0 : std::min(n_out, last / s + 1);
  lo = std::min(lo, hi);
}

// The maxima of one row's windows, tap by tap over all the outputs (vectorised; strided reads when the
// stride is > 1), from the row of column maxima (or the one input row) `tv` into `acc`.
template <typename A> void max_taps(const A* tv, const PoolGeom& g, A* acc) {
  std::fill(acc, acc + g.ow, -std::numeric_limits<A>::infinity());
  for (int64_t j = 0; j < g.kw; ++j) {
    int64_t lo, hi;
    valid_range(g.w, g.ow, g.sw, g.pw, j * g.dw, lo, hi);
    const int64_t off = j * g.dw - g.pw;
    for (int64_t ox = lo; ox < hi; ++ox) {
      const A v = tv[ox * g.sw + off];
      const bool take = (v > acc[ox]) | (v != v);
      acc[ox] = take ? v : acc[ox];
    }
  }
}

// Max pooling of one dense row in side-by-side windows of K taps (stride K, no padding or dilation: the
// 1-D pools of audio front-ends), window by window: the compiler turns the K interleaved reads into
// vector shuffles, where tap-by-tap passes over the outputs made K strided passes. A last window that
// ceil_mode leaves partial takes the taps it has.
template <typename A> inline A pick_max(A v, A m) { return (v > m) | (v != v) ? v : m; }
template <typename A, size_t... J> inline A window_max(const A* p, std::index_sequence<J...>) {
  A m = p[0];
  ((m = pick_max(p[J + 1], m)), ...);  // unrolled taps: GCC vectorises no loop nested in the outputs' loop
  return m;
}
template <typename A, int K> void max_windows(const A* r, const PoolGeom& g, A* o) {
  const int64_t ow = g.ow, w = g.w, full = std::min(ow, w / K);  // locals: the stores cannot alias them
  for (int64_t ox = 0; ox < full; ++ox) o[ox] = window_max(r + ox * K, std::make_index_sequence<K - 1>{});
  for (int64_t ox = full; ox < ow; ++ox) {
    A m = -std::numeric_limits<A>::infinity();
    for (int64_t x = ox * K; x < std::min<int64_t>(ox * K + K, w); ++x) m = pick_max(r[x], m);
    o[ox] = m;
  }
}

// A window's tap number beside each column's running maximum: as wide as the value, so the vertical
// pass's compare-and-select vectorises over both.
template <typename A> using TapNo = std::conditional_t<sizeof(A) == 4, int32_t, int64_t>;

// A float's position in the order max pooling uses, as an integer of its width: -0.0 and 0.0 equal, every
// NaN above +inf (a NaN always wins). Integer compares and selects vectorise where float ones with NaNs
// would not.
template <typename A> inline TapNo<A> order_key(A v) {
  using K = TapNo<A>;
  K b;
  std::memcpy(&b, &v, sizeof b);
  const K mag = b & std::numeric_limits<K>::max();
  const K inf = sizeof(A) == 4 ? (K)0x7f800000 : (K)0x7ff0000000000000LL;
  const K neg = b >> (8 * sizeof(K) - 1);  // all ones for a negative sign
  const K k = (mag ^ neg) - neg;           // -mag when negative
  const K nan = -(K)(mag > inf);
  return (std::numeric_limits<K>::max() & nan) | (k & ~nan);
}

// max_taps with torch's indices, from the vertical pass's keys tk and tap numbers tj: per output the best
// key, its row's tap number and its column, tap by tap over all the outputs (lane masks). The first
// maximum in row-major order wins (a lower row on a tie), and the last NaN.
template <typename A>
void max_taps_idx(const TapNo<A>* tk, const TapNo<A>* tj, const PoolGeom& g, const Axis& ax, TapNo<A>* bk,
                  TapNo<A>* ar, TapNo<A>* ac) {
  using J = TapNo<A>;
  const J nan_key = std::numeric_limits<J>::max();
  std::fill(bk, bk + g.ow, order_key<A>(-std::numeric_limits<A>::infinity()));
  std::fill(ar, ar + g.ow, J(0));
  for (int64_t ox = 0; ox < g.ow; ++ox) ac[ox] = (J)ax.first[ox];  // torch's index when no tap beats -inf
  for (int64_t j = 0; j < g.kw; ++j) {
    int64_t lo, hi;
    valid_range(g.w, g.ow, g.sw, g.pw, j * g.dw, lo, hi);
    J xc = (J)(lo * g.sw + j * g.dw - g.pw);  // the column, in the lanes' width
    const J step = (J)g.sw;
    for (int64_t ox = lo; ox < hi; ++ox, xc += step) {
      const J k = tk[xc], r = tj[xc], b = bk[ox], br = ar[ox];
      const J nk = -(J)(k == nan_key);  // masks (all ones or zero): no branch on the data
      const J tie = (nk & -(J)(r >= br)) | (~nk & -(J)(r < br));
      const J m = -(J)(k > b) | (-(J)(k == b) & tie);
      bk[ox] = (k & m) | (b & ~m);
      ar[ox] = (r & m) | (br & ~m);
      ac[ox] = (xc & m) | (ac[ox] & ~m);
    }
  }
}

// Max pooling of one plane. The vertical pass keeps, per column, the window rows' maximum and the tap
// of the first row holding it (the last NaN); the horizontal pass then picks among the columns the first
// maximum in row-major order (a lower row wins a tie; a NaN wins, the last one in row-major order):
// torch's index. Without indices it runs tap by tap over all the outputs (vectorised). Selects are
// written with bitwise logic so that they compile to masks, not branches on the data.
template <typename T, typename A, bool kIdx>
void max_plane(Plane<T> in, const PoolGeom& g, const Axis& ay, const Axis& ax, T* out, int64_t* ids, A* tv, A* acc,
               TapNo<A>* tk, TapNo<A>* tj, TapNo<A>* bk, TapNo<A>* ar, TapNo<A>* ac) {
  using J = TapNo<A>;
  const A ninf = -std::numeric_limits<A>::infinity();
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    const int64_t y0 = ay.first[oy], ny = ay.count[oy];
    T* o = out + oy * g.ow;
    if constexpr (std::is_same_v<T, A>) {
      if (!kIdx && ny == 1 && in.sx == 1) {  // one dense input row (1-D pooling): its taps straight into the output
        if (g.pw == 0 && g.dw == 1 && g.sw == g.kw && g.kw >= 2 && g.kw <= 4) {
          if (g.kw == 2) max_windows<A, 2>(in.row(y0), g, o);
          else if (g.kw == 3) max_windows<A, 3>(in.row(y0), g, o);
          else max_windows<A, 4>(in.row(y0), g, o);
        } else {
          max_taps<A>(in.row(y0), g, o);
        }
        continue;
      }
    }
    if (kIdx) {
      // vertical pass on keys: a later row wins only when larger (or a NaN)
      std::fill(tk, tk + g.w, order_key<A>(ninf));
      std::fill(tj, tj + g.w, J(0));
      for (int64_t j = 0; j < ny; ++j) {
        const T* r = in.row(y0 + j * ay.step);
        const J jj = (J)j, nan_key = std::numeric_limits<J>::max();
        const int64_t w = g.w, sx = in.sx;
        for (int64_t x = 0; x < w; ++x) {
          const J k = order_key<A>((A)load<T>(r[x * sx]));
          const J m = -(J)(k > tk[x]) | -(J)(k == nan_key);
          tk[x] = (k & m) | (tk[x] & ~m);
          tj[x] = (jj & m) | (tj[x] & ~m);
        }
      }
      max_taps_idx<A>(tk, tj, g, ax, bk, ar, ac);
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const int64_t row = y0 + (int64_t)ar[ox] * ay.step, col = ac[ox];
        o[ox] = ny > 0 && ax.count[ox] > 0 ? in.row(row)[col * in.sx] : store<T>((typename Acc<T>::type)ninf);
        ids[oy * g.ow + ox] = row * g.w + col;
      }
      continue;
    }
    std::fill(tv, tv + g.w, ninf);
    for (int64_t j = 0; j < ny; ++j) {
      const T* r = in.row(y0 + j * ay.step);
      if (in.sx == 1) {
        for (int64_t x = 0; x < g.w; ++x) {
          const A v = (A)load<T>(r[x]);
          const bool take = (v > tv[x]) | (v != v);
          tv[x] = take ? v : tv[x];
        }
      } else {
        for (int64_t x = 0; x < g.w; ++x) {
          const A v = (A)load<T>(r[x * in.sx]);
          const bool take = (v > tv[x]) | (v != v);
          tv[x] = take ? v : tv[x];
        }
      }
    }
    if constexpr (std::is_same_v<T, A>) {
      max_taps<A>(tv, g, o);
    } else {
      max_taps<A>(tv, g, acc);
      for (int64_t ox = 0; ox < g.ow; ++ox) o[ox] = store<T>((typename Acc<T>::type)acc[ox]);
    }
  }
}

// Average (and adaptive average) pooling of one plane: column sums over the window's rows, then each
// output column's sum of them (tap by tap over all the outputs for Avg, vectorised; per output for the
// adaptive windows, which vary) over the product of the two axes' divisor factors (or the override).
template <typename T, typename A>
void avg_plane(PoolKind kind, Plane<T> in, const PoolGeom& g, const Axis& ay, const Axis& ax, T* out, A* ts,
               A* acc) {
  if (g.oh == 1 && g.ow == 1 && ay.count[0] == g.h && ax.count[0] == g.w && in.sx == 1 && in.sy == g.w) {
    // one window over a dense plane (global pooling, a ResNet head): one sum in eight independent lanes
    const int64_t n = g.h * g.w;
    A lane[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int k = 0; k < 8; ++k) lane[k] += (A)load<T>(in.p[i + k]);
    A s = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    for (; i < n; ++i) s += (A)load<T>(in.p[i]);
    const A div = g.divisor > 0 ? A(g.divisor) : A(ay.size[0] * ax.size[0]);
    out[0] = store<T>((typename Acc<T>::type)(s / div));
    return;
  }
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    const int64_t y0 = ay.first[oy], ny = ay.count[oy];
    std::fill(ts, ts + g.w, A(0));
    for (int64_t j = 0; j < ny; ++j) {
      const T* r = in.row(y0 + j);
      if (in.sx == 1) {
        for (int64_t x = 0; x < g.w; ++x) ts[x] += (A)load<T>(r[x]);
      } else {
        for (int64_t x = 0; x < g.w; ++x) ts[x] += (A)load<T>(r[x * in.sx]);
      }
    }
    std::fill(acc, acc + g.ow, A(0));
    if (kind == PoolKind::Avg) {
      for (int64_t j = 0; j < g.kw; ++j) {
        int64_t lo, hi;
        valid_range(g.w, g.ow, g.sw, g.pw, j, lo, hi);
        const int64_t off = j - g.pw;
        for (int64_t ox = lo; ox < hi; ++ox) acc[ox] += ts[ox * g.sw + off];
      }
    } else {
      for (int64_t ox = 0; ox < g.ow; ++ox)
        for (int64_t j = 0; j < ax.count[ox]; ++j) acc[ox] += ts[ax.first[ox] + j];
    }
    T* o = out + oy * g.ow;
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const A div = g.divisor > 0 ? A(g.divisor) : A(ay.size[oy] * ax.size[ox]);
      o[ox] = store<T>((typename Acc<T>::type)(acc[ox] / div));
    }
  }
}

// One window over each whole plane (global pooling).
inline bool global_window(const PoolGeom& g, const Axis& ay, const Axis& ax) {
  return g.oh == 1 && g.ow == 1 && ay.count[0] == g.h && ax.count[0] == g.w;
}

// Global average pooling of dense planes (plane stride ps >= h * w): each plane's sum (short rows, see
// cpu/row_sums.h), threaded over blocks of planes, then divided.
template <typename T>
void global_avg(const T* x, int64_t ns, int64_t ps, const PoolGeom& g, T div, T* o) {
  const int64_t hw = g.h * g.w;
  parallel_for(g.n * g.c, std::max<int64_t>(64, 65536 / std::max<int64_t>(1, hw)), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e;) {
      const int64_t n = p / g.c, end = std::min(e, (n + 1) * g.c);
      short_row_sums_dense(x + n * ns + (p - n * g.c) * ps, ps, end - p, hw, o + p, 1);
      for (int64_t q = p; q < end; ++q) o[q] = o[q] / div;
      p = end;
    }
  });
}

template <typename T>
std::tuple<StoragePtr, StoragePtr> pool_fwd(const CpuStorage& s, PoolKind kind, const Layout& l, const PoolGeom& g,
                                            bool with_indices) {
  using A = typename Acc<T>::type;
  // the picks keep columns in lanes as wide as the values: int32 beside float
  EMBER_CHECK(!with_indices || g.w + g.dw * g.kw < (int64_t)std::numeric_limits<TapNo<A>>::max(), Unsupported,
              "[max_pool2d] indices of rows longer than 2^31 - 1 elements are not supported on cpu for ",
              dtype_name(s.dtype()));
  const Axis ay = make_axis(kind, g.h, g.oh, g.kh, g.sh, g.ph, g.dh, g.count_include_pad);
  const Axis ax = make_axis(kind, g.w, g.ow, g.kw, g.sw, g.pw, g.dw, g.count_include_pad);
  const int64_t planes = g.n * g.c, opl = g.oh * g.ow;
  auto out = new_cpu(s.dtype(), planes * opl);
  CpuStoragePtr ids = with_indices ? new_cpu(DType::I64, planes * opl) : nullptr;
  const T* x = s.data<T>() + l.offset();
  const auto& st = l.stride();
  T* o = out->data<T>();
  int64_t* ip = ids ? ids->data<int64_t>() : nullptr;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (kind != PoolKind::Max && global_window(g, ay, ax) && st[3] == 1 && st[2] == g.w && st[1] >= g.h * g.w) {
      const T div = g.divisor > 0 ? T(g.divisor) : T(ay.size[0] * ax.size[0]);
      global_avg<T>(x, st[0], st[1], g, div, o);
      return {out, ids};
    }
  }
  const int64_t work = g.h * g.w + g.oh * g.w * g.kh + opl * g.kw;  // per plane: reads, vertical and horizontal taps
  parallel_for(planes, plane_grain(work), [&](int64_t b, int64_t e) {
    std::vector<A> tv(g.w), acc(g.ow);
    const int64_t iw = with_indices ? g.w : 0, iow = with_indices ? g.ow : 0;
    std::vector<TapNo<A>> tk(iw), tj(iw), bk(iow), ar(iow), ac(iow);
    for (int64_t p = b; p < e; ++p) {
      const Plane<T> in{x + (p / g.c) * st[0] + (p % g.c) * st[1], st[2], st[3]};
      T* op = o + p * opl;
      if (kind != PoolKind::Max) avg_plane<T, A>(kind, in, g, ay, ax, op, tv.data(), acc.data());
      else if (with_indices) max_plane<T, A, true>(in, g, ay, ax, op, ip + p * opl, tv.data(), acc.data(), tk.data(), tj.data(),
                                             bk.data(), ar.data(), ac.data());
      else max_plane<T, A, false>(in, g, ay, ax, op, nullptr, tv.data(), acc.data(), nullptr, nullptr, nullptr, nullptr,
                                              nullptr);
    }
  });
  return {out, ids};
}

// The gradient of one plane into dx (zeroed, h*w, in the accumulation type). Max adds each output's
// gradient at its index (one outside the plane adds nowhere); the averages spread each output's share
// over its window's columns, then add that row into the window's rows.
template <typename T, typename A>
void bwd_plane(PoolKind kind, Plane<T> gr, const int64_t* ids, const PoolGeom& g, const Axis& ay, const Axis& ax,
               A* dx, A* tmp) {
  const int64_t hw = g.h * g.w;
  if (kind == PoolKind::Max) {
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const int64_t i = ids[oy * g.ow + ox];
        if ((uint64_t)i < (uint64_t)hw) dx[i] += (A)load<T>(gr.row(oy)[ox * gr.sx]);
      }
    return;
  }
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    std::fill(tmp, tmp + g.w, A(0));
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      const A div = g.divisor > 0 ? A(g.divisor) : A(ay.size[oy] * ax.size[ox]);
      const A v = (A)load<T>(gr.row(oy)[ox * gr.sx]) / div;
      const int64_t x0 = ax.first[ox], nx = ax.count[ox];
      for (int64_t j = 0; j < nx; ++j) tmp[x0 + j] += v;
    }
    for (int64_t j = 0; j < ay.count[oy]; ++j) {
      A* r = dx + (ay.first[oy] + j) * g.w;
      for (int64_t x = 0; x < g.w; ++x) r[x] += tmp[x];
    }
  }
}

template <typename T>
StoragePtr pool_bwd(const CpuStorage& s, PoolKind kind, const Layout& lg, const BackendStorage* ids,
                    const PoolGeom& g) {
  using A = typename Acc<T>::type;
  const Axis ay = make_axis(kind, g.h, g.oh, g.kh, g.sh, g.ph, g.dh, g.count_include_pad);
  const Axis ax = make_axis(kind, g.w, g.ow, g.kw, g.sw, g.pw, g.dw, g.count_include_pad);
  const int64_t planes = g.n * g.c, hw = g.h * g.w, opl = g.oh * g.ow;
  // halves accumulate in float (overlapping windows add up) and round once
  const DType adt = std::is_same_v<A, T> ? s.dtype() : DType::F32;
  // One window over each whole plane (a global average pool): every plane is one fill, nothing to zero.
  const bool global = kind != PoolKind::Max && opl == 1 && ay.first[0] == 0 && ay.count[0] == g.h &&
                      ax.first[0] == 0 && ax.count[0] == g.w;
  auto dx = new_cpu(adt, planes * hw, /*zeroed=*/!global);
  const T* gp = s.data<T>() + lg.offset();
  const auto& st = lg.stride();
  const int64_t* ip = ids ? as_cpu(*ids).data<int64_t>() : nullptr;
  A* d = dx->data<A>();
  if (global) {
    const A div = g.divisor > 0 ? A(g.divisor) : A(ay.size[0] * ax.size[0]);
    parallel_for(planes, plane_grain(hw), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p)
        std::fill(d + p * hw, d + (p + 1) * hw, (A)load<T>(gp[(p / g.c) * st[0] + (p % g.c) * st[1]]) / div);
    });
  } else {
    parallel_for(planes, plane_grain(hw + opl * std::max<int64_t>(g.kw, 1)), [&](int64_t b, int64_t e) {
      std::vector<A> tmp(g.w);
      for (int64_t p = b; p < e; ++p) {
        const Plane<T> gr{gp + (p / g.c) * st[0] + (p % g.c) * st[1], st[2], st[3]};
        bwd_plane<T, A>(kind, gr, ip ? ip + p * opl : nullptr, g, ay, ax, d + p * hw, tmp.data());
      }
    });
  }
  if (adt == s.dtype()) return dx;
  return dx->to_dtype(Layout::contiguous({dx->numel()}), s.dtype());
}


std::tuple<StoragePtr, StoragePtr> pool2d(const BackendStorage& x_, PoolKind kind, const Layout& l, const PoolGeom& g,
                                          bool with_indices) {
  const CpuStorage& x = as_cpu(x_);
  const DType dt = x.dtype();
  switch (dt) {
    case DType::F32: return pool_fwd<float>(x, kind, l, g, with_indices);
    case DType::F64: return pool_fwd<double>(x, kind, l, g, with_indices);
    case DType::F16: return pool_fwd<f16>(x, kind, l, g, with_indices);
    case DType::BF16: return pool_fwd<bf16>(x, kind, l, g, with_indices);
    default: break;
  }
  EMBER_CHECK(false, DType, "[", kPoolNames[(int)kind], "] expected a float tensor, got ", dtype_name(dt));
  return {};
}

StoragePtr pool2d_bwd(const BackendStorage& gy_, PoolKind kind, const Layout& lg, const BackendStorage* ids,
                      const PoolGeom& g) {
  const CpuStorage& gy = as_cpu(gy_);
  const DType dt = gy.dtype();
  switch (dt) {
    case DType::F32: return pool_bwd<float>(gy, kind, lg, ids, g);
    case DType::F64: return pool_bwd<double>(gy, kind, lg, ids, g);
    case DType::F16: return pool_bwd<f16>(gy, kind, lg, ids, g);
    case DType::BF16: return pool_bwd<bf16>(gy, kind, lg, ids, g);
    default: break;
  }
  EMBER_CHECK(false, DType, "[", kPoolNames[(int)kind], "] expected a float gradient, got ", dtype_name(dt));
  return nullptr;
}

}  // namespace

void register_pool() {
  Kernels<Pool2d>::set(DeviceKind::Cpu, &pool2d);
  Kernels<Pool2dBwd>::set(DeviceKind::Cpu, &pool2d_bwd);
}

}  // namespace ember::cpu
