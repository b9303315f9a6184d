// Fused optimizer steps (SGD, Adam/AdamW, RMSprop) in float32, in place, one thread per element: torch's
// single-tensor update op for op, with fma() exactly where torch's CPU kernels fuse (add with alpha,
// lerp, addcmul) and correctly rounded sqrt. The host (cpp/metal/ops/optim.cpp) rounds the scalars.
#include <metal_stdlib>
using namespace metal;

// Must match cpp/metal/ops/optim.cpp. flags: the OptimFlag bits of cpp/backend.h; small: the lerp
// weight's magnitude is below 0.5 (torch's two lerp forms); s: the scalars, listed per kernel.
struct OptimArgs {
  uint n;
  uint flags;
  uint small;
  uint pad;
  float s[8];
};

constant constexpr uint kMaximize = 1, kWeightDecay = 2, kMomentum = 4, kNesterov = 8, kFirst = 16,
                        kDecoupled = 32, kAmsgrad = 64, kCentered = 128;

// d + q where d is a product torch rounds on its own (a separate mul_ kernel). A GPU compiler may contract a
// product whose only use is an add into an FMA; the NaN test is a second use that keeps d rounded (and
// changes nothing: a NaN d makes the sum NaN).
inline float opt_add_rounded(float d, float q) {
  const float r = d + q;
  return isnan(d) ? d : r;
}

// torch's lerp(a, b, w): fma(w, b - a, a) for |w| < 0.5, else fma(w - 1, b - a, b).
inline float opt_lerp(float a, float b, float w, uint small) {
  return small ? fma(w, b - a, a) : fma(w - 1.0f, b - a, b);
}

// s: wd, momentum, 1 - dampening, -lr. st0: the momentum buffer.
kernel void sgd_step_float32(device float* p [[buffer(0)]], device const float* g [[buffer(1)]],
                             device float* buf [[buffer(2)]], constant OptimArgs& a [[buffer(3)]],
                             uint i [[thread_position_in_grid]]) {
  if (i >= a.n) return;
  float gi = (a.flags & kMaximize) ? -g[i] : g[i];
  if (a.flags & kWeightDecay) gi = fma(p[i], a.s[0], gi);
  if (a.flags & kMomentum) {
    const float b = (a.flags & kFirst) ? gi : fma(gi, a.s[2], buf[i] * a.s[1]);
    buf[i] = b;
    gi = (a.flags & kNesterov) ? fma(b, a.s[1], gi) : b;
  }
  p[i] = fma(gi, a.s[3], p[i]);
}

// s: wd (AdamW: 1 - lr * wd), 1 - beta1, beta2, 1 - beta2, sqrt(1 - beta2^t), eps, -lr / (1 - beta1^t).
// m, v, vmax: exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad).
kernel void adam_step_float32(device float* p [[buffer(0)]], device const float* g [[buffer(1)]],
                              device float* m [[buffer(2)]], device float* v [[buffer(3)]],
                              device float* vmax [[buffer(4)]], constant OptimArgs& a [[buffer(5)]],
                              uint i [[thread_position_in_grid]]) {
  if (i >= a.n) return;
  float gi = (a.flags & kMaximize) ? -g[i] : g[i];
  float pi = p[i];
  if (a.flags & kWeightDecay) {
    if (a.flags & kDecoupled) {
      pi = pi * a.s[0];
    } else {
      gi = fma(pi, a.s[0], gi);
    }
  }
  const float mi = opt_lerp(m[i], gi, a.s[1], a.small);
  m[i] = mi;
  float vi = fma(a.s[3] * gi, gi, v[i] * a.s[2]);
  v[i] = vi;
  if (a.flags & kAmsgrad) {
    const float x = vmax[i];
    vi = isnan(x) ? x : (isnan(vi) ? vi : (vi > x ? vi : x));  // torch.maximum propagates NaN
    vmax[i] = vi;
  }
  const float q = precise::sqrt(vi) / a.s[4];
  const float den = q + a.s[5];
  const float step = a.s[6] * mi;
  p[i] = opt_add_rounded(pi, step / den);
}

// s: wd, alpha, 1 - alpha, eps, momentum, -lr. sq, ga, buf: square_avg, grad_avg (centered), momentum_buffer.
kernel void rmsprop_step_float32(device float* p [[buffer(0)]], device const float* g [[buffer(1)]],
                                 device float* sq [[buffer(2)]], device float* ga [[buffer(3)]],
                                 device float* buf [[buffer(4)]], constant OptimArgs& a [[buffer(5)]],
                                 uint i [[thread_position_in_grid]]) {
  if (i >= a.n) return;
  float gi = (a.flags & kMaximize) ? -g[i] : g[i];
  if (a.flags & kWeightDecay) gi = fma(p[i], a.s[0], gi);
  const float si = fma(a.s[2] * gi, gi, sq[i] * a.s[1]);
  sq[i] = si;
  float avg;
  if (a.flags & kCentered) {
    const float gai = opt_lerp(ga[i], gi, a.s[2], a.small);
    ga[i] = gai;
    avg = precise::sqrt(fma(-gai, gai, si));
  } else {
    avg = precise::sqrt(si);
  }
  avg = avg + a.s[3];
  if (a.flags & kMomentum) {
    const float b = opt_add_rounded(buf[i] * a.s[4], gi / avg);
    buf[i] = b;
    p[i] = fma(b, a.s[5], p[i]);
  } else {
    const float step = a.s[5] * gi;
    p[i] = p[i] + step / avg;
  }
}
