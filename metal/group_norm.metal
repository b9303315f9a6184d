// group_norm over (n, c, spatial) inputs (dense; the host copies others), forward (saving mean and rstd
// in float per (sample, group)) and backward: dx per (sample, group), dw / db per channel, each one
// threadgroup reducing in a fixed order. f32/f16/bf16 computed in float. Threadgroups are 256 threads.
#include <metal_stdlib>
using namespace metal;

struct GroupNormArgs {
  long n, c, groups, s;  // samples, channels, groups, positions per channel
  long w_off, w_st, b_off, b_st;
  float eps;
  uint has_w, has_b;
};

// A threadgroup-wide sum every thread gets, reduced in a fixed order.
inline float gn_sum(float v, threadgroup float* part, uint lane, uint sg, uint nsg) {
  v = simd_sum(v);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lane == 0) part[sg] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return simd_sum(lane < nsg ? part[lane] : 0.0f);
}

// One threadgroup per (sample, group) row of cg * s elements: the mean, then the centred squares (exact
// for rows far from zero), then y = (x - mean) * rstd * w[c] + b[c]. Grid (256, n * groups).
template <typename T>
kernel void group_norm_fwd(device const T* x [[buffer(0)]], device const T* w [[buffer(1)]],
                           device const T* b [[buffer(2)]], device T* y [[buffer(3)]],
                           device float* mean [[buffer(4)]], device float* rstd [[buffer(5)]],
                           constant GroupNormArgs& a [[buffer(6)]], uint2 tg [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]], uint2 tpg2 [[threads_per_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                           uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;  // MSL: position attributes share one width
  threadgroup float part[32];
  const long row = tg.y, cg = a.c / a.groups, len = cg * a.s, c0 = (row % a.groups) * cg;
  device const T* xr = x + row * len;
  float s = 0.0f;
  for (long j = tid; j < len; j += tpg) s += float(xr[j]);
  const float mu = gn_sum(s, part, lane, sg, nsg) / float(len);
  float ss = 0.0f;
  for (long j = tid; j < len; j += tpg) {
    const float d = float(xr[j]) - mu;
    ss += d * d;
  }
  const float r = 1.0f / sqrt(gn_sum(ss, part, lane, sg, nsg) / float(len) + a.eps);
  if (tid == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
  device T* out = y + row * len;
  for (long j = tid; j < len; j += tpg) {
    const long ch = c0 + j / a.s;
    const float wj = a.has_w ? float(w[a.w_off + ch * a.w_st]) : 1.0f;
    const float bj = a.has_b ? float(b[a.b_off + ch * a.b_st]) : 0.0f;
    out[j] = T((float(xr[j]) - mu) * r * wj + bj);
  }
}

// dx = r * (g*w - mean(g*w) - xhat * mean(g*w*xhat)) over the (sample, group) row. Grid (256, n * groups).
template <typename T>
kernel void group_norm_bwd_dx(device const T* x [[buffer(0)]], device const T* w [[buffer(1)]],
                              device const float* mean [[buffer(2)]], device const float* rstd [[buffer(3)]],
                              device const T* g [[buffer(4)]], device T* dx [[buffer(5)]],
                              constant GroupNormArgs& a [[buffer(6)]], uint2 tg [[threadgroup_position_in_grid]],
                              uint tid [[thread_index_in_threadgroup]], uint2 tpg2 [[threads_per_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                              uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;  // MSL: position attributes share one width
  threadgroup float part[32];
  const long row = tg.y, cg = a.c / a.groups, len = cg * a.s, c0 = (row % a.groups) * cg;
  device const T* xr = x + row * len;
  device const T* gr = g + row * len;
  const float mu = mean[row], r = rstd[row];
  float s1 = 0.0f, s2 = 0.0f;
  for (long j = tid; j < len; j += tpg) {
    const float gw = float(gr[j]) * (a.has_w ? float(w[a.w_off + (c0 + j / a.s) * a.w_st]) : 1.0f);
    s1 += gw;
    s2 += gw * (float(xr[j]) - mu);
  }
  const float m1 = gn_sum(s1, part, lane, sg, nsg) / float(len);
  const float m2 = gn_sum(s2, part, lane, sg, nsg) * r / float(len);
  device T* out = dx + row * len;
  for (long j = tid; j < len; j += tpg) {
    const float gw = float(gr[j]) * (a.has_w ? float(w[a.w_off + (c0 + j / a.s) * a.w_st]) : 1.0f);
    out[j] = T(r * (gw - m1 - (float(xr[j]) - mu) * r * m2));
  }
}

// dw = sum g * xhat, db = sum g over every sample and position of channel ch. Grid (256, c).
template <typename T>
kernel void group_norm_bwd_params(device const T* x [[buffer(0)]], device const float* mean [[buffer(1)]],
                                  device const float* rstd [[buffer(2)]], device const T* g [[buffer(3)]],
                                  device T* dw [[buffer(4)]], device T* db [[buffer(5)]],
                                  constant GroupNormArgs& a [[buffer(6)]], uint2 tg [[threadgroup_position_in_grid]],
                                  uint tid [[thread_index_in_threadgroup]], uint2 tpg2 [[threads_per_threadgroup]],
                                  uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                                  uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;  // MSL: position attributes share one width
  threadgroup float part[32];
  const long ch = tg.y, grp = ch / (a.c / a.groups);
  float sw = 0.0f, sb = 0.0f;
  for (long i = 0; i < a.n; ++i) {
    const long row = i * a.groups + grp;
    const float mu = mean[row], r = rstd[row];
    device const T* xr = x + (i * a.c + ch) * a.s;
    device const T* gr = g + (i * a.c + ch) * a.s;
    for (long j = tid; j < a.s; j += tpg) {
      const float gv = float(gr[j]);
      sw += gv * (float(xr[j]) - mu) * r;
      sb += gv;
    }
  }
  sw = gn_sum(sw, part, lane, sg, nsg);
  sb = gn_sum(sb, part, lane, sg, nsg);
  if (tid == 0) {
    dw[ch] = T(sw);
    db[ch] = T(sb);
  }
}

#define instantiate_group_norm(tname, T)                                                                     \
  template [[host_name("group_norm_fwd_" #tname)]] [[kernel]] decltype(group_norm_fwd<T>) group_norm_fwd<T>; \
  template [[host_name("group_norm_bwd_dx_" #tname)]] [[kernel]] decltype(group_norm_bwd_dx<T>)              \
      group_norm_bwd_dx<T>;                                                                                  \
  template [[host_name("group_norm_bwd_params_" #tname)]] [[kernel]] decltype(group_norm_bwd_params<T>)      \
      group_norm_bwd_params<T>;

instantiate_group_norm(float32, float)
instantiate_group_norm(float16, half)
instantiate_group_norm(bfloat16, bfloat)
