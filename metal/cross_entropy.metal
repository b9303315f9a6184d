// cross_entropy over class ids, forward and backward: one threadgroup per row of logits (read through a
// RowLayout, any strides), f32/f16/bf16 computed in float; lse saved in float. Must match CeKArgs in
// cpp/metal/ops/fused.cpp. A class id out of range gives NaN (the host checks the targets up front).
#include <metal_stdlib>
using namespace metal;

constant constexpr int kRowDims = 8;

struct RowLayout {
  long offset;
  long cstride;
  long nd;
  long shape[kRowDims];
  long stride[kRowDims];
};
struct CeArgs {
  RowLayout x;
  long n;       // classes
  long rows;
  long t_off;   // targets and g: dense from these offsets
  long g_off;
  long w_off, w_st;
  long ignore;
  float eps;    // label smoothing
  uint has_w;
  uint t_i32;   // targets are int32 (else int64)
  uint pad;
};

inline float neg_inf() { return -numeric_limits<float>::infinity(); }

inline long row_start(constant RowLayout& l, long r) {
  long o = l.offset;
  for (long d = l.nd - 1; d >= 0; --d) {
    o += (r % l.shape[d]) * l.stride[d];
    r /= l.shape[d];
  }
  return o;
}

// Threadgroup-wide max / sum, the same value on every thread (see softmax.metal).
inline float tg_max(float v, threadgroup float* part, uint lane, uint sg, uint nsg) {
  v = simd_max(v);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lane == 0) part[sg] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return simd_max(lane < nsg ? part[lane] : neg_inf());
}
inline float tg_sum(float v, threadgroup float* part, uint lane, uint sg, uint nsg) {
  v = simd_sum(v);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lane == 0) part[sg] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return simd_sum(lane < nsg ? part[lane] : 0.0f);
}

inline long target_of(device const long* t64, device const int* t32, constant CeArgs& a, long row) {
  return a.t_i32 ? long(t32[a.t_off + row]) : t64[a.t_off + row];
}
template <typename T> inline float weight_of(device const T* w, constant CeArgs& a, long c) {
  return a.has_w ? float(w[a.w_off + c * a.w_st]) : 1.0f;
}

// loss = w[t] (1 - eps) (lse - x[t]) + eps / n * sum_c w[c] (lse - x[c]); 0 for ignored rows.
template <typename T>
kernel void ce_fwd(device const T* x [[buffer(0)]], device const long* t64 [[buffer(1)]],
                   device const int* t32 [[buffer(2)]], device const T* w [[buffer(3)]], device T* loss [[buffer(4)]],
                   device float* lse [[buffer(5)]], constant CeArgs& a [[buffer(6)]],
                   uint2 tg [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                   uint2 tpg2 [[threads_per_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                   uint sg [[simdgroup_index_in_threadgroup]], uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;
  threadgroup float part[32];
  const long row = tg.y, n = a.n, cs = a.x.cstride;
  device const T* xr = x + row_start(a.x, row);
  float m = neg_inf(), s = 0.0f;
  for (long j = tid; j < n; j += tpg) {  // online (max, sum), as softmax's looped kernel
    const float xv = float(xr[j * cs]);
    if (xv > m) {
      s = s * exp(m - xv) + 1.0f;
      m = xv;
    } else if (xv != neg_inf()) {
      s += exp(xv - m);
    }
  }
  const float M = tg_max(m, part, lane, sg, nsg);
  s = tg_sum(m == neg_inf() ? 0.0f : s * exp(m - M), part, lane, sg, nsg);
  const float L = M + log(s);
  float smooth = 0.0f;
  if (a.eps != 0.0f) {
    for (long j = tid; j < n; j += tpg) smooth += weight_of(w, a, j) * (L - float(xr[j * cs]));
    smooth = tg_sum(smooth, part, lane, sg, nsg);
  }
  if (tid != 0) return;
  lse[row] = L;
  const long t = target_of(t64, t32, a, row);
  float l = 0.0f;
  if (t != a.ignore) {
    l = t < 0 || t >= n ? numeric_limits<float>::quiet_NaN()
                        : (1.0f - a.eps) * weight_of(w, a, t) * (L - float(xr[t * cs])) + a.eps / float(n) * smooth;
  }
  loss[row] = T(l);
}

// dx = g (softmax(x) W - q), q = (1 - eps) w[t] one_hot(t) + eps / n w, W = sum q; 0 for ignored rows.
template <typename T>
kernel void ce_bwd(device const T* x [[buffer(0)]], device const long* t64 [[buffer(1)]],
                   device const int* t32 [[buffer(2)]], device const T* w [[buffer(3)]],
                   device const float* lse [[buffer(4)]], device const T* g [[buffer(5)]], device T* dx [[buffer(6)]],
                   constant CeArgs& a [[buffer(7)]], uint2 tg [[threadgroup_position_in_grid]],
                   uint tid [[thread_index_in_threadgroup]], uint2 tpg2 [[threads_per_threadgroup]],
                   uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                   uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;
  threadgroup float part[32];
  const long row = tg.y, n = a.n, cs = a.x.cstride;
  device const T* xr = x + row_start(a.x, row);
  device T* out = dx + row * n;
  const long t = target_of(t64, t32, a, row);  // the same on every thread: the returns below are uniform
  if (t == a.ignore || t < 0 || t >= n) {
    const float v = t == a.ignore ? 0.0f : numeric_limits<float>::quiet_NaN();
    for (long j = tid; j < n; j += tpg) out[j] = T(v);
    return;
  }
  float sum_w = float(n);
  if (a.has_w && a.eps != 0.0f) {
    float s = 0.0f;
    for (long j = tid; j < n; j += tpg) s += weight_of(w, a, j);
    sum_w = tg_sum(s, part, lane, sg, nsg);
  }
  const float gr = float(g[a.g_off + row]), L = lse[row];
  const float wq = (1.0f - a.eps) * weight_of(w, a, t), us = a.eps / float(n), W = wq + us * sum_w;
  for (long j = tid; j < n; j += tpg) {
    const float p = exp(float(xr[j * cs]) - L);
    out[j] = T(gr * (p * W - us * weight_of(w, a, j) - (j == t ? wq : 0.0f)));
  }
}

#define instantiate_ce(tname, T)                                                           \
  template [[host_name("ce_fwd_" #tname)]] [[kernel]] decltype(ce_fwd<T>) ce_fwd<T>;     \
  template [[host_name("ce_bwd_" #tname)]] [[kernel]] decltype(ce_bwd<T>) ce_bwd<T>;

instantiate_ce(float32, float)
instantiate_ce(float16, half)
instantiate_ce(bfloat16, bfloat)
