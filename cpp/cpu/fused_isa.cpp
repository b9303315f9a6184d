// Per-ISA row kernels and attention micro-kernels for the fused ops (see fused.h), written with GCC
// vector extensions so one source compiles to SSE2 / AVX2 / AVX-512 widths (EMBER_ISA picks the name).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <immintrin.h>
#define EMBER_FUSED_X86 1
#endif

#include "cpu/fused.h"
#include "dtype.h"

#ifndef EMBER_ISA
#define EMBER_ISA base
#endif
#define EMBER_FCAT2(a, b) a##b
#define EMBER_FCAT(a, b) EMBER_FCAT2(a, b)

namespace ember::cpu {
// Everything below has internal linkage so the three ISA copies never get merged by the linker.
namespace {

#include "cpu/simd/vmath.h"
#include "cpu/fused_vec.inc"
#include "cpu/functors.h"  // the activations' derivatives (act_bwd_k)

// Walks a row in blocks so long-row sums are combined in double (1M-column rows stay accurate).
constexpr int64_t kBlk = 4096;

// Short rows go through a forward kernel's passes a group at a time: each pass runs over all the
// group's rows before the next pass starts. A row's passes are chained by its reductions (max -> hmax
// -> exp pass -> hsum -> 1/sum): with 128 columns that chain is as long as the row's arithmetic, and
// the next row of the same pass is independent work the core overlaps with it. The group's rows stay
// in L1 between passes. Groups stay small: a group's first pass is mostly loads, and with 32 rows
// (measured, 32768x128 bf16) it waited on memory in bursts; 4 rows was best, 2-8 within a few %.
// Per-row arithmetic is the same in any group, so a row's result does not depend on its neighbours
// (or on the batch size).
constexpr int64_t kGroupBytes1 = int64_t(24) << 10, kMaxGroup = 4;
static inline int64_t row_group(int64_t n, int64_t bytes_per_col) {
  if (n > kBlk) return 1;
  return std::clamp<int64_t>(kGroupBytes1 / std::max<int64_t>(n * bytes_per_col, 1), 1, kMaxGroup);
}

// Calls f(std::true_type{}) or f(std::false_type{}): a runtime flag picks one of two instantiations,
// so the flag is a constant inside the row loops.
template <typename F> static inline void with_flag(bool b, F&& f) {
  if (b) f(std::true_type{});
  else f(std::false_type{});
}

// A row kernel's pass over row r prefetches into L2, at its own offsets, the row a later pass will read
// (prefetch_l2 below): for short rows the row two groups on (one group ahead was slower from memory,
// more made no difference), for long rows the next one. Past the
// last row, row r itself: a prefetch of what is being read does nothing, and is cheaper than a test.
template <typename T> static inline const T* row_ahead(const void* x, int64_t ldx, int64_t r, int64_t ahead,
                                                      int64_t rows) {
  return (const T*)x + (r + ahead < rows ? r + ahead : r) * ldx;
}
// Prefetches element i of pf into L2. The address is formed as an integer: past a short last block it
// may lie beyond the buffer (a prefetch never faults, but pointer arithmetic there would be out of range).
template <typename T> static inline void prefetch_l2(const T* pf, int64_t i) {
  __builtin_prefetch((const void*)((uintptr_t)pf + (uintptr_t)i * sizeof(T)), 0, 2);
}

// ============================ softmax / log_softmax ============================================
// The largest element of a row; callers treat a NaN max like any other (its row's sum becomes NaN).
template <typename T> static inline C_t<T> row_max(const T* x, int64_t n) {
  using C = C_t<T>;
  using V = Vec<C>;
  constexpr int L = kL<C>;
  if constexpr (sizeof(T) == 2) {
    // f16/bf16: on the bits, with no widening. Both formats are sign-magnitude: among non-negative
    // values the largest bits read as int16 belong to the largest value, among negative ones the
    // smallest bits read as uint16. One integer max and one min per vector of 16-bit elements, where
    // the widened compare took two shuffles and two float maxes for the same elements. NaN bits lie
    // beyond inf's, so a NaN can come out as the max: the row is NaN either way.
    using S = I16V;
    using U = U16V;
    constexpr int H = kVB / 2;
    S s0 = S{} + (int16_t)INT16_MIN, s1 = s0;
    U u0 = U{} + (uint16_t)0xffff, u1 = u0;
    int64_t i = 0;
    for (; i + 2 * H <= n; i += 2 * H) {
      U a, b;
      __builtin_memcpy(&a, x + i, sizeof a);
      __builtin_memcpy(&b, x + i + H, sizeof b);
      s0 = (S)a > s0 ? (S)a : s0;
      s1 = (S)b > s1 ? (S)b : s1;
      u0 = a < u0 ? a : u0;
      u1 = b < u1 ? b : u1;
    }
    int16_t sm = hmax_i16(s0 > s1 ? s0 : s1);
    uint16_t um = hmin_u16(u0 < u1 ? u0 : u1);
    for (; i < n; ++i) {
      const uint16_t b = x[i].bits;
      sm = std::max(sm, (int16_t)b);
      um = std::min(um, b);
    }
    return load(T{sm >= 0 ? (uint16_t)sm : um});
  } else {
    V m0 = vbc(-kInf<C>), m1 = m0, m2 = m0, m3 = m0;  // 4 accumulators hide the compare latency
    int64_t i = 0;
    for (; i + 4 * L <= n; i += 4 * L) {
      V a, b, c, d;
      vload2(x + i, a, b);
      vload2(x + i + 2 * L, c, d);
      m0 = vmax(m0, a);
      m1 = vmax(m1, b);
      m2 = vmax(m2, c);
      m3 = vmax(m3, d);
    }
    for (; i + L <= n; i += L) m0 = vmax(m0, vload(x + i));
    if (i < n) m1 = vmax(m1, vload_n(x + i, n - i, -kInf<C>));
    return hmax(vmax(vmax(m0, m1), vmax(m2, m3)));
  }
}

// exp(x - m) for softmax rows of T (f16/bf16 results need less of the exp polynomial).
template <typename T, typename V> static inline V exp_row(V d) {
  if constexpr (sizeof(T) == 2) return vexp_neg_half(d);
  else return vexp_neg(d);
}

// A row's sum in blocks of kBlk (a multiple of 2L: pairs never straddle blocks), each block's two
// vector accumulators combined in double, so 1M-column rows stay accurate. pair(j, s0, s1) adds the
// pair at j; part(j, c, s0) adds the c <= L elements at j (a block's tail).
template <typename C, typename Pair, typename Part>
static inline double block_sum(int64_t n, Pair&& pair, Part&& part) {
  using V = Vec<C>;
  constexpr int L = kL<C>;
  double total = 0;
  for (int64_t b0 = 0; b0 < n; b0 += kBlk) {
    const int64_t b1 = std::min(n, b0 + kBlk);
    V s0 = V{}, s1 = V{};
    int64_t j = b0;
    for (; j + 2 * L <= b1; j += 2 * L) pair(j, s0, s1);
    for (; j < b1; j += L) part(j, std::min<int64_t>(L, b1 - j), s0);
    total += (double)hsum(s0 + s1);
  }
  return total;
}

// f16/bf16 softmax rows (not log_softmax) whose max m has |m| < 8192 take e = 2^(x*log2e - c), with
// c = m*log2e rounded to float: one FMA where (x - m)*log2e took a subtract and a multiply. Below 8192,
// c is within 2^-11 of m*log2e; that error scales every e of the row (of the block) alike, so the
// normalisation cancels it. The row's exps are then e^(x - s) for the shift s = c / log2e, which the
// long-row path rescales blocks by. The max element's e is 2^(m*log2e - c), within 2^-21 of 1 for
// |m| < 8, so a float output could exceed 1 by an ulp (a one-element row gave 1 + 2^-23): float
// and double rows subtract first, as do larger maxima, log_softmax (it needs the exact max) and ISAs
// without an FMA (x*log2e would be rounded: up to 2^-11 off near 8192).
template <typename T, bool keep> static inline bool fma_form(C_t<T> m) {
  return keep && kHasFma && sizeof(T) == 2 && std::fabs(m) < 8192.0f;
}
template <typename T, bool keep> static inline double exp_shift(C_t<T> m) {
  if (fma_form<T, keep>(m)) return (double)(m * kLog2eF) / (double)kLog2eF;
  return (double)m;
}

// sum(exp(x - s)) over n <= kBlk elements (a short row, or a block of a long one), s = exp_shift(mx);
// softmax also keeps e = exp(x - s) in `e` (vload2 order below pair_end, like y). Each pair prefetches
// its offset from pf (the next block or rows, or x again when there is none; a line twice where a pair
// is shorter than a line, one op cheaper than a test).
template <typename T, bool keep>
static inline double exp_sum(const T* x, int64_t n, C_t<T> mx, C_t<T>* e, const T* pf) {
  using C = C_t<T>;
  using V = Vec<C>;
  constexpr int L = kL<C>;
  double total = 0;
  with_flag(fma_form<T, keep>(mx), [&](auto fm) {
    const V vm = vbc(mx), vnc = vbc((C)(-(mx * (C)kLog2eF))), vl = vbc((C)kLog2eF);
    auto ex = [&](V a) {
      if constexpr (decltype(fm)::value && sizeof(T) == 2) return vexp2_neg<4>(vfma(a, vl, vnc));
      else return exp_row<T>(a - vm);
    };
    V s0{}, s1{};
    int64_t j = 0;
    for (; j + 2 * L <= n; j += 2 * L) {
      prefetch_l2(pf, j);
      V a, b;
      vload2(x + j, a, b);
      const V e0 = ex(a), e1 = ex(b);
      if (keep) vst(e + j, e0), vst(e + j + L, e1);
      s0 += e0;
      s1 += e1;
    }
    for (; j < n; j += L) {
      const int64_t c = std::min<int64_t>(L, n - j);
      const V e0 = ex(c == L ? vload(x + j) : vload_n(x + j, c, -kInf<C>));
      if (keep) {
        C tmp[L];
        vst(tmp, e0);
        for (int64_t t = 0; t < c; ++t) e[j + t] = tmp[t];
      }
      s0 += e0;
    }
    total = (double)hsum(s0 + s1);
  });
  return total;
}

// One log_softmax row: (x - max) - log(sum), subtracting in two steps keeps log(sum) when max is huge.
template <typename T>
static inline void log_softmax_row_out(const T* xr, T* yr, int64_t n, C_t<T> mx, double total, bool nt) {
  using C = C_t<T>;
  using V = Vec<C>;
  constexpr int L = kL<C>;
  const V vm = vbc(mx), sub = vbc((C)std::log(total));
  const int64_t n2 = pair_end<C>(n);
  int64_t i = 0;
  for (; i < n2; i += 2 * L) {
    V a, b;
    vload2(xr + i, a, b);
    vstore2(yr + i, (a - vm) - sub, (b - vm) - sub, nt);
  }
  for (; i + L <= n; i += L) vstore_o(yr + i, (vload(xr + i) - vm) - sub, nt);
  if (i < n) vstore_n(yr + i, (vload_n(xr + i, n - i, 0) - vm) - sub, n - i);
}

// softmax outputs y[i] = e[i] * inv for i in [i0, i1): vector pairs below p1 (vload2 order, as e was
// stored), single vectors and scalars after. no_nan (a finite, positive sum: every e and e * inv is
// finite) takes the cheaper rounding.
template <typename T>
static inline void softmax_out(const C_t<T>* e, T* yr, int64_t i0, int64_t i1, int64_t p1, Vec<C_t<T>> inv,
                               bool no_nan, bool nt) {
  constexpr int L = kL<C_t<T>>;
  int64_t i = i0;
  if (no_nan)
    for (; i < p1; i += 2 * L) vstore2_no_nan(yr + i, vld(e + i) * inv, vld(e + i + L) * inv, nt);
  for (; i < p1; i += 2 * L) vstore2(yr + i, vld(e + i) * inv, vld(e + i + L) * inv, nt);
  for (; i + L <= i1; i += L) vstore_o(yr + i, vld(e + i) * inv, nt);
  for (; i < i1; ++i) yr[i] = store<T>(e[i] * inv[0]);
}

// Rows longer than kBlk, a block at a time: the block's max, then its exps against that max while the
// block is still in L1, so the row comes from memory once (a whole-row max pass first streamed the
// row from memory with the core idle). With
// block b's exps taken against m_b (e^(x - s_b) for exp_sum's shift s_b, m_b up to rounding) and their
// sum t_b, the row's shift is M = max s_b and its sum total = sum t_b e^(s_b - M); softmax scales
// block b's exps by e^(s_b - M) / total. A block of -inf contributes exps of 0 (its
// x - m_b would be NaN); NaN and +inf reach total as NaN, and an all -inf row gives NaN, as before.
template <typename T, bool log>
static void softmax_fwd_long(const T* x, int64_t ldx, T* y, int64_t rows, int64_t n, bool nt) {
  using C = C_t<T>;
  constexpr int L = kL<C>;
  const int64_t nb = (n + kBlk - 1) / kBlk, n2 = pair_end<C>(n);
  const bool in_y = std::is_same_v<T, C> && !nt;
  // Scratch: the blocks' sums and shifts (doubles, padded to 64 bytes), then a float row of exps
  // unless they are kept in y (or not kept: log_softmax).
  const int64_t nd = (2 * nb + 7) / 8 * 8, e_len = (log || in_y) ? 0 : n + L;
  double* bsum = reinterpret_cast<double*>(
      scratch_of<C>(Scratch::SoftmaxRows, nd * (int64_t)(sizeof(double) / sizeof(C)) + e_len));
  double* bmax = bsum + nb;
  C* scratch_e = reinterpret_cast<C*>(bsum + nd);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * ldx;
    T* yr = y + r * n;
    C* e = log ? nullptr : in_y ? reinterpret_cast<C*>(yr) : scratch_e;
    double M = -kInf<double>;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t b0 = b * kBlk, len = std::min(kBlk, n - b0);
      const C m = row_max(xr + b0, len);
      bmax[b] = exp_shift<T, !log>(m);
      if (m == -kInf<C>) {
        bsum[b] = 0;
        if (!log) std::fill(e + b0, e + b0 + len, (C)0);
        continue;
      }
      // While this block's exps are computed, the next block (or the next row's first) is fetched.
      const T* next = b + 1 < nb ? xr + b0 + kBlk : row_ahead<T>(x, ldx, r, 1, rows);
      bsum[b] = exp_sum<T, !log>(xr + b0, len, m, log ? nullptr : e + b0, next);
      M = bmax[b] > M ? bmax[b] : M;  // a NaN max never wins; its block's NaN sum reaches total
    }
    double total = 0;
    for (int64_t b = 0; b < nb; ++b)
      if (bsum[b] != 0) total += bsum[b] * std::exp(bmax[b] - M);
    if (log) {
      log_softmax_row_out(xr, yr, n, (C)M, total, nt);
      continue;
    }
    const bool no_nan = std::isfinite(total) && total > 0;  // then every scale and e is finite
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t b0 = b * kBlk, b1 = std::min(n, b0 + kBlk), p1 = std::min(n2, b1);
      softmax_out(e, yr, b0, b1, p1, vbc((C)(std::exp(bmax[b] - M) / total)), no_nan, nt);
    }
  }
}

template <typename T, bool log>
static void softmax_fwd_impl(const T* x, int64_t ldx, T* y, int64_t rows, int64_t n, bool nt) {
  using C = C_t<T>;
  constexpr int L = kL<C>;
  const int64_t n2 = pair_end<C>(n);  // pairs (vload2 order) below n2, plain vectors from there on
  // f32/f64 keep e in y unless y is streamed; halves (or a streamed y) keep it in a cache-resident
  // float row per row of the group. The scratch is looked up once per call, not per row.
  const bool in_y = std::is_same_v<T, C> && !nt;
  const int64_t group = row_group(n, (int64_t)sizeof(T) + (log || in_y ? 0 : (int64_t)sizeof(C)));
  C* scratch = nullptr;
  if (!log && !in_y) scratch = scratch_of<C>(Scratch::SoftmaxRows, group * (n + L));
  auto e_of = [&](int64_t r, int64_t g0) { return in_y ? reinterpret_cast<C*>(y + r * n) : scratch + (r - g0) * (n + L); };
  C mx[kMaxGroup];
  double total[kMaxGroup];
  for (int64_t g0 = 0; g0 < rows; g0 += group) {
    const int64_t g1 = std::min(rows, g0 + group);
    for (int64_t r = g0; r < g1; ++r) mx[r - g0] = row_max(x + r * ldx, n);
    for (int64_t r = g0; r < g1; ++r)
      total[r - g0] = exp_sum<T, !log>(x + r * ldx, n, mx[r - g0], log ? nullptr : e_of(r, g0),
                                       row_ahead<T>(x, ldx, r, 2 * group, rows));
    for (int64_t r = g0; r < g1; ++r) {
      const T* xr = x + r * ldx;
      T* yr = y + r * n;
      if (log)
        log_softmax_row_out(xr, yr, n, mx[r - g0], total[r - g0], nt);
      else  // a finite sum makes every e finite too, and e * inv is in [0, 1]
        softmax_out(e_of(r, g0), yr, 0, n, n2, vbc((C)(1.0 / total[r - g0])), std::isfinite(total[r - g0]), nt);
    }
  }
}

template <typename T> static void softmax_fwd_rows(const void* x_, int64_t ldx, void* y_, int64_t rows,
                                                  int64_t n, bool log, bool want_nt) {
  const bool nt = use_nt<T>(want_nt, y_, n);
  with_flag(log, [&](auto lg) {
    constexpr bool lgv = decltype(lg)::value;
    if (n > kBlk) softmax_fwd_long<T, lgv>((const T*)x_, ldx, (T*)y_, rows, n, nt);
    else softmax_fwd_impl<T, lgv>((const T*)x_, ldx, (T*)y_, rows, n, nt);
  });
  nt_fence(nt);
}

template <typename T> static void softmax_bwd_rows(const void* y_, int64_t ldy, const void* g_, int64_t ldg,
                                                  void* dx_, int64_t rows, int64_t n, bool log, bool want_nt) {
  using C = C_t<T>;
  using V = Vec<C>;
  constexpr int L = kL<C>;
  const bool nt = use_nt<T>(want_nt, dx_, n);
  const int64_t n2 = pair_end<C>(n);
  for (int64_t row = 0; row < rows; ++row) {
    const T* y = (const T*)y_ + row * ldy;
    const T* g = (const T*)g_ + row * ldg;
    T* dx = (T*)dx_ + row * n;
    // softmax: dx = y * (g - sum(g*y)); log_softmax: dx = g - exp(y) * sum(g)
    const double total = block_sum<C>(
        n,
        [&](int64_t j, V& s0, V& s1) {
          V ga, gb;
          vload2(g + j, ga, gb);
          if (log) {
            s0 += ga;
            s1 += gb;
          } else {
            V ya, yb;
            vload2(y + j, ya, yb);
            s0 += ga * ya;
            s1 += gb * yb;
          }
        },
        [&](int64_t j, int64_t c, V& s0) {
          V gv = vload_n(g + j, c, 0);
          s0 += log ? gv : gv * vload_n(y + j, c, 0);
        });
    const V vs = vbc((C)total);
    int64_t i = 0;
    if (log) {
      for (; i < n2; i += 2 * L) {
        V ga, gb, ya, yb;
        vload2(g + i, ga, gb);
        vload2(y + i, ya, yb);
        vstore2(dx + i, ga - vexp_neg(ya) * vs, gb - vexp_neg(yb) * vs, nt);
      }
      for (; i + L <= n; i += L) vstore_o(dx + i, vload(g + i) - vexp_neg(vload(y + i)) * vs, nt);
      if (i < n) vstore_n(dx + i, vload_n(g + i, n - i, 0) - vexp_neg(vload_n(y + i, n - i, 0)) * vs, n - i);
    } else {
      for (; i < n2; i += 2 * L) {
        V ga, gb, ya, yb;
        vload2(g + i, ga, gb);
        vload2(y + i, ya, yb);
        vstore2(dx + i, ya * (ga - vs), yb * (gb - vs), nt);
      }
      for (; i + L <= n; i += L) vstore_o(dx + i, vload(y + i) * (vload(g + i) - vs), nt);
      if (i < n) vstore_n(dx + i, vload_n(y + i, n - i, 0) * (vload_n(g + i, n - i, 0) - vs), n - i);
    }
  }
  nt_fence(nt);
}

// May a bf16 row's outputs skip the NaN select of the rounding? When its statistics are finite, x
// holds no NaN/inf; a NaN can then only come from a NaN weight or bias (bf16, so its payload's low 16
// bits are zero) or be made by the arithmetic (the default NaN, low bits zero too), and the plain
// round-to-nearest-even add cannot carry out of the low half of such a value: it stays a NaN.
// Only bf16 has a store without the select (vstore2_no_nan is vstore2 for the other types).
template <typename T, typename S> static inline bool finite_row(S stat) {
  return std::is_same_v<T, bf16> && std::isfinite((double)stat);
}

#include "cpu/fused_norm.inc"

// ============================ activations' backward ==============================================
template <typename T> static void sigmoid_bwd_k(const void* a_, const void* g_, void* dx_, int64_t n) {
  using C = C_t<T>;
  using V = Vec<C>;
  constexpr int L = kL<C>;
  const T* y = (const T*)a_;
  const T* g = (const T*)g_;
  T* dx = (T*)dx_;
  const V one = vbc((C)1);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    V yv = vload(y + i);
    vstore(dx + i, vload(g + i) * yv * (one - yv));
  }
  if (i < n) {
    V yv = vload_n(y + i, n - i, 0);
    vstore_n(dx + i, vload_n(g + i, n - i, 0) * yv * (one - yv), n - i);
  }
}
template <typename T> static void silu_bwd_k(const void* a_, const void* g_, void* dx_, int64_t n) {
  using C = C_t<T>;
  using V = Vec<C>;
  constexpr int L = kL<C>;
  const T* x = (const T*)a_;
  const T* g = (const T*)g_;
  T* dx = (T*)dx_;
  const V one = vbc((C)1);
  auto f = [&](V xv, V gv) {
    V s = one / (one + vexp(-xv));
    return gv * s * (one + xv * (one - s));
  };
  int64_t i = 0;
  for (; i + L <= n; i += L) vstore(dx + i, f(vload(x + i), vload(g + i)));
  if (i < n) vstore_n(dx + i, f(vload_n(x + i, n - i, 0), vload_n(g + i, n - i, 0)), n - i);
}
template <typename T> static void gelu_bwd_k(const void* a_, const void* g_, void* dx_, int64_t n) {
  using C = C_t<T>;
  const T* x = (const T*)a_;
  const T* g = (const T*)g_;
  T* dx = (T*)dx_;
  // d/dx [x * Phi(x)] = Phi(x) + x * phi(x), exact erf form (torch's default gelu). Float math goes
  // through vmath's one-branch normal CDF and density, so the loop vectorises; double keeps libm's.
  for (int64_t i = 0; i < n; ++i) dx[i] = store<T>((C)load(g[i]) * fm_gelu_grad<C>((C)load(x[i])));
}

// gelu(x + b) and its backward over rows, b along each row. h = x + b is rounded to T first, as the unfused
// add would store it, so the results are the composite's. The backward adds the dx it stores into db's
// per-chunk sums in the same loop (the bias gradient without a second pass over dx). The loops are long
// per element (erfc's polynomial, a divide, exp), and without a prefetch their loads from memory were
// not overlapped: each block of a row prefetches the same columns of the row ~8 KB on into L2.
constexpr int64_t kBgBlock = 128, kBgAheadBytes = 8192;
template <typename T> static inline int64_t bg_ahead(int64_t n) {
  return std::max<int64_t>(1, kBgAheadBytes / std::max<int64_t>(n * (int64_t)sizeof(T), 1));
}
template <typename T>
static void bias_gelu_fwd_rows(const void* x_, int64_t ldx, const void* b_, void* y_, int64_t rows, int64_t n) {
  using C = C_t<T>;
  const T* __restrict b = (const T*)b_;
  const int64_t ahead = bg_ahead<T>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict x = (const T*)x_ + r * ldx;
    T* __restrict y = (T*)y_ + r * n;
    const T* pf = row_ahead<T>(x_, ldx, r, ahead, rows);
    for (int64_t j0 = 0; j0 < n; j0 += kBgBlock) {
      const int64_t j1 = std::min(n, j0 + kBgBlock);
      for (int64_t p = j0; p < j1; p += 64 / (int64_t)sizeof(T)) prefetch_l2(pf, p);
      for (int64_t j = j0; j < j1; ++j)
        y[j] = store<T>(fm_gelu<C>((C)load(store<T>((C)load(x[j]) + (C)load(b[j])))));
    }
  }
}
template <typename T>
static void bias_gelu_bwd_rows(const void* x_, int64_t ldx, const void* b_, const void* g_, int64_t ldg, void* dx_,
                               void* db_, int64_t rows, int64_t n) {
  using C = C_t<T>;
  const T* __restrict b = (const T*)b_;
  C* __restrict db = (C*)db_;
  const int64_t ahead = bg_ahead<T>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const T* __restrict x = (const T*)x_ + r * ldx;
    const T* __restrict g = (const T*)g_ + r * ldg;
    T* __restrict dx = (T*)dx_ + r * n;
    const T* pfx = row_ahead<T>(x_, ldx, r, ahead, rows);
    const T* pfg = row_ahead<T>(g_, ldg, r, ahead, rows);
    for (int64_t j0 = 0; j0 < n; j0 += kBgBlock) {
      const int64_t j1 = std::min(n, j0 + kBgBlock);
      for (int64_t p = j0; p < j1; p += 64 / (int64_t)sizeof(T)) prefetch_l2(pfx, p), prefetch_l2(pfg, p);
      if (db) {
        for (int64_t j = j0; j < j1; ++j) {
          const T d = store<T>((C)load(g[j]) * fm_gelu_grad<C>((C)load(store<T>((C)load(x[j]) + (C)load(b[j])))));
          dx[j] = d;
          db[j] += (C)load(d);
        }
      } else {
        for (int64_t j = j0; j < j1; ++j)
          dx[j] = store<T>((C)load(g[j]) * fm_gelu_grad<C>((C)load(store<T>((C)load(x[j]) + (C)load(b[j])))));
      }
    }
  }
}

// The activations with parameters (ActKind::Elu on): dx = g * f'(x), f' the `d` of the forward's own
// functor (cpu/functors.h), so forward and backward share one definition; the loop vectorises.
template <typename Op, typename T>
static void act_bwd_k(const void* a_, const void* g_, void* dx_, int64_t n, double p0d, double p1d) {
  using C = C_t<T>;
  const T* x = (const T*)a_;
  const T* g = (const T*)g_;
  T* dx = (T*)dx_;
  const C p0 = (C)p0d, p1 = (C)p1d;
  for (int64_t i = 0; i < n; ++i) dx[i] = store<T>((C)load(g[i]) * Op::template d<C>((C)load(x[i]), p0, p1));
}

#include "cpu/fused_attn.inc"
#include "cpu/fused_rope.inc"
#include "cpu/fused_rnn.inc"

template <typename T> void register_dtype(FusedTable& t) {
  constexpr int d = (int)DTypeOf<T>::value;
  t.softmax_fwd[d] = &softmax_fwd_rows<T>;
  t.softmax_bwd[d] = &softmax_bwd_rows<T>;
  t.rms_fwd[d] = &rms_fwd_rows<T>;
  t.rms_bwd[d] = &rms_bwd_rows<T>;
  t.ln_fwd[d] = &ln_fwd_rows<T>;
  t.ln_bwd[d] = &ln_bwd_rows<T>;
  t.sigmoid_bwd[d] = &sigmoid_bwd_k<T>;
  t.silu_bwd[d] = &silu_bwd_k<T>;
  t.gelu_bwd[d] = &gelu_bwd_k<T>;
  t.bias_gelu_fwd[d] = &bias_gelu_fwd_rows<T>;
  t.bias_gelu_bwd[d] = &bias_gelu_bwd_rows<T>;
  t.act_bwd[(int)ActKind::Elu][d] = &act_bwd_k<UElu, T>;
  t.act_bwd[(int)ActKind::LeakyRelu][d] = &act_bwd_k<ULeakyRelu, T>;
  t.act_bwd[(int)ActKind::Softplus][d] = &act_bwd_k<USoftplus, T>;
  t.act_bwd[(int)ActKind::Mish][d] = &act_bwd_k<UMish, T>;
  t.act_bwd[(int)ActKind::Hardswish][d] = &act_bwd_k<UHardswish, T>;
  t.act_bwd[(int)ActKind::Hardsigmoid][d] = &act_bwd_k<UHardsigmoid, T>;
  t.act_bwd[(int)ActKind::GeluTanh][d] = &act_bwd_k<UGeluTanh, T>;
  t.sdpa_fwd[d] = &sdpa_fwd_item<T>;
  t.sdpa_bwd[d] = &sdpa_bwd_item<T>;
  t.sdpa_decode[d] = &sdpa_decode_item<T>;
  t.rope_row[d] = &rope_row_k<T>;
  t.rnn_fwd[d] = &rnn_fwd_row<T>;
  t.rnn_bwd[d] = &rnn_bwd_row<T>;
}

}  // namespace

void EMBER_FCAT(register_fused_, EMBER_ISA)(FusedTable& t) {
  register_dtype<float>(t);
  register_dtype<f16>(t);
  register_dtype<bf16>(t);
  register_dtype<double>(t);
}

}  // namespace ember::cpu
