// The activations' backward, dx = g * f'(a), f32/f16/bf16 computed in float: sigmoid (a = y, the
// forward's output), silu and the exact erf gelu (a = x), and the activations with scalar parameters
// (elu ... gelu_tanh, a = x). One kernel per op: dense inputs read 4 elements per thread; strided ones
// (any shape, strides and offset) unravelled per element.
#include <metal_stdlib>
using namespace metal;

constant constexpr int kActDims = 8;  // dims of a strided launch, after the host coalesced them
constant constexpr uint kReads = 4;   // elements per thread when both inputs are dense

// Must match the host's copy in cpp/metal/ops/fused.cpp.
struct ActArgs {
  long n;
  long nd;             // 0: both inputs dense from a_off / g_off
  long a_off, g_off;
  long shape[kActDims];
  long sa[kActDims];
  long sg[kActDims];
};

// The normal CDF Phi and density phi as unary.metal's gelu and the CPU compute them (vmath.h,
// vm_normal_cdf): through erfc, so negative x keep their relative accuracy (0.5 * (1 + erf) cancels from
// x = -5 on), with z^2 = x^2 / 2 split exactly by an FMA; phi shares e^(-z^2).
#if defined(EMBER_CUDA_F64)
// CUDA's float64 variant (float is double here): the CPU's double formulas, through the math library's erf.
inline float act_normal_cdf(float x, thread float& pdf) {
  pdf = exp(-0.5f * x * x) * 0.39894228040143267794f;
  return 0.5f * (1.0f + ::erf(x * 0.70710678118654752440f));
}
#else
inline float act_normal_cdf(float x, thread float& pdf) {
  const float y = x * 0.70710678118654752f, z = fabs(y);
  const float t = 1.0f / (1.0f + 0.5f * z);
  const float c[9] = {-5.906911567e-02f, 2.845837176e-01f, -4.872074425e-01f, 2.780393660e-01f, -2.657250501e-02f,
                      2.026508600e-01f, 2.431147397e-01f, 2.823738754e-01f, 2.820864916e-01f};
  float q = c[0];
  for (int k = 1; k < 9; ++k) q = q * t + c[k];
  const float xx = x * x, zz = 0.5f * xx;
  const float lo = 0.5f * fma(x, x, -xx);
  const float e = zz <= 87.33f ? exp(-zz) * (1.0f - lo) : 0.0f;  // e^(-z^2); 0 past exp's range (and for NaN)
  pdf = e * 0.39894228040143267794f;
  const float half_erfc = 0.5f * (t * q * e);
  return y > 0.0f ? 1.0f - half_erfc : half_erfc;
}
#endif

struct SigmoidBwd {  // a = y
  float operator()(float y) const { return y * (1.0f - y); }
};
struct SiluBwd {
  float operator()(float x) const {
    const float s = 1.0f / (1.0f + exp(-x));
    return s * (1.0f + x * (1.0f - s));
  }
};
struct GeluBwd {  // Phi(x) + x * phi(x)
  float operator()(float x) const {
    float pdf;
    const float cdf = act_normal_cdf(x, pdf);
    return fma(x, pdf, cdf);  // one rounding: far left both terms are tiny and nearly cancel
  }
};

// The derivatives of the activations with parameters (ActParams at buffer(4)), as the CPU's `d` of
// cpp/cpu/functors.h (UElu ... UGeluTanh) and torch's backward formulas.
struct ActParams {
  float p0;
  float p1;
};
struct EluBwd {  // p0 = alpha
  float p0, p1;
  float operator()(float x) const { return x > 0.0f ? 1.0f : p0 * exp(x); }
};
struct LeakyReluBwd {  // p0 = negative_slope
  float p0, p1;
  float operator()(float x) const { return x > 0.0f ? 1.0f : p0; }
};
struct SoftplusBwd {  // p0 = beta, p1 = threshold: sigmoid(beta x) below the threshold
  float p0, p1;
  float operator()(float x) const {
    const float bx = x * p0;
    return bx > p1 ? 1.0f : 1.0f / (1.0f + exp(-bx));
  }
};
struct MishBwd {  // t + x sigmoid(x) (1 - t^2), t = n / (n + 2), n = e (e + 2); 1 above 20
  float p0, p1;
  float operator()(float x) const {
    const float e = exp(x > 20.0f ? 20.0f : x), n = e * (e + 2.0f);
    const float r = 1.0f / (n + 2.0f), t = n * r, sech2 = 4.0f * (n + 1.0f) * r * r;
    return x > 20.0f ? 1.0f : t + x * (e / (1.0f + e)) * sech2;
  }
};
struct HardswishBwd {
  float p0, p1;
  float operator()(float x) const { return x <= -3.0f ? 0.0f : (x >= 3.0f ? 1.0f : x / 3.0f + 0.5f); }
};
struct HardsigmoidBwd {
  float p0, p1;
  float operator()(float x) const { return x > -3.0f && x < 3.0f ? 1.0f / 6.0f : 0.0f; }
};
struct GeluTanhBwd {  // s + x s (1 - s) 2z', s = sigmoid(2z)
  float p0, p1;
  float operator()(float x) const {
    const float xx = x * x, z2 = x * (1.5957691216057308f + 0.07135481627260025f * xx);
    const float s = 1.0f / (1.0f + exp(-z2)), t = s * (1.0f - s);
    // t == 0 (s saturated): the second term is 0, and x z' may be inf (x^2 overflows)
    return s + (t == 0.0f ? 0.0f : x * t * (1.5957691216057308f + 0.21406444881780076f * xx));
  }
};

// dx = g * f(a) over the launch, for either kernel below.
template <typename Op, typename T>
inline void act_apply(const Op f, device const T* a, device const T* g, device T* dx, constant ActArgs& p, uint gid) {
  if (p.nd == 0) {
    const long base = long(gid) * kReads;
    device const T* ap = a + p.a_off;
    device const T* gp = g + p.g_off;
    for (long i = base; i < min(p.n, base + long(kReads)); ++i) dx[i] = T(float(gp[i]) * f(float(ap[i])));
    return;
  }
  if (long(gid) >= p.n) return;
  long rem = gid, ia = p.a_off, ig = p.g_off;
  for (long d = p.nd - 1; d >= 0; --d) {
    const long k = rem % p.shape[d];
    ia += k * p.sa[d];
    ig += k * p.sg[d];
    rem /= p.shape[d];
  }
  dx[gid] = T(float(g[ig]) * f(float(a[ia])));
}

template <typename Op, typename T>
kernel void act_bwd(device const T* a [[buffer(0)]], device const T* g [[buffer(1)]], device T* dx [[buffer(2)]],
                    constant ActArgs& p [[buffer(3)]], uint gid [[thread_position_in_grid]]) {
  const Op f;
  act_apply(f, a, g, dx, p, gid);
}

template <typename Op, typename T>
kernel void act_bwd_param(device const T* a [[buffer(0)]], device const T* g [[buffer(1)]], device T* dx [[buffer(2)]],
                          constant ActArgs& p [[buffer(3)]], constant ActParams& q [[buffer(4)]],
                          uint gid [[thread_position_in_grid]]) {
  const Op f = {q.p0, q.p1};
  act_apply(f, a, g, dx, p, gid);
}

#define instantiate_act_one(name, Op, tname, T) \
  template [[host_name(#name "_bwd_" #tname)]] [[kernel]] decltype(act_bwd<Op, T>) act_bwd<Op, T>;

#define instantiate_act(name, Op)                  \
  instantiate_act_one(name, Op, float32, float)    \
  instantiate_act_one(name, Op, float16, half)     \
  instantiate_act_one(name, Op, bfloat16, bfloat)

instantiate_act(sigmoid, SigmoidBwd)
instantiate_act(silu, SiluBwd)
instantiate_act(gelu, GeluBwd)

#define instantiate_act_param_one(name, Op, tname, T) \
  template [[host_name(#name "_bwd_" #tname)]] [[kernel]] decltype(act_bwd_param<Op, T>) act_bwd_param<Op, T>;

#define instantiate_act_param(name, Op)                 \
  instantiate_act_param_one(name, Op, float32, float)   \
  instantiate_act_param_one(name, Op, float16, half)    \
  instantiate_act_param_one(name, Op, bfloat16, bfloat)

instantiate_act_param(elu, EluBwd)
instantiate_act_param(leaky_relu, LeakyReluBwd)
instantiate_act_param(softplus, SoftplusBwd)
instantiate_act_param(mish, MishBwd)
instantiate_act_param(hardswish, HardswishBwd)
instantiate_act_param(hardsigmoid, HardsigmoidBwd)
instantiate_act_param(gelu_tanh, GeluTanhBwd)
