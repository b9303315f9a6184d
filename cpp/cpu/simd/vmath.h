// Branch-free float math (exp, log, tanh, sigmoid, erf, sin/cos) written so the compiler vectorises it.
// Included only inside ISA translation units, within an anonymous namespace (internal linkage), so
// each ISA keeps its own copy. Accuracy: exp/log within ~2 ulp over the normal range.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

// This ISA's vector width in bytes: the width of the explicit GCC vector types of the kernels.
#if defined(__AVX512F__)
constexpr int kVB = 64;
#elif defined(__AVX2__)
constexpr int kVB = 32;
#else
constexpr int kVB = 16;
#endif

static inline float vm_bits_to_f(int32_t i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline int32_t vm_f_to_bits(float f) { int32_t i; std::memcpy(&i, &f, 4); return i; }

// Horner's rule: c[0] x^(N-1) + c[1] x^(N-2) + ... + c[N-1], coefficients highest first as the fits list
// them (a constant trip count: unrolled, so loops calling it still vectorise).
template <int N> static inline float vm_horner(float x, const float (&c)[N]) {
  float p = c[0];
  for (int i = 1; i < N; ++i) p = p * x + c[i];
  return p;
}

// e^x = 2^n * e^r for a finite x (the caller clamps it): n = round(x / ln2) is returned in `n`, and
// e^r (|r| <= ln2/2, ln2 in two parts, degree-6 polynomial) is the result; callers scale by 2^n.
static inline float vm_exp_reduced(float x, float& n) {
  const float t = x * 1.44269504088896341f;
  n = (t + 12582912.0f) - 12582912.0f;  // round to nearest integer (1.5 * 2^23 trick)
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const float p = vm_horner(r, {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f,
      1.6666665459e-1f, 5.0000001201e-1f});
  return p * r * r + r + 1.0f;
}

// exp(x) = 2^n * e^r. 2^n is applied as two factors so that results down to the subnormal range
// (x >= -103.97) are right, like libm's expf.
static inline float vm_exp(float x) {
  const float hi = 88.72283172607421875f, lo = -103.972084045410f;  // hi: largest x with finite expf(x)
  // A NaN x is clamped too (to lo: it fails x >= lo), so that n below is a small integer: converting a
  // NaN to int and shifting the negative result would be undefined. The last line returns the NaN.
  const float xc = x > hi ? hi : (x >= lo ? x : lo);
  float n;
  const float p = vm_exp_reduced(xc, n);
  const int32_t ni = (int32_t)n, n1 = ni >> 1, n2 = ni - n1;  // each half is a normal power of two
  float res = p * vm_bits_to_f((int32_t)((uint32_t)(n1 + 127) << 23)) * vm_bits_to_f((int32_t)((uint32_t)(n2 + 127) << 23));
  res = x < lo ? 0.0f : res;
  res = x > hi ? INFINITY : res;
  return x != x ? x : res;
}

// log(x) for x > 0: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), polynomial in (m - 1).
static inline float vm_log(float x) {
  const bool sub = x < 1.17549435e-38f;  // subnormal: scale by 2^23 into the normal range first
  const float xs = sub ? x * 8388608.0f : x;
  int32_t bits = vm_f_to_bits(xs);
  int32_t e = ((bits >> 23) & 0xff) - 127 - (sub ? 23 : 0);
  float m = vm_bits_to_f((bits & 0x007fffff) | 0x3f800000);  // [1, 2)
  bool big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  float ef = (float)(big ? e + 1 : e);
  float f = m - 1.0f;
  float z = f * f;
  const float p = vm_horner(f, {7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f, -1.2420140846e-1f,
      1.4249322787e-1f, -1.6668057665e-1f, 2.0000714765e-1f, -2.4999993993e-1f, 3.3333331174e-1f});
  float y = f * z * p;
  y += ef * -2.12194440e-4f;
  y += -0.5f * z;
  float res = f + y + ef * 0.693359375f;
  // Special values: zero -> -inf, negatives -> nan.
  res = x == 0.0f ? -INFINITY : res;
  res = x < 0.0f ? NAN : res;
  res = x == INFINITY ? INFINITY : res;
  return x != x ? x : res;
}

// tanh: odd polynomial near zero (keeps relative accuracy), 1 - 2/(e^{2x}+1) elsewhere.
static inline float vm_tanh(float x) {
  float ax = x < 0 ? -x : x;
  float z = x * x;
  const float p = vm_horner(z, {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f, 1.33314422036e-1f,
      -3.33332819422e-1f});
  float small = x + x * z * p;
  float e = vm_exp(2.0f * ax);
  float big = 1.0f - 2.0f / (e + 1.0f);
  big = x < 0 ? -big : big;
  return ax < 0.625f ? small : big;
}

static inline float vm_sigmoid(float x) { return 1.0f / (1.0f + vm_exp(-x)); }

// erf: x * P(x^2) for |x| <= 1 (keeps relative accuracy near 0); 1 - e^{-x^2} * R(|x|) above, with R a
// fit of erfc(x) e^{x^2} on [1, 4] in t = |x| - 2.5 (a centred variable keeps the Horner sums tame);
// |x| >= 4 gives +-1, as erf rounds to there in float. Both polynomials are Chebyshev fits of this
// project's; within 2.4 ulp of erf on a dense grid over [-6, 6] and down to 1e-30 (float evaluation).
static inline float vm_erf(float x) {
  const float ax = x < 0 ? -x : x;
  const float z = x * x;
  const float pa = vm_horner(z, {-5.654007217e-04f, 4.923252925e-03f, -2.671636274e-02f, 1.128036353e-01f,
      -3.761234965e-01f, 1.128379127e+00f});
  const float small = x * pa;
  const float t = (ax > 4.0f ? 4.0f : ax) - 2.5f;
  const float pb = vm_horner(t, {1.671832676e-06f, -6.386209744e-06f, 1.435350619e-05f, -5.358525088e-05f,
      2.129723539e-04f, -7.389983919e-04f, 2.465982165e-03f, -7.999345154e-03f, 2.493820378e-02f,
      -7.434760099e-02f, 2.108063575e-01f});
  float big = 1.0f - vm_exp(-z) * pb;
  big = x < 0 ? -big : big;
  return ax <= 1.0f ? small : big;  // a NaN x fails the test and comes out of `big` as NaN
}

// gelu = x * Phi(x) and its derivative Phi + x * phi(x) in one branch, phi(x) = e^(-x^2/2) / sqrt(2 pi).
// Through erfc: with y = x / sqrt(2), z = |y| and t = 1 / (1 + z / 2), erfc(z) / 2 = t * Q(t) * e^(-z^2),
// Q our own fit (relative error 4.3e-8 up to z = 10, its coefficients halved here); Phi(x) is
// 1 - erfc(z) / 2 above 0, erfc(z) / 2 below. So negative x keep their relative accuracy
// (0.5 * (1 + erf(y)) loses every digit from x = -5 on), erf's two branches are not both evaluated, and
// phi shares e^(-z^2). z^2 = x^2 / 2 is split exactly with an FMA (base x86-64: Dekker's product), since
// the error of exp's argument is its result's relative error. e^(-z^2) multiplies last (x * tQ first):
// every intermediate stays normal, as a subnormal operand or result takes a microcode assist (gelu was
// ~15x slower around |x| = 13). Past z^2 = 86.41 (|x| > 13.146, where |gelu| < FLT_MIN)
// e^(-z^2) is taken as 0. Special values: gelu(inf) = inf, gelu(-inf) = -inf * 0 = NaN (as torch), and
// the derivative's x * phi is inf * 0 = NaN at both; NaN stays NaN.
// 86.41f's bits, a variable: as a constant, GCC folded exp of the clamped branch and put the select
// back as two blends after the exp (it is never written).
inline uint32_t vm_gelu_far_bits = 0x42acd1ecu;
struct VmGeluParts {
  float tq, e;  // erfc(z) / 2 = tq * e
};
static inline VmGeluParts vm_gelu_parts(float x) {
  const float y = x * 0.70710678118654752f, z = std::fabs(y);
  const float t = 1.0f / (1.0f + 0.5f * z);
  const float q = vm_horner(t, {-2.953455783e-02f, 1.422918588e-01f, -2.436037213e-01f, 1.390196830e-01f,
      -1.328625251e-02f, 1.013254300e-01f, 1.215573698e-01f, 1.411869377e-01f, 1.410432458e-01f});
  const float xx = x * x, zz = 0.5f * xx;  // z^2 = x^2 / 2 from x itself: y's rounding would cost ~10 ulp
#if defined(__FMA__)
  const float lo = 0.5f * std::fma(x, x, -xx);  // z^2 = zz + lo exactly
#else
  // no FMA: Dekker's product (x split into 12-bit halves), exact as well; |x| < 13.2 wherever it is used
  const float sp = 4097.0f * x, xh = sp - (sp - x), xl = x - xh;
  const float lo = 0.5f * (((xh * xh - xx) + 2.0f * xh * xl) + xl * xl);
#endif
  float n;
  // !(zz <= ...): a NaN x takes the far branch too, so n stays a small integer (no NaN to int); the
  // result is still NaN, from t. The clamp is an unsigned min of zz's bits (zz >= +0; a NaN of either
  // sign is above 86.41's bits): one integer min, where the float select cost two AVX2 blends.
  const bool far = !(zz <= 86.41f);
  const uint32_t zb = (uint32_t)vm_f_to_bits(zz), cb = vm_gelu_far_bits;
  const float zc = vm_bits_to_f((int32_t)(zb < cb ? zb : cb));
  const float p = vm_exp_reduced(-zc, n);  // 2^n a normal power of two: one factor
  const float e = far ? 0.0f : p * vm_bits_to_f((int32_t)((uint32_t)((int32_t)n + 127) << 23)) * (1.0f - lo);
  return {t * q, e};
}
static inline float vm_gelu(float x) {
  const VmGeluParts g = vm_gelu_parts(x);
  // +inf: its tail term is 14 * 0, not inf * 0. A signed min of x's bits (an AVX2 integer min, not a
  // blend): negative x and -NaN stay, above 14 gives 14 (+NaN too: tq is NaN, so the tail stays NaN).
  const int32_t xb = vm_f_to_bits(x), fb = 0x41600000;  // 14.0f
  const float xc = vm_bits_to_f(xb < fb ? xb : fb);
  const float tail = (xc * g.tq) * g.e;     // x * erfc(z) / 2, normal down to FLT_MIN
  return x * 0.70710678118654752f > 0 ? x - tail : tail;
}
static inline float vm_gelu_grad(float x) {
  const VmGeluParts g = vm_gelu_parts(x);
  const float c = 0.39894228040143267794f;  // x * phi(x) = x * c * e
  // explicit FMAs where there is one: left to the compiler, contraction differed between a loop's
  // vector body and its tail, and the fused bias_gelu must match gelu bit for bit
#if defined(__FMA__)
  const float right = std::fma(std::fma(x, c, -g.tq), g.e, 1.0f), left = std::fma(x, c, g.tq) * g.e;
#else
  const float right = 1.0f + (x * c - g.tq) * g.e, left = (g.tq + x * c) * g.e;
#endif
  return x * 0.70710678118654752f > 0 ? right : left;
}

// sin (shift 0) or cos (shift 1) from x = j * pi/2 + r, |r| <= pi/4: float polynomials for sin and cos
// (our own Chebyshev fits), picked and signed by j's quadrant.
static inline float vm_sincos_reduced(float r, float j, int shift) {
  const float z = r * r;
  const float ps = vm_horner(z, {2.724996370e-06f, -1.984008714e-04f, 8.333331876e-03f, -1.666666666e-01f});
  const float s = r == 0.0f ? r : r + r * z * ps;  // -0 + (+0) would be +0: keep sin(-0) = -0
  const float pc = vm_horner(z, {-2.730098631e-07f, 2.480060068e-05f, -1.388888767e-03f, 4.166666666e-02f});
  const float c = 1.0f - 0.5f * z + z * z * pc;
  const int q = (int)j + shift;
  const float v = (q & 1) ? c : s;
  return (q & 2) ? -v : v;
}

// sin/cos of |x| <= kSinCosMax; callers send larger, infinite and NaN arguments to libm. The reduction
// runs in double with pi/2 in three parts (j * part is exact for j < 2^22), so r keeps its relative
// accuracy even next to a multiple of pi. Within 1.6 ulp of sin and cos (every float up to 2^22 checked).
constexpr float kSinCosMax = 4194304.0f;
static inline float vm_sincos(float x, int shift) {
  const double xd = x;
  const double j = (xd * 0.63661977236758134308 + 6755399441055744.0) - 6755399441055744.0;
  const float rr = (float)(((xd - j * 1.5707963276654482) - j * -8.7055156920007315e-10) - j * -3.5034343980899299e-19);
  return vm_sincos_reduced(j == 0.0 ? x : rr, (float)j, shift);  // x itself below pi/4 (keeps -0)
}

#if defined(__FMA__)
// The same in float, for |x| <= kSinCosFloatMax, with FMAs: the first step x - j * p1 is exact (the
// result is small and on x's grid), the next two round once each. Half the work of the double reduction
// (no widening to half-width vectors). Every float up to 2^19 checked: within 1.58 ulp, as the double
// reduction; past 2^19 errors reach 2.3 ulp, so larger arguments take vm_sincos.
constexpr float kSinCosFloatMax = 524288.0f;
static inline float vm_sincos_fma(float x, int shift) {
  const float j = (x * 0.636619772f + 12582912.0f) - 12582912.0f;
  float r = std::fma(-j, 1.57079637050628662f, x);
  r = std::fma(-j, -4.37113882867379e-08f, r);
  r = std::fma(-j, -1.71512451000588e-15f, r);
  return vm_sincos_reduced(j == 0.0f ? x : r, j, shift);
}
#endif

// fmod(a, b) of floats, exactly as fmodf, where |a / b| < 2^29 and b is finite; `other` is set to 1
// for the rest (b zero or infinite, a infinite, NaNs, larger quotients), whose results callers take
// from libm. In double, with |q| = |a / b| < 2^29:
// - n = trunc(q) is exact. For |q| >= 2, a lies on the grid of ulp(b) > |b| * 2^-24, so the true
//   quotient is an integer (then q is exact) or more than 2^-24 from one: over half an ulp of a double
//   below 2^29 (2^-25), so q cannot round onto the next integer. Below 2 that half ulp is 2^-53;
// - n * b (n < 2^29 times b's 24-bit significand) fits 53 bits, and so does a - n * b, which lies
//   in (-|b|, |b|) on the grid of the smaller ulp of a and b: both exact, with or without an FMA.
static inline float vm_fmod(float a, float b, int32_t& other) {
  const double da = a, db = b, q = da / db;
  other = !(std::fabs(q) < 536870912.0 && std::fabs(b) <= 3.40282347e+38f);
  return (float)std::copysign(da - std::trunc(q) * db, da);  // a zero result has a's sign, as in fmodf
}

#if defined(__FMA__)
// fmod(a, b) of doubles, exactly as fmod, where |a / b| < 2^53 and b is finite (`other` as above). The
// rounded quotient can only round up onto the next integer, so n = trunc(a / b) is the true one or one
// too far; a - n * b is representable either way (the remainder, or it less |b|), so one FMA gives it
// exactly, and adding back |b| when its sign is not a's is exact too. FMA builds only: without the
// instruction std::fma is a libm call per element.
static inline double vm_fmod(double a, double b, int64_t& other) {
  const double q = a / b, ab = std::fabs(b);
  other = !(std::fabs(q) < 9007199254740992.0 && ab <= 1.7976931348623157e308);
  const double r = std::fma(-std::trunc(q), b, a);
  const double t = std::copysign(1.0, a) * r;  // a's side up: belongs in [0, |b|)
  return std::copysign(t < 0 ? t + ab : t, a);  // a zero result has a's sign, as in fmod
}
#endif

// exp(x) - 1 keeping relative accuracy near 0: with x = n ln2 + r (as vm_exp), e^r - 1 = r + r^2 P(r)
// comes from the same polynomial without its final + 1, and expm1 = 2^n (e^r - 1) + (2^n - 1). The
// argument is clamped to [-20, 20] (2^n stays normal); beyond, the result is exp(x), or -1 in float.
static inline float vm_expm1(float x) {
  const float xc = x > 20.0f ? 20.0f : (x < -20.0f ? -20.0f : x);
  const float t = xc * 1.44269504088896341f;
  const float n = (t + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const float p = vm_horner(r, {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f,
      1.6666665459e-1f, 5.0000001201e-1f});
  const float q = p * r * r + r;  // e^r - 1
  const float two_n = vm_bits_to_f(((int32_t)n + 127) << 23);
  float res = n == 0.0f ? q : two_n * q + (two_n - 1.0f);
  res = x > 20.0f ? vm_exp(x) : res;
  res = x < -20.0f ? -1.0f : res;
  return x != x || x == 0.0f ? x : res;  // the reduction turns -0 into +0: expm1(-0) is -0
}

// log(1 + x) = log(u) * x / (u - 1) with u = 1 + x rounded: the factor corrects u's rounding to
// first order (Goldberg's form), so small x keep their relative accuracy; x itself where u == 1.
static inline float vm_log1p(float x) {
  const float u = 1.0f + x;
  const float d = u - 1.0f;
  float res = vm_log(u) * (x / (d == 0.0f ? 1.0f : d));
  res = d == 0.0f ? x : res;
  return x == INFINITY ? x : res;  // inf / inf would be NaN
}

// log2 / log10 as e * log_b(2) + log(m) * log_b(e) from vm_log's reduction x = m * 2^e: exact powers
// of two give exact log2, and small results near x = 1 keep their relative accuracy.
static inline float vm_log_b(float x, float e_scale, float m_scale) {
  const bool sub = x < 1.17549435e-38f;
  const float xs = sub ? x * 8388608.0f : x;
  const int32_t bits = vm_f_to_bits(xs);
  const int32_t e = ((bits >> 23) & 0xff) - 127 - (sub ? 23 : 0);
  float m = vm_bits_to_f((bits & 0x007fffff) | 0x3f800000);
  const bool big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  const float ef = (float)(big ? e + 1 : e);
  const float f = m - 1.0f, z = f * f;
  const float p = vm_horner(f, {7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f, -1.2420140846e-1f,
      1.4249322787e-1f, -1.6668057665e-1f, 2.0000714765e-1f, -2.4999993993e-1f, 3.3333331174e-1f});
  const float lm = f + (f * z * p - 0.5f * z);  // log(m), |log(m)| <= ln(2) / 2
  float res = ef * e_scale + lm * m_scale;
  res = x == 0.0f ? -INFINITY : res;
  res = x < 0.0f ? NAN : res;
  res = x == INFINITY ? INFINITY : res;
  return x != x ? x : res;
}
static inline float vm_log2(float x) { return vm_log_b(x, 1.0f, 1.44269504088896341f); }
static inline float vm_log10(float x) { return vm_log_b(x, 0.301029995663981195f, 0.434294481903251828f); }

// tan from the sin/cos reduction: both polynomials of r at once, s / c or -c / s by j's parity (no
// cancellation: |r| <= pi/4 keeps c >= 0.7, and s keeps r's relative accuracy next to the poles).
static inline float vm_tan_reduced(float r, float j) {
  const float z = r * r;
  const float ps = vm_horner(z, {2.724996370e-06f, -1.984008714e-04f, 8.333331876e-03f, -1.666666666e-01f});
  const float s = r == 0.0f ? r : r + r * z * ps;
  const float pc = vm_horner(z, {-2.730098631e-07f, 2.480060068e-05f, -1.388888767e-03f, 4.166666666e-02f});
  const float c = 1.0f - 0.5f * z + z * z * pc;
  return ((int)j & 1) ? -c / s : s / c;
}
static inline float vm_tan(float x) {  // |x| <= kSinCosMax; callers send the rest to libm
  const double xd = x;
  const double j = (xd * 0.63661977236758134308 + 6755399441055744.0) - 6755399441055744.0;
  const float rr = (float)(((xd - j * 1.5707963276654482) - j * -8.7055156920007315e-10) - j * -3.5034343980899299e-19);
  return vm_tan_reduced(j == 0.0 ? x : rr, (float)j);
}

// cosh and sinh from exp: above |x| = 10 the e^-|x| half is below float's precision, and
// e^|x| / 2 = (e^(|x|/2) / 2) * e^(|x|/2) stays finite up to cosh's own overflow (89.4); below, sinh
// takes expm1 so that small x keep their relative accuracy.
static inline float vm_cosh(float x) {
  const float ax = std::fabs(x);
  const float e = vm_exp(ax > 10.0f ? 10.0f : ax);
  const float h = vm_exp(0.5f * ax);
  return ax > 10.0f ? (0.5f * h) * h : 0.5f * e + 0.5f / e;
}
static inline float vm_sinh(float x) {
  const float ax = std::fabs(x);
  const float em = vm_expm1(ax > 10.0f ? 10.0f : ax);
  const float h = vm_exp(0.5f * ax);
  const float r = ax > 10.0f ? (0.5f * h) * h : 0.5f * (em + em / (em + 1.0f));
  return std::copysign(r, x);  // also -0 and NaN's sign
}

// asin(s) for |s| <= 0.5: s + s^3 P(s^2), P this project's fit (relative error 3e-10 on [0, 0.25]).
static inline float vm_asin_small(float s) {
  const float z = s * s;
  const float p = vm_horner(z, {3.7516450918e-02f, 1.4438604312e-02f, 3.1807718575e-02f, 4.4516955157e-02f,
      7.5005041847e-02f, 1.6666659991e-01f});
  return s + s * z * p;
}
// asin and acos: |x| <= 1/2 directly; above, through s = sqrt((1 - |x|) / 2) (exact but for the
// sqrt): asin|x| = pi/2 - 2 asin(s), acos x = 2 asin(s) or pi - 2 asin(s); pi in two parts.
static inline float vm_asin(float x) {
  const float ax = std::fabs(x);
  const float s = std::sqrt(0.5f * (1.0f - (ax > 1.0f ? 1.0f : ax)));
  const float w = vm_asin_small(ax > 0.5f ? s : ax);
  const float big = (1.57079637050628662f - 2.0f * w) + -4.37113882867379e-08f;
  const float r = ax > 0.5f ? big : w;
  return ax > 1.0f ? NAN : std::copysign(r, x);  // NaN stays NaN (the copysign of a NaN r)
}
static inline float vm_acos(float x) {
  const float ax = std::fabs(x);
  const float s = std::sqrt(0.5f * (1.0f - (ax > 1.0f ? 1.0f : ax)));
  const float w = vm_asin_small(ax > 0.5f ? s : x);
  const float mid = 1.57079637050628662f - (w - -4.37113882867379e-08f);  // pi/2 - asin(x)
  const float pos = 2.0f * w;
  const float neg = (3.14159274101257324f - 2.0f * w) + -8.74227765734758e-08f;
  float r = ax > 0.5f ? (x > 0.0f ? pos : neg) : mid;
  r = ax > 1.0f ? NAN : r;
  return x != x ? x : r;
}
// atan: |x| > 1 through pi/2 - atan(1/|x|); on [0, 1], y + y^3 P(y^2) with this project's fit
// (relative error 4e-10).
static inline float vm_atan(float x) {
  const float ax = std::fabs(x);
  const bool inv = ax > 1.0f;
  const float y = inv ? 1.0f / ax : ax;
  const float z = y * y;
  const float p = vm_horner(z, {1.1137718659e-03f, -7.3178721096e-03f, 2.2539687724e-02f, -4.4689730872e-02f,
      6.7415821584e-02f, -8.8110847946e-02f, 1.1058221928e-01f, -1.4279832785e-01f, 1.9999671103e-01f,
      -3.3333326899e-01f});
  const float a = y + y * z * p;
  const float r = inv ? (1.57079637050628662f - a) + -4.37113882867379e-08f : a;
  return std::copysign(r, x);  // atan(+-inf) = +-pi/2 (1/inf = 0); NaN stays NaN
}

// The same functions for any compute type: float through the vectorisable versions above, double
// through libm. Used by the elementwise functors and the fused backward kernels alike.
template <typename C> static inline C fm_exp(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_exp(x); else return std::exp(x);
}
template <typename C> static inline C fm_log(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_log(x); else return std::log(x);
}
template <typename C> static inline C fm_tanh(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_tanh(x); else return std::tanh(x);
}
template <typename C> static inline C fm_sigmoid(C x) { return C(1) / (C(1) + fm_exp<C>(-x)); }
template <typename C> static inline C fm_gelu(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_gelu(x);
  else return C(0.5) * x * (C(1) + std::erf(x * C(0.70710678118654752440)));
}
// d/dx gelu = Phi(x) + x * phi(x) (the exact erf form, torch's default gelu)
template <typename C> static inline C fm_gelu_grad(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_gelu_grad(x);
  else return C(0.5) * (C(1) + std::erf(x * C(0.70710678118654752440))) +
              x * std::exp(C(-0.5) * x * x) * C(0.39894228040143267794);
}
template <typename C> static inline C fm_erf(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_erf(x); else return std::erf(x);
}
template <typename C> static inline C fm_expm1(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_expm1(x); else return std::expm1(x);
}
template <typename C> static inline C fm_log1p(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_log1p(x); else return std::log1p(x);
}
template <typename C> static inline C fm_log2(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_log2(x); else return std::log2(x);
}
template <typename C> static inline C fm_log10(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_log10(x); else return std::log10(x);
}
template <typename C> static inline C fm_sinh(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_sinh(x); else return std::sinh(x);
}
template <typename C> static inline C fm_cosh(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_cosh(x); else return std::cosh(x);
}
template <typename C> static inline C fm_asin(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_asin(x); else return std::asin(x);
}
template <typename C> static inline C fm_acos(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_acos(x); else return std::acos(x);
}
template <typename C> static inline C fm_atan(C x) {
  if constexpr (std::is_same_v<C, float>) return vm_atan(x); else return std::atan(x);
}
