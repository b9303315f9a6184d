// One struct per elementwise op, usable on scalars of the compute type (float for halves).
// Included only inside ISA translation units, in an anonymous namespace.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cpu/simd/vmath.h"

// Unary functors: `kFloatOnly` ops have no integer version.
#define EMBER_UNARY(NAME, FLOAT_ONLY, EXPR)                              \
  struct NAME {                                                          \
    static constexpr bool kFloatOnly = FLOAT_ONLY;                       \
    template <typename C> static inline C f(C x, C p0, C p1) { return EXPR; } \
  };
EMBER_UNARY(UExp, true, fm_exp<C>(x))
EMBER_UNARY(ULog, true, fm_log<C>(x))
EMBER_UNARY(USin, true, std::sin(x))
EMBER_UNARY(UCos, true, std::cos(x))
EMBER_UNARY(UTanh, true, fm_tanh<C>(x))
EMBER_UNARY(USqrt, true, std::sqrt(x))
EMBER_UNARY(USqr, false, x * x)
EMBER_UNARY(UAbs, false, (x < C(0) ? C(0) - x : x))
EMBER_UNARY(UNeg, false, C(0) - x)
EMBER_UNARY(URecip, true, C(1) / x)
EMBER_UNARY(URelu, false, (x < C(0) ? C(0) : x))
EMBER_UNARY(UGelu, true, fm_gelu<C>(x))
EMBER_UNARY(USilu, true, x * fm_sigmoid<C>(x))
EMBER_UNARY(UErf, true, fm_erf<C>(x))
EMBER_UNARY(UCeil, false, std::ceil(x))
EMBER_UNARY(UFloor, false, std::floor(x))
EMBER_UNARY(URound, false, std::nearbyint(x))
EMBER_UNARY(USign, false, (x > C(0) ? C(1) : (x < C(0) ? C(-1) : x)))
EMBER_UNARY(USigmoid, true, fm_sigmoid<C>(x))
EMBER_UNARY(UAffine, false, x * p0 + p1)
EMBER_UNARY(UPowf, true, std::pow(x, p0))
// min(max(x, lo), hi): hi wins when lo > hi, as in torch and numpy; NaN stays NaN
EMBER_UNARY(UClamp, false, ((x < p0 ? p0 : x) > p1 ? p1 : (x < p0 ? p0 : x)))
EMBER_UNARY(ULog1p, true, fm_log1p<C>(x))
EMBER_UNARY(UExpm1, true, fm_expm1<C>(x))
EMBER_UNARY(URsqrt, true, C(1) / std::sqrt(x))
EMBER_UNARY(ULog2, true, fm_log2<C>(x))
EMBER_UNARY(ULog10, true, fm_log10<C>(x))
EMBER_UNARY(UTan, true, std::tan(x))  // float goes through vm_tan in the sin/cos block loop
EMBER_UNARY(USinh, true, fm_sinh<C>(x))
EMBER_UNARY(UCosh, true, fm_cosh<C>(x))
EMBER_UNARY(UAsin, true, fm_asin<C>(x))
EMBER_UNARY(UAcos, true, fm_acos<C>(x))
EMBER_UNARY(UAtan, true, fm_atan<C>(x))
EMBER_UNARY(UTrunc, false, std::trunc(x))
#undef EMBER_UNARY

// The activations with parameters, torch's definitions: `f` the forward (a UnaryOp), `d` its derivative
// f'(x) for the fused backward (ActKind); both branch-free selects, so the loops over them vectorise.
// At a NaN x the result is NaN, and so is the derivative wherever torch's own float32 and float64
// kernels disagree about it (elu, hardswish); leaky_relu's is the slope and hardsigmoid's 0, as torch's.
// At x = +-inf the derivatives are their limits (mish 1, gelu_tanh 1 / 0) where torch computes inf * 0.
struct UElu {  // p0 = alpha
  static constexpr bool kFloatOnly = true;
  template <typename C> static inline C f(C x, C p0, C) { return x <= C(0) ? p0 * fm_expm1<C>(x) : x; }
  template <typename C> static inline C d(C x, C p0, C) { return x > C(0) ? C(1) : p0 * fm_exp<C>(x); }
};
struct ULeakyRelu {  // p0 = negative_slope
  static constexpr bool kFloatOnly = true;
  template <typename C> static inline C f(C x, C p0, C) { return x > C(0) ? x : x * p0; }
  template <typename C> static inline C d(C x, C p0, C) { return x > C(0) ? C(1) : p0; }
};
// p0 = beta, p1 = threshold: x where beta * x > threshold, else log(1 + e^(beta x)) / beta, taken as
// max(bx, 0) + log1p(e^-|bx|) so that it never overflows (torch's log1p(exp(bx)) is inf in float from
// bx = 89 on, with a threshold raised past it); the derivative is sigmoid(bx).
struct USoftplus {
  static constexpr bool kFloatOnly = true;
  // log(1 + t) for t = e^-|bx| in [0, 1] as t * P(t), P a degree-9 least-squares fit of log1p(t) / t on
  // Chebyshev nodes of [0, 1] (this project's; within 2 ulp of log1p in float evaluation): no range
  // reduction and no division, a third less work than a log on [1, 2] with its rounding correction.
  // P(0) = 1 keeps tiny t exact; NaN passes through.
  static inline float log1p_unit(float t) {
    return t * vm_horner(t, {-3.2563784625e-03f, 1.9907161593e-02f, -5.7064201683e-02f, 1.0614264756e-01f,
        -1.5311862528e-01f, 1.9678117335e-01f, -2.4954558909e-01f, 3.3330005407e-01f, -4.9999904633e-01f,
        1.0000000000e+00f});
  }
  template <typename C> static inline C f(C x, C p0, C p1) {
    const C bx = x * p0, ax = bx < C(0) ? C(0) - bx : bx;
    C l;
    if constexpr (std::is_same_v<C, float>) l = log1p_unit(vm_exp(-ax));
    else l = std::log1p(std::exp(-ax));
    const C sp = (bx > C(0) ? bx : C(0)) + l;
    return bx > p1 ? x : sp / p0;
  }
  template <typename C> static inline C d(C x, C p0, C p1) {
    const C bx = x * p0;
    return bx > p1 ? C(1) : C(1) / (C(1) + fm_exp<C>(C(0) - bx));
  }
};
// x tanh(softplus(x)), with tanh(log(1 + e)) = n / (n + 2), n = e (e + 2), e = e^x: one exp. e's argument
// is capped at 20, where the ratio is 1 in float and double (as tanh(20) is); the derivative
// t + x sigmoid(x) (1 - t^2), 1 - t^2 = 4 (n + 1) / (n + 2)^2, is 1 above 20 (torch's value there).
struct UMish {
  static constexpr bool kFloatOnly = true;
  template <typename C> static inline C f(C x, C, C) {
    const C e = fm_exp<C>(x > C(20) ? C(20) : x), n = e * (e + C(2));
    return x * (n / (n + C(2)));
  }
  template <typename C> static inline C d(C x, C, C) {
    const C e = fm_exp<C>(x > C(20) ? C(20) : x), n = e * (e + C(2));
    const C r = C(1) / (n + C(2)), t = n * r, sech2 = C(4) * (n + C(1)) * r * r;
    const C dv = t + x * (e / (C(1) + e)) * sech2;
    return x > C(20) ? C(1) : dv;
  }
};
// x clamp(x + 3, 0, 6) / 6; the derivative x / 3 + 1/2 strictly inside (-3, 3), 0 from -3 down and 1
// from 3 up (torch's ends).
struct UHardswish {
  static constexpr bool kFloatOnly = true;
  template <typename C> static inline C f(C x, C, C) {
    C t = x + C(3);
    t = t < C(0) ? C(0) : t;
    t = C(6) < t ? C(6) : t;
    return x * t / C(6);
  }
  template <typename C> static inline C d(C x, C, C) {
    return x <= C(-3) ? C(0) : (x >= C(3) ? C(1) : x / C(3) + C(0.5));
  }
};
// clamp(x + 3, 0, 6) / 6; the derivative 1/6 strictly inside (-3, 3), as torch.
struct UHardsigmoid {
  static constexpr bool kFloatOnly = true;
  template <typename C> static inline C f(C x, C, C) {
    C t = x + C(3);
    t = t < C(0) ? C(0) : t;
    t = C(6) < t ? C(6) : t;
    return t / C(6);
  }
  template <typename C> static inline C d(C x, C, C) { return x > C(-3) && x < C(3) ? C(1) / C(6) : C(0); }
};
// gelu's tanh form 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3), as x sigmoid(2z): the same
// value without tanh's cancellation for negative x, and one exp; the derivative s + x s (1 - s) 2z'.
struct UGeluTanh {
  static constexpr bool kFloatOnly = true;
  static constexpr double kB = 1.5957691216057307117597842397375;  // 2 sqrt(2/pi)
  static constexpr double kBK = kB * 0.044715;
  template <typename C> static inline C f(C x, C, C) {
    const C z2 = x * (C(kB) + C(kBK) * (x * x));
    return x / (C(1) + fm_exp<C>(C(0) - z2));
  }
  template <typename C> static inline C d(C x, C, C) {
    const C xx = x * x, z2 = x * (C(kB) + C(kBK) * xx);
    const C s = C(1) / (C(1) + fm_exp<C>(C(0) - z2)), t = s * (C(1) - s);
    // t == 0 (s saturated) drops the second term: x z' there may be inf (x^2 overflows), and 0 * inf is NaN
    return s + (t == C(0) ? C(0) : x * t * (C(kB) + C(3 * kBK) * xx));
  }
};

// Binary functors; comparisons return 0/1 (stored as uint8 by the caller).
template <typename C> static inline C int_safe_div(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    return a / b;
  } else if constexpr (std::is_signed_v<C>) {
    // x / 0 gives 0 and INT64_MIN / -1 wraps (as numpy): neither may raise SIGFPE.
    if (b == C(0)) return C(0);
    if (b == C(-1)) return (C)(0 - (std::make_unsigned_t<C>)a);
    return a / b;
  } else {
    return b == C(0) ? C(0) : a / b;
  }
}
// Python's % for floats from m = fmod(a, b): a - b * floor(a / b) with the divisor's sign, exact.
// Selects only, so a loop over it vectorises (the remainder loop in kernels_isa.cpp).
template <typename C> static inline C py_rem_from_fmod(C b, C m) {
  return m != 0 ? (((b < 0) != (m < 0)) ? m + b : m) : std::copysign(C(0), b);
}
// Python's // for floats from m = fmod(a, b), b != 0, as numpy computes it ((a - m) / b, rounded to
// the nearest integer), so that a == b * q + rem.
template <typename C> static inline C py_floordiv_from_fmod(C a, C b, C m) {
  C div = (a - m) / b;
  div = (m != 0 && ((b < 0) != (m < 0))) ? div - 1 : div;
  C fl = std::floor(div);
  fl = div - fl > C(0.5) ? fl + 1 : fl;
  return div == 0 ? std::copysign(C(0), a / b) : fl;
}
template <typename C> static inline C py_rem(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    return py_rem_from_fmod(b, std::fmod(a, b));  // fmod is NaN for b == 0 or an infinite a, like numpy
  } else if constexpr (std::is_signed_v<C>) {
    if (b == C(0) || b == C(-1)) return C(0);  // x % -1 is 0; INT64_MIN % -1 would trap
    C r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  } else {
    return b == C(0) ? C(0) : a % b;
  }
}
template <typename C> static inline C py_floordiv(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (b == 0) return a / b;  // inf or NaN, like numpy
    return py_floordiv_from_fmod(a, b, std::fmod(a, b));
  } else if constexpr (std::is_signed_v<C>) {
    if (b == C(0)) return C(0);
    if (b == C(-1)) return (C)(0 - (std::make_unsigned_t<C>)a);  // INT64_MIN // -1 wraps (numpy)
    const C q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
  } else {
    return b == C(0) ? C(0) : a / b;
  }
}
// Signed integers wrap on overflow (two's complement, as numpy and torch): the sum, difference and
// product are taken in the unsigned type, since signed overflow is undefined behaviour.
template <typename C> static inline C wrap_add(C a, C b) {
  if constexpr (std::is_integral_v<C> && std::is_signed_v<C>) return (C)((std::make_unsigned_t<C>)a + (std::make_unsigned_t<C>)b);
  else return a + b;
}
template <typename C> static inline C wrap_sub(C a, C b) {
  if constexpr (std::is_integral_v<C> && std::is_signed_v<C>) return (C)((std::make_unsigned_t<C>)a - (std::make_unsigned_t<C>)b);
  else return a - b;
}
template <typename C> static inline C wrap_mul(C a, C b) {
  if constexpr (std::is_integral_v<C> && std::is_signed_v<C>) return (C)((std::make_unsigned_t<C>)a * (std::make_unsigned_t<C>)b);
  else return a * b;
}
#define EMBER_BINARY(NAME, EXPR) \
  struct NAME { template <typename C> static inline C f(C a, C b) { return EXPR; } };
EMBER_BINARY(BAdd, wrap_add<C>(a, b))
EMBER_BINARY(BSub, wrap_sub<C>(a, b))
EMBER_BINARY(BMul, wrap_mul<C>(a, b))
EMBER_BINARY(BDiv, int_safe_div<C>(a, b))
EMBER_BINARY(BMaximum, (a != a ? a : (a > b || b != b ? (b != b ? b : a) : b)))
EMBER_BINARY(BMinimum, (a != a ? a : (a < b || b != b ? (b != b ? b : a) : b)))
EMBER_BINARY(BPow, std::pow(a, b))
EMBER_BINARY(BFloorDiv, py_floordiv<C>(a, b))
EMBER_BINARY(BRem, py_rem<C>(a, b))
#undef EMBER_BINARY
#define EMBER_CMP(NAME, EXPR) \
  struct NAME { template <typename C> static inline uint8_t f(C a, C b) { return (EXPR) ? 1 : 0; } };
EMBER_CMP(BEq, a == b)
EMBER_CMP(BNe, a != b)
EMBER_CMP(BLt, a < b)
EMBER_CMP(BLe, a <= b)
EMBER_CMP(BGt, a > b)
EMBER_CMP(BGe, a >= b)
#undef EMBER_CMP
// Bitwise & | ^ and ~, registered for integer dtypes only (and, on bool's 0/1 bytes, logical).
struct BBitAnd { template <typename C> static inline C f(C a, C b) { return C(a & b); } };
struct BBitOr { template <typename C> static inline C f(C a, C b) { return C(a | b); } };
struct BBitXor { template <typename C> static inline C f(C a, C b) { return C(a ^ b); } };
struct UBitNot {};  // the integer loop's ~x (unary_loop_int)
