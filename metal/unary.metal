// Elementwise unary kernels, every UnaryOp: f32/f16/bf16 computed in float, and the ops the CPU allows on
// int64/int32/uint32/uint8 (and bitwise_not on bool) in integer arithmetic; a contiguous kernel (4 elements per
// thread) and a strided one.
#include <metal_stdlib>
using namespace metal;

// The scalar parameters by value: affine (p0 * x + p1), powf (p0), clamp (p0, p1); ignored by the rest.
struct UnaryParams {
  float p0;
  float p1;
};

// Integer ops' parameters, prepared on the host from the double parameters (Metal has no double).
// clamp: x < lo <=> x < lo_thr (or always / never, per flags); x > hi <=> x > hi_thr; a clamped x
// becomes lo_val / hi_val (bounds saturated into the dtype). affine: x * mul + add modulo 2^64 when both
// parameters are integers (flag kAffineExact), else the doubles' bits for the software double below.
struct IntUnaryParams {
  long lo_thr;
  long hi_thr;
  long lo_val;
  long hi_val;
  ulong mul;
  ulong add;
  ulong mul_bits;
  ulong add_bits;
  uint flags;
  uint pad;
};
constant constexpr uint kLoAlways = 1, kLoNever = 2, kHiAlways = 4, kHiNever = 8, kAffineExact = 16;

#if defined(EMBER_CUDA_F64)
// CUDA's float64 variant (float is double here: cpp/cuda/kernels.h): the CPU's double functions, the math
// library's (cpp/cpu/simd/vmath.h, fm_erf ... fm_expm1).
inline float ember_erf(float x) { return ::erf(x); }
inline float ember_gelu(float x) { return 0.5f * x * (1.0f + ::erf(x * 0.70710678118654752440f)); }
inline float ember_log1p(float x) { return ::log1p(x); }
inline float ember_expm1(float x) { return ::expm1(x); }
#else
// Metal has no erf: the CPU's fits (cpp/cpu/simd/vmath.h, vm_erf), within 3 ulp: an odd polynomial up
// to |x| = 1, above it 1 - e^(-x^2) * P(|x| - 2.5).
inline float ember_erf(float x) {
  const float ax = fabs(x);
  const float z = x * x;
  if (ax <= 1.0f) {
    float p = -5.654007217e-04f;
    p = p * z + 4.923252925e-03f;
    p = p * z - 2.671636274e-02f;
    p = p * z + 1.128036353e-01f;
    p = p * z - 3.761234965e-01f;
    p = p * z + 1.128379127e+00f;
    return x * p;
  }
  const float t = min(ax, 4.0f) - 2.5f;
  const float c[11] = {1.671832676e-06f, -6.386209744e-06f, 1.435350619e-05f, -5.358525088e-05f, 2.129723539e-04f,
                       -7.389983919e-04f, 2.465982165e-03f, -7.999345154e-03f, 2.493820378e-02f, -7.434760099e-02f,
                       2.108063575e-01f};
  float p = c[0];
  for (int k = 1; k < 11; ++k) p = p * t + c[k];
  const float r = 1.0f - exp(-z) * p;
  return x < 0.0f ? -r : r;  // a NaN x comes out as NaN
}
// gelu = x * Phi(x), Phi the normal CDF through erfc as the CPU computes it (vmath.h, vm_normal_cdf):
// with z = |x| / sqrt(2) and t = 1 / (1 + z / 2), erfc(z) = t * Q(t) * e^(-z^2), so negative x keep their
// relative accuracy (0.5 * (1 + erf) cancels from x = -5 on); z^2 = x^2 / 2 is split exactly with an FMA.
inline float ember_gelu(float x) {
  const float y = x * 0.70710678118654752f, z = fabs(y);
  const float t = 1.0f / (1.0f + 0.5f * z);
  const float c[9] = {-5.906911567e-02f, 2.845837176e-01f, -4.872074425e-01f, 2.780393660e-01f, -2.657250501e-02f,
                      2.026508600e-01f, 2.431147397e-01f, 2.823738754e-01f, 2.820864916e-01f};
  float q = c[0];
  for (int k = 1; k < 9; ++k) q = q * t + c[k];
  const float xx = x * x, zz = 0.5f * xx;
  const float lo = 0.5f * fma(x, x, -xx);
  const float e = zz <= 87.33f ? exp(-zz) * (1.0f - lo) : 0.0f;  // e^(-z^2); 0 past exp's range (and for NaN)
  const float half_erfc = 0.5f * (t * q * e);
  return x * (y > 0.0f ? 1.0f - half_erfc : half_erfc);
}
// Metal has no log1p / expm1: Goldberg's and Kahan's corrections of log(1 + x) and exp(x) - 1 cancel
// the rounding of 1 + x and of exp(x), which keeps the relative error small near 0.
inline float ember_log1p(float x) {
  const float u = 1.0f + x;
  if (u == 1.0f) return x;
  if (isinf(u) && u > 0.0f) return u;
  return log(u) * (x / (u - 1.0f));
}
inline float ember_expm1(float x) {
  if (fabs(x) < 1e-5f) return x * (1.0f + 0.5f * x);  // keeps -0 as -0
  const float u = exp(x);
  if (isinf(u)) return u;
  if (u - 1.0f == -1.0f) return -1.0f;
  return (u - 1.0f) * (x / log(u));
}
#endif

// Float functors, the CPU's (cpp/cpu/functors.h) expressions: neg is 0 - x and abs/relu/sign compare
// with 0, so signed zeros and NaNs come out as the CPU gives them.
#define EMBER_FUNARY(NAME, EXPR)                                                     \
  struct NAME {                                                                       \
    static float f(float x, constant UnaryParams& p) { (void)p; return EXPR; }      \
  };
EMBER_FUNARY(Exp, exp(x))
EMBER_FUNARY(Log, log(x))
EMBER_FUNARY(Sin, sin(x))
EMBER_FUNARY(Cos, cos(x))
EMBER_FUNARY(Tanh, tanh(x))
EMBER_FUNARY(Sqrt, sqrt(x))
EMBER_FUNARY(Sqr, x * x)
EMBER_FUNARY(Abs, (x < 0.0f ? 0.0f - x : x))
EMBER_FUNARY(Neg, 0.0f - x)
EMBER_FUNARY(Recip, 1.0f / x)
EMBER_FUNARY(Relu, (x < 0.0f ? 0.0f : x))
EMBER_FUNARY(Gelu, ember_gelu(x))
EMBER_FUNARY(Silu, x / (1.0f + exp(-x)))
EMBER_FUNARY(Erf, ember_erf(x))
EMBER_FUNARY(Ceil, ceil(x))
EMBER_FUNARY(Floor, floor(x))
EMBER_FUNARY(Round, rint(x))  // half to even, as numpy
EMBER_FUNARY(Sign, (x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x)))
EMBER_FUNARY(Sigmoid, 1.0f / (1.0f + exp(-x)))
EMBER_FUNARY(Affine, x * p.p0 + p.p1)
// x ** 2 and x ** 0.5 as x * x and sqrt, as the CPU does ((-0) ** 0.5 is then -0, (-inf) ** 0.5 NaN)
EMBER_FUNARY(Powf, (p.p0 == 2.0f ? x * x : (p.p0 == 0.5f ? sqrt(x) : pow(x, p.p0))))
// min(max(x, lo), hi): hi wins when lo > hi, as in torch and numpy; NaN stays NaN
EMBER_FUNARY(Clamp, ((x < p.p0 ? p.p0 : x) > p.p1 ? p.p1 : (x < p.p0 ? p.p0 : x)))
EMBER_FUNARY(Log1p, ember_log1p(x))
EMBER_FUNARY(Expm1, ember_expm1(x))
EMBER_FUNARY(Rsqrt, 1.0f / sqrt(x))
EMBER_FUNARY(Log2, log2(x))
EMBER_FUNARY(Log10, log10(x))
EMBER_FUNARY(Tan, tan(x))
EMBER_FUNARY(Sinh, sinh(x))
EMBER_FUNARY(Cosh, cosh(x))
EMBER_FUNARY(Asin, asin(x))
EMBER_FUNARY(Acos, acos(x))
EMBER_FUNARY(Atan, atan(x))
EMBER_FUNARY(Trunc, trunc(x))
#undef EMBER_FUNARY

// The activations with parameters, as the CPU's functors (cpp/cpu/functors.h, UElu ... UGeluTanh) and
// torch define them: elu (p0 alpha), leaky_relu (p0 slope), softplus (p0 beta, p1 threshold; never
// overflowing: max(bx, 0) + log1p(e^-|bx|)), mish (tanh(softplus(x)) = n / (n + 2), n = e (e + 2)),
// hardswish, hardsigmoid, and gelu's tanh form as x * sigmoid(2z).
struct Elu {
  static float f(float x, constant UnaryParams& p) { return x <= 0.0f ? p.p0 * ember_expm1(x) : x; }
};
struct LeakyRelu {
  static float f(float x, constant UnaryParams& p) { return x > 0.0f ? x : x * p.p0; }
};
struct Softplus {
  static float f(float x, constant UnaryParams& p) {
    const float bx = x * p.p0;
    const float sp = (bx > 0.0f ? bx : 0.0f) + ember_log1p(exp(-fabs(bx)));  // a NaN stays NaN
    return bx > p.p1 ? x : sp / p.p0;
  }
};
struct Mish {
  static float f(float x, constant UnaryParams& p) {
    (void)p;
    const float e = exp(x > 20.0f ? 20.0f : x), n = e * (e + 2.0f);
    return x * (n / (n + 2.0f));
  }
};
struct Hardswish {
  static float f(float x, constant UnaryParams& p) {
    (void)p;
    float t = x + 3.0f;
    t = t < 0.0f ? 0.0f : t;
    t = 6.0f < t ? 6.0f : t;
    return x * t / 6.0f;
  }
};
struct Hardsigmoid {
  static float f(float x, constant UnaryParams& p) {
    (void)p;
    float t = x + 3.0f;
    t = t < 0.0f ? 0.0f : t;
    t = 6.0f < t ? 6.0f : t;
    return t / 6.0f;
  }
};
struct GeluTanh {  // 2 sqrt(2/pi) (x + 0.044715 x^3) = 2z
  static float f(float x, constant UnaryParams& p) {
    (void)p;
    const float z2 = x * (1.5957691216057308f + 0.07135481627260025f * (x * x));
    return x / (1.0f + exp(-z2));
  }
};

// --- integers ---------------------------------------------------------------------------------------
// v modulo 2^bits of T: unsigned narrowing is modular; int64 takes the bits as they are.
template <typename T> inline T wrap_to(ulong v) { return T(v); }
template <> inline long wrap_to<long>(ulong v) { return as_type<long>(v); }
template <> inline int wrap_to<int>(ulong v) { return as_type<int>(uint(v)); }  // the low 32 bits
template <typename T> inline ulong bits_of(T x) { return ulong(x); }
template <> inline ulong bits_of<long>(long x) { return as_type<ulong>(x); }
template <> inline ulong bits_of<int>(int x) { return as_type<ulong>(long(x)); }  // sign-extended

// A software double (Metal has no 64-bit float), just enough for the CPU's integer affine with
// fractional parameters: (T)(double(x) * p0 + p1), each step rounded to nearest even. Subnormals are
// taken as zero: such a product or sum truncates to the same integer either way.
struct SoftF64 {
  ulong m;  // value = (-1)^s * m * 2^e, 2^52 <= m < 2^53 when finite and nonzero
  int e;
  bool s;
  uint cls;  // 0 zero, 1 finite nonzero, 2 inf, 3 NaN
};
inline SoftF64 sd_make(uint cls, bool s) {
  SoftF64 r;
  r.m = 0;
  r.e = 0;
  r.s = s;
  r.cls = cls;
  return r;
}
inline SoftF64 sd_unpack(ulong b) {
  const bool s = (b >> 63) != 0;
  const int ex = int((b >> 52) & 0x7ff);
  const ulong fr = b & ((1ul << 52) - 1);
  if (ex == 0x7ff) return sd_make(fr != 0 ? 3u : 2u, s);
  if (ex == 0) return sd_make(0u, s);
  SoftF64 r = sd_make(1u, s);
  r.m = fr | (1ul << 52);
  r.e = ex - 1075;
  return r;
}
// (m + a little more when sticky) * 2^e rounded to 53 bits, nearest even; m != 0, and m has at least
// 54 bits when sticky is set.
inline int top_bit(ulong m) {  // the index of m's highest set bit, m != 0
  int t = 0;
  for (int w = 32; w > 0; w /= 2) {
    if ((m >> w) != 0) {
      m >>= w;
      t += w;
    }
  }
  return t;
}
inline SoftF64 sd_round(bool s, ulong m, bool sticky, int e) {
  const int top = top_bit(m);
  const int shift = top - 52;
  SoftF64 r = sd_make(1u, s);
  if (shift > 0) {
    ulong q = m >> shift;
    const ulong rem = m & ((1ul << shift) - 1), half = 1ul << (shift - 1);
    if (rem > half || (rem == half && (sticky || (q & 1) != 0))) q += 1;
    int ee = e + shift;
    if (q == (1ul << 53)) {
      q >>= 1;
      ee += 1;
    }
    r.m = q;
    r.e = ee;
  } else {
    r.m = m << (-shift);
    r.e = e + shift;
  }
  const int biased = r.e + 1075;
  if (biased >= 0x7ff) return sd_make(2u, s);
  if (biased <= 0) return sd_make(0u, s);
  return r;
}
inline SoftF64 sd_from_int(bool neg, ulong mag) { return mag == 0 ? sd_make(0u, false) : sd_round(neg, mag, false, 0); }
inline SoftF64 sd_mul(SoftF64 a, SoftF64 b) {
  const bool s = a.s != b.s;
  if (a.cls == 3 || b.cls == 3) return sd_make(3u, s);
  if (a.cls == 2 || b.cls == 2) return sd_make((a.cls == 0 || b.cls == 0) ? 3u : 2u, s);
  if (a.cls == 0 || b.cls == 0) return sd_make(0u, s);
  // the 106-bit product from 32-bit halves
  const ulong a0 = a.m & 0xffffffffu, a1 = a.m >> 32, b0 = b.m & 0xffffffffu, b1 = b.m >> 32;
  const ulong p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  const ulong mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
  const ulong lo = (p00 & 0xffffffffu) | (mid << 32);
  const ulong hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
  const ulong top = (hi << 22) | (lo >> 42);
  return sd_round(s, top, (lo & ((1ul << 42) - 1)) != 0, a.e + b.e + 42);
}
inline SoftF64 sd_add(SoftF64 a, SoftF64 b) {
  if (a.cls == 3 || b.cls == 3) return sd_make(3u, false);
  if (a.cls == 2 && b.cls == 2) return sd_make(a.s == b.s ? 2u : 3u, a.s);
  if (a.cls == 2) return a;
  if (b.cls == 2) return b;
  if (a.cls == 0) return b;
  if (b.cls == 0) return a;
  if (b.e > a.e) {
    const SoftF64 t = a;
    a = b;
    b = t;
  }
  const ulong ma = a.m << 10;  // 10 guard bits
  const ulong mb = b.m << 10;
  const int d = a.e - b.e;
  const ulong mbs = d >= 64 ? 0ul : (mb >> d);
  const bool sticky = d >= 64 ? true : (d > 0 && (mb & ((1ul << d) - 1)) != 0);
  if (a.s == b.s) return sd_round(a.s, ma + mbs, sticky, a.e - 10);
  if (ma == mbs && !sticky) return sd_make(0u, false);
  if (ma >= mbs) return sticky ? sd_round(a.s, ma - mbs - 1, true, a.e - 10) : sd_round(a.s, ma - mbs, false, a.e - 10);
  return sd_round(b.s, mbs - ma, false, a.e - 10);  // only when d == 0, so nothing was shifted out
}
// The CPU's double -> T: truncation toward zero, NaN and values beyond (-9.3e18, 1.8e19) give 0,
// others wrap into T (int64 takes [2^63, 1.8e19) through uint64; below -2^63 it is INT64_MIN, as x86).
template <typename T> inline T sd_to_int(SoftF64 v) {
  if (v.cls != 1) return T(0);
  ulong ip;
  if (v.e >= 0) {
    if (v.e > 11) return T(0);  // |v| >= 2^64
    ip = v.m << v.e;
  } else {
    ip = v.e <= -53 ? 0ul : (v.m >> (-v.e));
  }
  if (!v.s) return ip >= 18000000000000000000ul ? T(0) : wrap_to<T>(ip);
  if (ip >= 9300000000000000000ul) return T(0);
  if (ip > 9223372036854775808ul) return wrap_to<T>(9223372036854775808ul);
  return wrap_to<T>(0ul - ip);
}

// ~x: bitwise on integers, logical on bool (~true would be -2, which is true again).
template <typename T> inline T bit_not(T x) { return T(~x); }
inline bool bit_not(bool x) { return !x; }

// Integer functors, the CPU's integer loops (cpp/cpu/kernels_isa.cpp, unary_loop_int): wrapping like
// numpy; ceil/floor/round/trunc are the identity.
#define EMBER_IUNARY(NAME, EXPR)                                                       \
  struct NAME {                                                                         \
    template <typename T> static T f(T x, constant IntUnaryParams& p) {                \
      (void)p;                                                                          \
      return EXPR;                                                                      \
    }                                                                                   \
  };
EMBER_IUNARY(ISqr, wrap_to<T>(bits_of(x) * bits_of(x)))
EMBER_IUNARY(IAbs, (x < T(0) ? wrap_to<T>(0ul - bits_of(x)) : x))
EMBER_IUNARY(INeg, wrap_to<T>(0ul - bits_of(x)))
EMBER_IUNARY(IRelu, (x < T(0) ? T(0) : x))
EMBER_IUNARY(ISign, (x > T(0) ? T(1) : (x < T(0) ? wrap_to<T>(~0ul) : T(0))))
EMBER_IUNARY(IBitNot, bit_not(x))
#undef EMBER_IUNARY
template <int K> struct IIdentity {  // one type per op (ceil, floor, round, trunc), for the instantiations
  template <typename T> static T f(T x, constant IntUnaryParams& p) {
    (void)p;
    return x;
  }
};
struct IClamp {
  template <typename T> static T f(T x, constant IntUnaryParams& p) {
    const long v = long(x);
    const bool lt = (p.flags & kLoAlways) != 0 || ((p.flags & kLoNever) == 0 && v < p.lo_thr);
    const bool gt = (p.flags & kHiAlways) != 0 || ((p.flags & kHiNever) == 0 && v > p.hi_thr);
    return lt ? T(p.lo_val) : (gt ? T(p.hi_val) : x);
  }
};
struct IAffine {
  template <typename T> static T f(T x, constant IntUnaryParams& p) {
    if ((p.flags & kAffineExact) != 0) return wrap_to<T>(bits_of(x) * p.mul + p.add);
    const bool neg = x < T(0);
    const SoftF64 xd = sd_from_int(neg, neg ? 0ul - bits_of(x) : bits_of(x));
    return sd_to_int<T>(sd_add(sd_mul(xd, sd_unpack(p.mul_bits)), sd_unpack(p.add_bits)));
  }
};

// --- kernels ----------------------------------------------------------------------------------------
// Floats compute in float; integers in their own type.
template <typename T> struct Compute { typedef float type; };
template <> struct Compute<long> { typedef long type; };
template <> struct Compute<uint> { typedef uint type; };
template <> struct Compute<uchar> { typedef uchar type; };
template <> struct Compute<int> { typedef int type; };
template <> struct Compute<bool> { typedef bool type; };

constant constexpr uint kReads = 4;  // elements per thread in the contiguous kernel

template <typename Op, typename T, typename P>
kernel void unary_contig(device const T* in [[buffer(0)]], device T* out [[buffer(1)]],
                         constant uint& n [[buffer(2)]], constant P& p [[buffer(3)]],
                         uint gid [[thread_position_in_grid]]) {
  typedef typename Compute<T>::type C;
  const uint base = gid * kReads;
  if (base + kReads <= n) {
    for (uint k = 0; k < kReads; ++k) out[base + k] = T(Op::f(C(in[base + k]), p));
  } else {
    for (uint i = base; i < n; ++i) out[i] = T(Op::f(C(in[i]), p));
  }
}

// out (contiguous, n elements) = op(in viewed through shape/strides/offset, in elements).
template <typename Op, typename T, typename P>
kernel void unary_strided(device const T* in [[buffer(0)]], device T* out [[buffer(1)]],
                          constant uint& n [[buffer(2)]], constant P& p [[buffer(3)]],
                          constant uint& ndim [[buffer(4)]], constant uint* shape [[buffer(5)]],
                          constant long* strides [[buffer(6)]], constant long& offset [[buffer(7)]],
                          uint gid [[thread_position_in_grid]]) {
  typedef typename Compute<T>::type C;
  if (gid >= n) return;
  uint rem = gid;
  long at = offset;
  for (int d = int(ndim) - 1; d >= 0; --d) {
    at += long(rem % shape[d]) * strides[d];
    rem /= shape[d];
  }
  out[gid] = T(Op::f(C(in[at]), p));
}

#define instantiate_unary_one(name, Op, tname, T, P)                                                       \
  template [[host_name("unary_contig_" #name "_" #tname)]] [[kernel]] void unary_contig<Op, T, P>(         \
      device const T* in [[buffer(0)]], device T* out [[buffer(1)]], constant uint& n [[buffer(2)]],       \
      constant P& p [[buffer(3)]], uint gid [[thread_position_in_grid]]);                                  \
  template [[host_name("unary_strided_" #name "_" #tname)]] [[kernel]] void unary_strided<Op, T, P>(       \
      device const T* in [[buffer(0)]], device T* out [[buffer(1)]], constant uint& n [[buffer(2)]],       \
      constant P& p [[buffer(3)]], constant uint& ndim [[buffer(4)]], constant uint* shape [[buffer(5)]],  \
      constant long* strides [[buffer(6)]], constant long& offset [[buffer(7)]],                           \
      uint gid [[thread_position_in_grid]]);

#define instantiate_unary(name, Op)                               \
  instantiate_unary_one(name, Op, float32, float, UnaryParams)    \
  instantiate_unary_one(name, Op, float16, half, UnaryParams)     \
  instantiate_unary_one(name, Op, bfloat16, bfloat, UnaryParams)
#define instantiate_unary_uint(name, Op)                           \
  instantiate_unary_one(name, Op, uint32, uint, IntUnaryParams)    \
  instantiate_unary_one(name, Op, uint8, uchar, IntUnaryParams)
#define instantiate_unary_sint(name, Op)                           \
  instantiate_unary_one(name, Op, int64, long, IntUnaryParams)     \
  instantiate_unary_one(name, Op, int32, int, IntUnaryParams)
#define instantiate_unary_int(name, Op)                            \
  instantiate_unary_sint(name, Op)                                 \
  instantiate_unary_uint(name, Op)

instantiate_unary(exp, Exp)
instantiate_unary(log, Log)
instantiate_unary(sin, Sin)
instantiate_unary(cos, Cos)
instantiate_unary(tanh, Tanh)
instantiate_unary(sqrt, Sqrt)
instantiate_unary(sqr, Sqr)
instantiate_unary(abs, Abs)
instantiate_unary(neg, Neg)
instantiate_unary(recip, Recip)
instantiate_unary(relu, Relu)
instantiate_unary(gelu, Gelu)
instantiate_unary(silu, Silu)
instantiate_unary(erf, Erf)
instantiate_unary(ceil, Ceil)
instantiate_unary(floor, Floor)
instantiate_unary(round, Round)
instantiate_unary(sign, Sign)
instantiate_unary(sigmoid, Sigmoid)
instantiate_unary(affine, Affine)
instantiate_unary(powf, Powf)
instantiate_unary(clamp, Clamp)
instantiate_unary(log1p, Log1p)
instantiate_unary(expm1, Expm1)
instantiate_unary(rsqrt, Rsqrt)
instantiate_unary(log2, Log2)
instantiate_unary(log10, Log10)
instantiate_unary(tan, Tan)
instantiate_unary(sinh, Sinh)
instantiate_unary(cosh, Cosh)
instantiate_unary(asin, Asin)
instantiate_unary(acos, Acos)
instantiate_unary(atan, Atan)
instantiate_unary(trunc, Trunc)
instantiate_unary(elu, Elu)
instantiate_unary(leaky_relu, LeakyRelu)
instantiate_unary(softplus, Softplus)
instantiate_unary(mish, Mish)
instantiate_unary(hardswish, Hardswish)
instantiate_unary(hardsigmoid, Hardsigmoid)
instantiate_unary(gelu_tanh, GeluTanh)

// Integer ops, as the CPU registers them; neg is refused on unsigned types (no instantiation).
instantiate_unary_int(sqr, ISqr)
instantiate_unary_int(abs, IAbs)
instantiate_unary_sint(neg, INeg)
instantiate_unary_int(relu, IRelu)
instantiate_unary_int(sign, ISign)
instantiate_unary_int(ceil, IIdentity<0>)
instantiate_unary_int(floor, IIdentity<1>)
instantiate_unary_int(round, IIdentity<2>)
instantiate_unary_int(trunc, IIdentity<3>)
instantiate_unary_int(clamp, IClamp)
instantiate_unary_int(affine, IAffine)
instantiate_unary_int(bitwise_not, IBitNot)
instantiate_unary_one(bitwise_not, IBitNot, bool, bool, IntUnaryParams)
