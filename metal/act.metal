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

// erf as unary.metal computes it (Metal has none): the Taylor series below 1, Abramowitz-Stegun
// 7.1.26 above, so gelu's forward and backward agree.
inline float act_erf(float x) {
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
    const float cdf = 0.5f + 0.5f * act_erf(x * 0.70710678118654752f);
    const float pdf = exp(-0.5f * x * x) * 0.39894228040143268f;
    return cdf + x * pdf;
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
