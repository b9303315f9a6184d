// Contiguous/strided inner loops for unary, binary and reduction ops, compiled once per ISA
// (EMBER_ISA) and registered into a KernelTable; the compiler vectorises the fixed-width bodies.
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "cpu/dispatch.h"
#include "dtype.h"

#ifndef EMBER_ISA
#define EMBER_ISA base
#endif
#define EMBER_CAT2(a, b) a##b
#define EMBER_CAT(a, b) EMBER_CAT2(a, b)

namespace ember::cpu {
namespace {
#include "cpu/functors.h"

template <typename T> using C_t = typename Acc<T>::type;

template <typename Op, typename T>
void unary_loop(const void* in_, int64_t is, void* out_, int64_t os, int64_t n, double p0d, double p1d) {
  using C = C_t<T>;
  if constexpr ((std::is_same_v<Op, USin> || std::is_same_v<Op, UCos> || std::is_same_v<Op, UTan>) &&
                std::is_same_v<C, float>) {
    // Blocks through vmath's vectorised sin/cos, then libm for the few arguments past its range
    // (|x| > 2^22, inf, NaN); the block copy keeps in-place and strided calls right. A block whose
    // arguments all lie within 2^19 (angles, RoPE positions) takes the float reduction, half the work.
    // tan shares the double reduction only.
    constexpr int shift = std::is_same_v<Op, UCos> ? 1 : 0;
    constexpr bool is_tan = std::is_same_v<Op, UTan>;
    constexpr int64_t B = 256;
    float xs[B], ys[B];
    for (int64_t b = 0; b < n; b += B) {
      const int64_t m = std::min(B, n - b);
      for (int64_t k = 0; k < m; ++k) xs[k] = load(static_cast<const T*>(in_)[(b + k) * is]);
      int32_t amax = 0;  // the largest |x| as float bits: NaNs come out above inf
      for (int64_t k = 0; k < m; ++k) amax = std::max(amax, vm_f_to_bits(xs[k]) & 0x7fffffff);
      if (amax > vm_f_to_bits(kSinCosMax)) {
        // The reduction's quadrant is converted to int: NaN or huge arguments would make that undefined,
        // so they are reduced as 0 and then taken from libm.
        float safe[B];
        for (int64_t k = 0; k < m; ++k) safe[k] = std::fabs(xs[k]) <= kSinCosMax ? xs[k] : 0.0f;
        if constexpr (is_tan) {
          for (int64_t k = 0; k < m; ++k) ys[k] = vm_tan(safe[k]);
        } else {
          for (int64_t k = 0; k < m; ++k) ys[k] = vm_sincos(safe[k], shift);
        }
        for (int64_t k = 0; k < m; ++k)
          if (!(std::fabs(xs[k]) <= kSinCosMax)) ys[k] = Op::template f<float>(xs[k], 0.0f, 0.0f);
      } else if constexpr (is_tan) {
        for (int64_t k = 0; k < m; ++k) ys[k] = vm_tan(xs[k]);
      } else {
#if defined(__FMA__)
        if (amax <= vm_f_to_bits(kSinCosFloatMax))
          for (int64_t k = 0; k < m; ++k) ys[k] = vm_sincos_fma(xs[k], shift);
        else
#endif
          for (int64_t k = 0; k < m; ++k) ys[k] = vm_sincos(xs[k], shift);
      }
      for (int64_t k = 0; k < m; ++k) static_cast<T*>(out_)[(b + k) * os] = store<T>(ys[k]);
    }
    return;
  }
  if constexpr (std::is_same_v<Op, UPowf>) {
    // x ** 2 and x ** 0.5 (a squared error, a norm) as the vectorised x * x and sqrt, as torch and
    // numpy do: both are correctly rounded, so they give pow's value (to its < 1 ulp) without a scalar
    // std::pow per element; like torch and numpy, (-0) ** 0.5 is then -0 and (-inf) ** 0.5 NaN.
    if (p0d == 2.0) return unary_loop<USqr, T>(in_, is, out_, os, n, 0.0, 0.0);
    if (p0d == 0.5) return unary_loop<USqrt, T>(in_, is, out_, os, n, 0.0, 0.0);
  }
  const T* in = static_cast<const T*>(in_);
  T* out = static_cast<T*>(out_);
  const C p0 = (C)p0d, p1 = (C)p1d;
  if (is == 1 && os == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = store<T>(Op::template f<C>(load(in[i]), p0, p1));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i * os] = store<T>(Op::template f<C>(load(in[i * is]), p0, p1));
  }
}

// Integer x < p and x > p for a double p, exact for every int64 (a cast of x to double would round
// above 2^53).
template <typename T> inline bool int_lt(T x, double p) {
  if constexpr (sizeof(T) < 8) return (double)x < p;
  else if (!(p > -9223372036854775808.0)) return false;  // also NaN
  else if (p >= 9223372036854775808.0) return true;
  else return x < (int64_t)std::ceil(p);
}
template <typename T> inline bool int_gt(T x, double p) {
  if constexpr (sizeof(T) < 8) return (double)x > p;
  else if (!(p < 9223372036854775808.0)) return false;  // also NaN
  else if (p < -9223372036854775808.0) return true;
  else return x > (int64_t)std::floor(p);
}

// v as it is, rounded on its own: the compiler may not fuse it into a following add (with -mfma, GCC
// contracts a * b + c into one FMA by default, which would round x * p0 + p1 differently from numpy
// and from the baseline build).
inline double unfused(double v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+x"(v));
#elif defined(__GNUC__) && defined(__aarch64__)
  asm("" : "+w"(v));
#else
  volatile double t = v;
  v = t;
#endif
  return v;
}

// Integer unary ops in integer arithmetic (wrapping like numpy: sqr/abs/neg of the extremes), so
// int64 values above 2^53 keep every bit. Affine with float parameters goes through double and
// truncates (affine(x, 0.5, 0) halves); its result wraps into T the way a cast does (never the
// undefined behaviour of an out-of-range float-to-int conversion).
template <typename Op, typename T>
void unary_loop_int(const void* in_, int64_t is, void* out_, int64_t os, int64_t n, double p0, double p1) {
  using U = std::make_unsigned_t<T>;
  const T* in = static_cast<const T*>(in_);
  T* out = static_cast<T*>(out_);
  auto body = [&](auto f) {
    for (int64_t i = 0; i < n; ++i) out[i * os] = f(in[i * is]);
  };
  if constexpr (std::is_same_v<Op, USqr>) body([](T x) { return (T)(U)((uint64_t)(U)x * (uint64_t)(U)x); });
  else if constexpr (std::is_same_v<Op, UAbs>) body([](T x) { return x < 0 ? (T)(U)(U(0) - (U)x) : x; });
  else if constexpr (std::is_same_v<Op, UNeg>) body([](T x) { return (T)(U)(U(0) - (U)x); });
  else if constexpr (std::is_same_v<Op, URelu>) body([](T x) { return x < 0 ? T(0) : x; });
  else if constexpr (std::is_same_v<Op, USign>) body([](T x) { return (T)((x > 0) - (x < 0)); });
  else if constexpr (std::is_same_v<Op, UBitNot>) body([](T x) { return (T)~x; });
  else if constexpr (std::is_same_v<Op, UCeil> || std::is_same_v<Op, UFloor> || std::is_same_v<Op, URound> ||
                     std::is_same_v<Op, UTrunc>)
    body([](T x) { return x; });
  else if constexpr (std::is_same_v<Op, UClamp>) {
    // A bound outside T saturates (uint8 clamp(lo=300) gives 255, not 300 wrapped to 44).
    auto sat = [](double b) {
      constexpr double tmin = (double)std::numeric_limits<T>::min(), tmax = (double)std::numeric_limits<T>::max();
      return b <= tmin ? std::numeric_limits<T>::min() : b >= tmax ? std::numeric_limits<T>::max() : convert<T, double>(b);
    };
    const T lo = sat(p0), hi = sat(p1);
    const bool lo_over_hi = p0 > p1;  // then every x clamps to hi, as min(max(x, lo), hi) does
    body([&](T x) { return int_lt(x, p0) ? (lo_over_hi ? hi : lo) : (int_gt(x, p1) ? hi : x); });
  } else if constexpr (std::is_same_v<Op, UAffine>) {
    const bool exact = p0 == std::trunc(p0) && p1 == std::trunc(p1) && std::fabs(p0) < 9.2e18 && std::fabs(p1) < 9.2e18;
    if (exact) {  // x * p0 + p1 modulo 2^64, then cast: the same wrap as numpy's integer arithmetic
      const uint64_t m = (uint64_t)(int64_t)p0, a = (uint64_t)(int64_t)p1;
      body([&](T x) { return (T)(U)((uint64_t)(int64_t)x * m + a); });
    } else {
      body([&](T x) { return convert<T, double>(unfused((double)x * p0) + p1); });
    }
  } else {
    static_assert(sizeof(Op) == 0, "an integer unary op without an integer implementation");
  }
}

template <typename Op, typename T, typename Out, typename F>
inline void binary_body(const T* a, int64_t sa, const T* b, int64_t sb, Out* out, int64_t n, F&& st) {
  using C = C_t<T>;
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = st(Op::template f<C>(load(a[i]), load(b[i])));
  } else if (sa == 0 && sb == 1) {
    const C av = load(a[0]);
    for (int64_t i = 0; i < n; ++i) out[i] = st(Op::template f<C>(av, load(b[i])));
  } else if (sa == 1 && sb == 0) {
    const C bv = load(b[0]);
    for (int64_t i = 0; i < n; ++i) out[i] = st(Op::template f<C>(load(a[i]), bv));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = st(Op::template f<C>(load(a[i * sa]), load(b[i * sb])));
  }
}

// Float // and %: libm's fmod is scalar, so blocks go through vmath's
// exact, vectorised vm_fmod and Python's rules as selects, then the scalar functor redoes the few
// elements vm_fmod does not take (huge quotients, b zero or infinite, a infinite, NaNs). Same results;
// the block copies keep in-place and strided calls right. Doubles need an FMA (not on base x86-64).
template <typename Op, typename T>
void divmod_loop(const T* a, int64_t sa, const T* b, int64_t sb, T* out, int64_t n) {
  using C = C_t<T>;
  using I = std::conditional_t<sizeof(C) == 4, int32_t, int64_t>;  // lane-wide flags vectorise with C
  constexpr int64_t B = 256;
  C xa[B], xb[B], ys[B];
  I other[B];
  for (int64_t s = 0; s < n; s += B) {
    const int64_t m = std::min(B, n - s);
    for (int64_t k = 0; k < m; ++k) xa[k] = load(a[(s + k) * sa]);
    for (int64_t k = 0; k < m; ++k) xb[k] = load(b[(s + k) * sb]);
    I any_other = 0;
    for (int64_t k = 0; k < m; ++k) {
      const C r = vm_fmod(xa[k], xb[k], other[k]);
      any_other |= other[k];
      if constexpr (std::is_same_v<Op, BRem>) ys[k] = py_rem_from_fmod(xb[k], r);
      else ys[k] = py_floordiv_from_fmod(xa[k], xb[k], r);
    }
    if (any_other)
      for (int64_t k = 0; k < m; ++k)
        if (other[k]) ys[k] = Op::template f<C>(xa[k], xb[k]);
    for (int64_t k = 0; k < m; ++k) out[s + k] = store<T>(ys[k]);
  }
}

#if defined(__FMA__)
constexpr bool kFmodDouble = true;
#else
constexpr bool kFmodDouble = false;
#endif
template <typename Op, typename T>
void binary_loop(const void* a, int64_t sa, const void* b, int64_t sb, void* out, int64_t n) {
  using C = C_t<T>;
  if constexpr ((std::is_same_v<Op, BRem> || std::is_same_v<Op, BFloorDiv>) &&
                (std::is_same_v<C, float> || (std::is_same_v<C, double> && kFmodDouble))) {
    divmod_loop<Op, T>(static_cast<const T*>(a), sa, static_cast<const T*>(b), sb, static_cast<T*>(out), n);
    return;
  }
  binary_body<Op, T>(static_cast<const T*>(a), sa, static_cast<const T*>(b), sb, static_cast<T*>(out), n,
                     [](C v) { return store<T>(v); });
}
template <typename Op, typename T>
void cmp_loop(const void* a, int64_t sa, const void* b, int64_t sb, void* out, int64_t n) {
  binary_body<Op, T>(static_cast<const T*>(a), sa, static_cast<const T*>(b), sb, static_cast<uint8_t*>(out),
                     n, [](uint8_t v) { return v; });
}

// --- reductions over a contiguous row ------------------------------------------------------
// Sums with 16 independent lanes (vectorisable); every 16 additions per lane the lanes move into
// double lanes, so a million-element row (or one huge value among small ones) stays accurate.
template <typename T> void sum_row(const void* in_, int64_t n, void* out_) {
  const T* in = static_cast<const T*>(in_);
  using C = C_t<T>;
  if constexpr (std::is_integral_v<T>) {
    uint64_t acc = 0;  // wraps like the dtype: unsigned, since signed overflow is undefined
    for (int64_t i = 0; i < n; ++i) acc += (uint64_t)in[i];
    *static_cast<T*>(out_) = (T)acc;
  } else {
    constexpr int W = 16;
    constexpr int64_t kBlock = 16 * W;
    double wide[W] = {};
    int64_t i = 0;
    for (; i + kBlock <= n; i += kBlock) {
      C lanes[W] = {};
      for (int64_t k = i; k < i + kBlock; k += W)
        for (int j = 0; j < W; ++j) lanes[j] += load(in[k + j]);
      for (int j = 0; j < W; ++j) wide[j] += (double)lanes[j];
    }
    C lanes[W] = {};
    for (; i + W <= n; i += W)
      for (int j = 0; j < W; ++j) lanes[j] += load(in[i + j]);
    double total = 0;
    for (; i < n; ++i) total += (double)load(in[i]);
    for (int j = 0; j < W; ++j) total += wide[j] + (double)lanes[j];
    *static_cast<T*>(out_) = convert<T, double>(total);
  }
}

// Max / min of a row; NaN when any element is, as in torch and numpy (`pick` keeps a NaN once it meets
// one). Float rows go through explicit vectors: GCC left the same loop over a lane array scalar and
// branchy.
template <bool IsMax, typename T> void minmax_row(const void* in_, int64_t n, void* out_) {
  const T* in = static_cast<const T*>(in_);
  using C = C_t<T>;
  auto pick = [](C v, C l) { return ((IsMax ? v > l : v < l) || v != v) ? v : l; };
  const C first = load(in[0]);
  C r = first;
  int64_t i = 0;
  if constexpr (std::is_floating_point_v<C>) {
    constexpr int L = kVB / (int)sizeof(C);
    typedef C V __attribute__((vector_size(kVB)));
    auto vload = [&](int64_t k) {
      V v;
      if constexpr (std::is_same_v<T, C>) {
        std::memcpy(&v, in + k, sizeof v);
      } else {
        C tmp[L];
        for (int j = 0; j < L; ++j) tmp[j] = load(in[k + j]);
        std::memcpy(&v, tmp, sizeof v);
      }
      return v;
    };
    // The running max is a plain max/min instruction (a NaN element loses there); NaNs are counted
    // on the side, off the accumulators' dependency chain, and make the result NaN at the end.
    auto vbest = [](V v, V l) { return (IsMax ? v > l : v < l) ? v : l; };
    typedef decltype(V{} != V{}) M;
    V a0 = first - V{}, a1 = a0, a2 = a0, a3 = a0;
    M nan = M{};
    for (; i + 4 * L <= n; i += 4 * L) {
      const V v0 = vload(i), v1 = vload(i + L), v2 = vload(i + 2 * L), v3 = vload(i + 3 * L);
      a0 = vbest(v0, a0);
      a1 = vbest(v1, a1);
      a2 = vbest(v2, a2);
      a3 = vbest(v3, a3);
      nan |= (v0 != v0) | (v1 != v1) | (v2 != v2) | (v3 != v3);
    }
    a0 = vbest(vbest(a1, a0), vbest(a3, a2));
    for (int j = 0; j < L; ++j) r = pick(a0[j], r);
    for (int j = 0; j < L; ++j)
      if (nan[j]) r = std::numeric_limits<C>::quiet_NaN();
  } else {
    constexpr int W = 16;
    C lanes[W];
    for (int j = 0; j < W; ++j) lanes[j] = first;
    for (; i + W <= n; i += W)
      for (int j = 0; j < W; ++j) lanes[j] = pick(load(in[i + j]), lanes[j]);
    for (int j = 0; j < W; ++j) r = pick(lanes[j], r);
  }
  for (; i < n; ++i) r = pick(load(in[i]), r);
  *static_cast<T*>(out_) = store<T>(r);
}

// Column step: acc[j] = acc[j] (op) in[j]. acc is C_t<T> (float for halves).
template <int Kind, typename T> void col_step(const void* in_, int64_t n, void* acc_) {
  const T* in = static_cast<const T*>(in_);
  using C = C_t<T>;
  C* acc = static_cast<C*>(acc_);
  for (int64_t j = 0; j < n; ++j) {
    C v = load(in[j]);
    if constexpr (Kind == 0) acc[j] = wrap_add<C>(acc[j], v);
    else if constexpr (Kind == 1) acc[j] = (v > acc[j] || v != v) ? v : acc[j];
    else acc[j] = (v < acc[j] || v != v) ? v : acc[j];
  }
}

template <typename T> void register_dtype(KernelTable& t) {
  constexpr int d = (int)DTypeOf<T>::value;
  constexpr bool flt = !std::is_integral_v<T>;
#define EMBER_REG_UNARY(E, F)                                                            \
  if constexpr (flt) t.unary[(int)UnaryOp::E][d] = &unary_loop<F, T>;                   \
  else if constexpr (!F::kFloatOnly) t.unary[(int)UnaryOp::E][d] = &unary_loop_int<F, T>;
  EMBER_REG_UNARY(Exp, UExp) EMBER_REG_UNARY(Log, ULog) EMBER_REG_UNARY(Sin, USin)
  EMBER_REG_UNARY(Cos, UCos) EMBER_REG_UNARY(Tanh, UTanh) EMBER_REG_UNARY(Sqrt, USqrt)
  EMBER_REG_UNARY(Sqr, USqr) EMBER_REG_UNARY(Abs, UAbs) EMBER_REG_UNARY(Recip, URecip)
  EMBER_REG_UNARY(Relu, URelu) EMBER_REG_UNARY(Gelu, UGelu) EMBER_REG_UNARY(Silu, USilu)
  EMBER_REG_UNARY(Erf, UErf) EMBER_REG_UNARY(Ceil, UCeil) EMBER_REG_UNARY(Floor, UFloor)
  EMBER_REG_UNARY(Round, URound) EMBER_REG_UNARY(Sign, USign) EMBER_REG_UNARY(Sigmoid, USigmoid)
  EMBER_REG_UNARY(Affine, UAffine) EMBER_REG_UNARY(Powf, UPowf) EMBER_REG_UNARY(Clamp, UClamp)
  EMBER_REG_UNARY(Log1p, ULog1p) EMBER_REG_UNARY(Expm1, UExpm1) EMBER_REG_UNARY(Rsqrt, URsqrt)
  EMBER_REG_UNARY(Log2, ULog2) EMBER_REG_UNARY(Log10, ULog10) EMBER_REG_UNARY(Tan, UTan)
  EMBER_REG_UNARY(Sinh, USinh) EMBER_REG_UNARY(Cosh, UCosh) EMBER_REG_UNARY(Asin, UAsin)
  EMBER_REG_UNARY(Acos, UAcos) EMBER_REG_UNARY(Atan, UAtan) EMBER_REG_UNARY(Trunc, UTrunc)
  EMBER_REG_UNARY(Elu, UElu) EMBER_REG_UNARY(LeakyRelu, ULeakyRelu) EMBER_REG_UNARY(Softplus, USoftplus)
  EMBER_REG_UNARY(Mish, UMish) EMBER_REG_UNARY(Hardswish, UHardswish) EMBER_REG_UNARY(Hardsigmoid, UHardsigmoid)
  EMBER_REG_UNARY(GeluTanh, UGeluTanh)
#undef EMBER_REG_UNARY
  // Negating unsigned integers is refused rather than silently wrapping.
  if constexpr (flt) t.unary[(int)UnaryOp::Neg][d] = &unary_loop<UNeg, T>;
  else if constexpr (std::is_signed_v<T>) t.unary[(int)UnaryOp::Neg][d] = &unary_loop_int<UNeg, T>;
  if constexpr (!flt) {
    t.unary[(int)UnaryOp::BitNot][d] = &unary_loop_int<UBitNot, T>;
    t.binary[(int)BinaryOp::BitAnd][d] = &binary_loop<BBitAnd, T>;
    t.binary[(int)BinaryOp::BitOr][d] = &binary_loop<BBitOr, T>;
    t.binary[(int)BinaryOp::BitXor][d] = &binary_loop<BBitXor, T>;
  }

  t.binary[(int)BinaryOp::Add][d] = &binary_loop<BAdd, T>;
  t.binary[(int)BinaryOp::Sub][d] = &binary_loop<BSub, T>;
  t.binary[(int)BinaryOp::Mul][d] = &binary_loop<BMul, T>;
  t.binary[(int)BinaryOp::Div][d] = &binary_loop<BDiv, T>;
  t.binary[(int)BinaryOp::Maximum][d] = &binary_loop<BMaximum, T>;
  t.binary[(int)BinaryOp::Minimum][d] = &binary_loop<BMinimum, T>;
  if constexpr (flt) t.binary[(int)BinaryOp::Pow][d] = &binary_loop<BPow, T>;
  t.binary[(int)BinaryOp::FloorDiv][d] = &binary_loop<BFloorDiv, T>;
  t.binary[(int)BinaryOp::Rem][d] = &binary_loop<BRem, T>;
  t.binary[(int)BinaryOp::Eq][d] = &cmp_loop<BEq, T>;
  t.binary[(int)BinaryOp::Ne][d] = &cmp_loop<BNe, T>;
  t.binary[(int)BinaryOp::Lt][d] = &cmp_loop<BLt, T>;
  t.binary[(int)BinaryOp::Le][d] = &cmp_loop<BLe, T>;
  t.binary[(int)BinaryOp::Gt][d] = &cmp_loop<BGt, T>;
  t.binary[(int)BinaryOp::Ge][d] = &cmp_loop<BGe, T>;

  t.reduce_row[0][d] = &sum_row<T>;
  t.reduce_row[1][d] = &minmax_row<true, T>;
  t.reduce_row[2][d] = &minmax_row<false, T>;
  t.reduce_col[0][d] = &col_step<0, T>;
  t.reduce_col[1][d] = &col_step<1, T>;
  t.reduce_col[2][d] = &col_step<2, T>;
}

// Logical not of bool's bytes (0 or 1).
void bool_not_loop(const void* in_, int64_t is, void* out_, int64_t os, int64_t n, double, double) {
  const uint8_t* in = static_cast<const uint8_t*>(in_);
  uint8_t* out = static_cast<uint8_t*>(out_);
  for (int64_t i = 0; i < n; ++i) out[i * os] = in[i * is] == 0 ? 1 : 0;
}

// bool is stored as bytes 0/1, so it takes uint8's kernels for every op whose results stay 0/1 on such
// bytes: comparisons, max/min, & | ^, + as or and * as and (torch's bool arithmetic). The other ops
// (-, /, //, %, the unary math) stay unregistered and raise "[op] not supported for bool".
void register_bool(KernelTable& t) {
  constexpr int b = (int)DType::Bool, u = (int)DType::U8;
  for (BinaryOp op : {BinaryOp::Eq, BinaryOp::Ne, BinaryOp::Lt, BinaryOp::Le, BinaryOp::Gt, BinaryOp::Ge,
                      BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::BitAnd, BinaryOp::BitOr, BinaryOp::BitXor})
    t.binary[(int)op][b] = t.binary[(int)op][u];
  t.binary[(int)BinaryOp::Add][b] = t.binary[(int)BinaryOp::BitOr][u];
  t.binary[(int)BinaryOp::Mul][b] = t.binary[(int)BinaryOp::BitAnd][u];
  t.unary[(int)UnaryOp::BitNot][b] = &bool_not_loop;
  for (int k = 1; k < 3; ++k) {  // max, min
    t.reduce_row[k][b] = t.reduce_row[k][u];
    t.reduce_col[k][b] = t.reduce_col[k][u];
  }
}

}  // namespace

void EMBER_CAT(register_kernels_, EMBER_ISA)(KernelTable& t) {
  register_dtype<float>(t);
  register_dtype<f16>(t);
  register_dtype<bf16>(t);
  register_dtype<double>(t);
  register_dtype<int64_t>(t);
  register_dtype<uint32_t>(t);
  register_dtype<uint8_t>(t);
  register_dtype<int32_t>(t);
  register_bool(t);
}

}  // namespace ember::cpu
