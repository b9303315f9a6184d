// The activations' backward, dx = g * f'(a), f32/f16/bf16 computed in float: sigmoid (a = y, the
// forward's output), silu and the exact erf gelu (a = x). One kernel per op: dense inputs read 4
// elements per thread; strided ones (any shape, strides and offset) unravelled per element.
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

template <typename Op, typename T>
kernel void act_bwd(device const T* a [[buffer(0)]], device const T* g [[buffer(1)]], device T* dx [[buffer(2)]],
                    constant ActArgs& p [[buffer(3)]], uint gid [[thread_position_in_grid]]) {
  const Op f;
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

#define instantiate_act_one(name, Op, tname, T) \
  template [[host_name(#name "_bwd_" #tname)]] [[kernel]] decltype(act_bwd<Op, T>) act_bwd<Op, T>;

#define instantiate_act(name, Op)                  \
  instantiate_act_one(name, Op, float32, float)    \
  instantiate_act_one(name, Op, float16, half)     \
  instantiate_act_one(name, Op, bfloat16, bfloat)

instantiate_act(sigmoid, SigmoidBwd)
instantiate_act(silu, SiluBwd)
instantiate_act(gelu, GeluBwd)
