// batch_norm over (n, c, spatial) inputs (dense; the host copies others): per-channel statistics (the
// batch's, with the running statistics' update, or the running ones), the normalisation, and the backward
// (per-channel sums, then dx). One threadgroup per channel reduces in a fixed order; f32/f16/bf16 in float.
#include <metal_stdlib>
using namespace metal;

struct BatchNormArgs {
  long n, c, s;  // samples, channels, positions per channel
  long w_off, w_st, b_off, b_st;
  float eps, momentum;
  uint has_w, has_b, training, has_running;
};

// A threadgroup-wide sum every thread gets, reduced in a fixed order.
inline float bn_tg_sum(float v, threadgroup float* part, uint lane, uint sg, uint nsg) {
  v = simd_sum(v);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lane == 0) part[sg] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return simd_sum(lane < nsg ? part[lane] : 0.0f);
}

// Element k of channel ch's n * s values.
inline long bn_at(constant BatchNormArgs& a, long ch, long k) {
  const long i = k / a.s;
  return (i * a.c + ch) * a.s + (k - i * a.s);
}

// One threadgroup per channel: training takes the mean, then the centred squares (exact for channels far
// from zero) and writes the updated running statistics (unbiased variance); eval reads the running ones.
// Grid (256, c).
template <typename T>
kernel void batch_norm_stats(device const T* x [[buffer(0)]], device const float* rm [[buffer(1)]],
                             device const float* rv [[buffer(2)]], device float* mean [[buffer(3)]],
                             device float* rstd [[buffer(4)]], device float* rm_out [[buffer(5)]],
                             device float* rv_out [[buffer(6)]], constant BatchNormArgs& a [[buffer(7)]],
                             uint2 tg [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                             uint2 tpg2 [[threads_per_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                             uint sg [[simdgroup_index_in_threadgroup]], uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;  // MSL: position attributes share one width
  threadgroup float part[32];
  const long ch = tg.y, m = a.n * a.s;
  if (!a.training) {
    if (tid == 0) {
      mean[ch] = rm[ch];
      rstd[ch] = 1.0f / sqrt(rv[ch] + a.eps);
    }
    return;
  }
  float s = 0.0f;
  for (long k = tid; k < m; k += tpg) s += float(x[bn_at(a, ch, k)]);
  const float mu = m ? bn_tg_sum(s, part, lane, sg, nsg) / float(m) : 0.0f;
  float ss = 0.0f;
  for (long k = tid; k < m; k += tpg) {
    const float d = float(x[bn_at(a, ch, k)]) - mu;
    ss += d * d;
  }
  const float var = m ? bn_tg_sum(ss, part, lane, sg, nsg) / float(m) : 0.0f;
  if (tid == 0) {
    mean[ch] = mu;
    rstd[ch] = 1.0f / sqrt(var + a.eps);
    if (a.has_running && m > 1) {
      rm_out[ch] = (1.0f - a.momentum) * rm[ch] + a.momentum * mu;
      rv_out[ch] = (1.0f - a.momentum) * rv[ch] + a.momentum * var * (float(m) / float(m - 1));
    }
  }
}

// y = (x - mean) * rstd * w + b, one thread per element. Grid (n * c * s).
template <typename T>
kernel void batch_norm_apply(device const T* x [[buffer(0)]], device const T* w [[buffer(1)]],
                             device const T* b [[buffer(2)]], device const float* mean [[buffer(3)]],
                             device const float* rstd [[buffer(4)]], device T* y [[buffer(5)]],
                             constant BatchNormArgs& a [[buffer(6)]], uint gid [[thread_position_in_grid]]) {
  const long k = gid;
  if (k >= a.n * a.c * a.s) return;
  const long ch = (k / a.s) % a.c;
  const float wj = a.has_w ? float(w[a.w_off + ch * a.w_st]) : 1.0f;
  const float bj = a.has_b ? float(b[a.b_off + ch * a.b_st]) : 0.0f;
  y[k] = T((float(x[k]) - mean[ch]) * rstd[ch] * wj + bj);
}

// Per channel: db = sum g, dw = rstd * sum g (x - mean); both also kept in float for dx. Grid (256, c).
template <typename T>
kernel void batch_norm_bwd_sums(device const T* x [[buffer(0)]], device const T* g [[buffer(1)]],
                                device const float* mean [[buffer(2)]], device const float* rstd [[buffer(3)]],
                                device T* dw [[buffer(4)]], device T* db [[buffer(5)]], device float* sums [[buffer(6)]],
                                constant BatchNormArgs& a [[buffer(7)]], uint2 tg [[threadgroup_position_in_grid]],
                                uint tid [[thread_index_in_threadgroup]], uint2 tpg2 [[threads_per_threadgroup]],
                                uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                                uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;  // MSL: position attributes share one width
  threadgroup float part[32];
  const long ch = tg.y, m = a.n * a.s;
  const float mu = mean[ch];
  float s1 = 0.0f, s2 = 0.0f;
  for (long k = tid; k < m; k += tpg) {
    const long at = bn_at(a, ch, k);
    const float gv = float(g[at]);
    s1 += gv;
    s2 += gv * (float(x[at]) - mu);
  }
  s1 = bn_tg_sum(s1, part, lane, sg, nsg);
  s2 = bn_tg_sum(s2, part, lane, sg, nsg);
  if (tid == 0) {
    db[ch] = T(s1);
    dw[ch] = T(s2 * rstd[ch]);
    sums[ch] = s1;
    sums[a.c + ch] = s2;
  }
}

// dx = r w (g - sum g / m - (x - mean) r^2 sum g (x - mean) / m) when training, else g r w. Grid (n * c * s).
template <typename T>
kernel void batch_norm_bwd_dx(device const T* x [[buffer(0)]], device const T* g [[buffer(1)]],
                              device const T* w [[buffer(2)]], device const float* mean [[buffer(3)]],
                              device const float* rstd [[buffer(4)]], device const float* sums [[buffer(5)]],
                              device T* dx [[buffer(6)]], constant BatchNormArgs& a [[buffer(7)]],
                              uint gid [[thread_position_in_grid]]) {
  const long k = gid;
  if (k >= a.n * a.c * a.s) return;
  const long ch = (k / a.s) % a.c;
  const float r = rstd[ch], rw = r * (a.has_w ? float(w[a.w_off + ch * a.w_st]) : 1.0f);
  if (!a.training) {
    dx[k] = T(float(g[k]) * rw);
    return;
  }
  const float m = float(a.n * a.s);
  const float xh = (float(x[k]) - mean[ch]) * r;
  dx[k] = T(rw * (float(g[k]) - sums[ch] / m - xh * r * sums[a.c + ch] / m));
}

#define instantiate_batch_norm(tname, T)                                                                          \
  template [[host_name("batch_norm_stats_" #tname)]] [[kernel]] decltype(batch_norm_stats<T>) batch_norm_stats<T>; \
  template [[host_name("batch_norm_apply_" #tname)]] [[kernel]] decltype(batch_norm_apply<T>) batch_norm_apply<T>; \
  template [[host_name("batch_norm_bwd_sums_" #tname)]] [[kernel]] decltype(batch_norm_bwd_sums<T>)                \
      batch_norm_bwd_sums<T>;                                                                                     \
  template [[host_name("batch_norm_bwd_dx_" #tname)]] [[kernel]] decltype(batch_norm_bwd_dx<T>) batch_norm_bwd_dx<T>;

instantiate_batch_norm(float32, float)
instantiate_batch_norm(float16, half)
instantiate_batch_norm(bfloat16, bfloat)
