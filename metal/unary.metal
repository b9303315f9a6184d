// Elementwise unary kernels (every UnaryOp that takes no parameter), f32/f16/bf16, computed in float:
// a contiguous kernel (4 elements per thread) and a strided one (any shape, strides and offset).
#include <metal_stdlib>
using namespace metal;

// Metal has no erf: below 1 the Taylor series (11 terms, < 1e-8 off), above it Abramowitz-Stegun
// 7.1.26 (< 1.5e-7 absolute, where erf is near 1).
inline float ember_erf(float x) {
  const float a = fabs(x);
  if (a < 1.0f) {
    const float z = x * x;
    float p = 1.48071928e-08f;
    p = p * z - 1.63658447e-07f;
    p = p * z + 1.64621144e-06f;
    p = p * z - 1.49256504e-05f;
    p = p * z + 1.20553330e-04f;
    p = p * z - 8.54832702e-04f;
    p = p * z + 5.22397763e-03f;
    p = p * z - 2.68661706e-02f;
    p = p * z + 1.12837917e-01f;
    p = p * z - 3.76126389e-01f;
    p = p * z + 1.12837917e+00f;
    return x * p;
  }
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float r = 1.0f - poly * exp(-a * a);
  return x < 0.0f ? -r : r;
}

struct Exp { float operator()(float x) const { return exp(x); } };
struct Log { float operator()(float x) const { return log(x); } };
struct Sin { float operator()(float x) const { return sin(x); } };
struct Cos { float operator()(float x) const { return cos(x); } };
struct Tanh { float operator()(float x) const { return tanh(x); } };
struct Sqrt { float operator()(float x) const { return sqrt(x); } };
struct Sqr { float operator()(float x) const { return x * x; } };
struct Abs { float operator()(float x) const { return fabs(x); } };
struct Neg { float operator()(float x) const { return -x; } };
struct Recip { float operator()(float x) const { return 1.0f / x; } };
struct Relu { float operator()(float x) const { return x < 0.0f ? 0.0f : x; } };
struct Gelu { float operator()(float x) const { return 0.5f * x * (1.0f + ember_erf(x * 0.70710678f)); } };
struct Silu { float operator()(float x) const { return x / (1.0f + exp(-x)); } };
struct Erf { float operator()(float x) const { return ember_erf(x); } };
struct Ceil { float operator()(float x) const { return ceil(x); } };
struct Floor { float operator()(float x) const { return floor(x); } };
struct Round { float operator()(float x) const { return rint(x); } };  // half to even, as numpy
struct Sign { float operator()(float x) const { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); } };
struct Sigmoid { float operator()(float x) const { return 1.0f / (1.0f + exp(-x)); } };

constant constexpr uint kReads = 4;  // elements per thread in the contiguous kernel

template <typename Op, typename T>
kernel void unary_contig(device const T* in [[buffer(0)]], device T* out [[buffer(1)]],
                         constant uint& n [[buffer(2)]], uint gid [[thread_position_in_grid]]) {
  const uint base = gid * kReads;
  if (base + kReads <= n) {
    for (uint k = 0; k < kReads; ++k) out[base + k] = T(Op()(float(in[base + k])));
  } else {
    for (uint i = base; i < n; ++i) out[i] = T(Op()(float(in[i])));
  }
}

// out (contiguous, n elements) = op(in viewed through shape/strides/offset, in elements).
template <typename Op, typename T>
kernel void unary_strided(device const T* in [[buffer(0)]], device T* out [[buffer(1)]],
                          constant uint& n [[buffer(2)]], constant uint& ndim [[buffer(3)]],
                          constant long* shape [[buffer(4)]], constant long* strides [[buffer(5)]],
                          constant long& offset [[buffer(6)]], uint gid [[thread_position_in_grid]]) {
  if (gid >= n) return;
  long rem = gid, at = offset;
  for (int d = int(ndim) - 1; d >= 0; --d) {
    at += (rem % shape[d]) * strides[d];
    rem /= shape[d];
  }
  out[gid] = T(Op()(float(in[at])));
}

#define instantiate_unary_one(name, Op, tname, T)                                                          \
  template [[host_name("unary_contig_" #name "_" #tname)]] [[kernel]] void unary_contig<Op, T>(            \
      device const T* in [[buffer(0)]], device T* out [[buffer(1)]], constant uint& n [[buffer(2)]],       \
      uint gid [[thread_position_in_grid]]);                                                               \
  template [[host_name("unary_strided_" #name "_" #tname)]] [[kernel]] void unary_strided<Op, T>(          \
      device const T* in [[buffer(0)]], device T* out [[buffer(1)]], constant uint& n [[buffer(2)]],       \
      constant uint& ndim [[buffer(3)]], constant long* shape [[buffer(4)]],                               \
      constant long* strides [[buffer(5)]], constant long& offset [[buffer(6)]],                           \
      uint gid [[thread_position_in_grid]]);

#define instantiate_unary(name, Op)                  \
  instantiate_unary_one(name, Op, float32, float)    \
  instantiate_unary_one(name, Op, float16, half)     \
  instantiate_unary_one(name, Op, bfloat16, bfloat)

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
