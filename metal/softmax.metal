// softmax and log_softmax over the last dim, forward and backward, f32/f16/bf16 computed in float: a
// "simd" kernel for short rows (one simdgroup per row, up to kPer elements per lane, no threadgroup
// memory), and one threadgroup per row above that: a "block" kernel keeping the row in registers when
// it fits (up to kPer elements per thread) and a "looped" one streaming long rows. Inputs are read through a RowLayout (any strides
// and offset); outputs are dense rows. Threadgroup sizes are multiples of 32 (every simdgroup is full).
#include <metal_stdlib>
using namespace metal;

constant constexpr int kRowDims = 8;  // outer dims of a row layout, after the host coalesced them
constant constexpr int kPer = 8;      // elements per thread in the block kernels

// Where the rows of a strided tensor live: row r starts at offset + sum((r unravelled) * stride) and
// its elements are cstride apart. Must match the host's copy in cpp/metal/ops/fused.cpp.
struct RowLayout {
  long offset;
  long cstride;
  long nd;
  long shape[kRowDims];
  long stride[kRowDims];
};
struct SoftmaxArgs {
  RowLayout a;  // the input x (forward) or the output y (backward)
  RowLayout b;  // the incoming gradient (backward only)
  long n;       // row length
  long rows;
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

// Threadgroup-wide max / sum: each simdgroup reduces, writes its partial, and every simdgroup then
// reduces the partials in the same order, so every thread gets the same (deterministic) value.
// The first barrier keeps a previous call's readers ahead of this call's writers.
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

// Short rows (up to 32 * kPer): simdgroup sg of group y reduces row y * nsg + sg in registers.
template <typename T, bool LOG>
kernel void softmax_fwd_simd(device const T* x [[buffer(0)]], device T* y [[buffer(1)]],
                             constant SoftmaxArgs& a [[buffer(2)]], uint2 tg [[threadgroup_position_in_grid]],
                             uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                             uint nsg [[simdgroups_per_threadgroup]]) {
  const long row = long(tg.y) * nsg + sg, n = a.n, cs = a.a.cstride;
  if (row >= a.rows) return;  // the whole simdgroup: its simd_* calls stay uniform
  const long base = row_start(a.a, row);
  float v[kPer];
  float m = neg_inf();
  for (int k = 0; k < kPer; ++k) {
    const long j = lane + 32 * k;
    v[k] = j < n ? float(x[base + j * cs]) : neg_inf();
    m = max(m, v[k]);
  }
  m = simd_max(m);
  float s = 0.0f;
  for (int k = 0; k < kPer; ++k) {
    const long j = lane + 32 * k;
    if (j < n) {
      const float e = exp(v[k] - m);
      s += e;
      if (!LOG) v[k] = e;
    }
  }
  s = simd_sum(s);
  const float inv = 1.0f / s, shift = m + log(s);
  device T* out = y + row * n;
  for (int k = 0; k < kPer; ++k) {
    const long j = lane + 32 * k;
    if (j < n) out[j] = T(LOG ? v[k] - shift : v[k] * inv);
  }
}

// Rows of up to kPer * threads elements: one read of x, the row kept in registers.
template <typename T, bool LOG>
kernel void softmax_fwd_block(device const T* x [[buffer(0)]], device T* y [[buffer(1)]],
                              constant SoftmaxArgs& a [[buffer(2)]], uint2 tg [[threadgroup_position_in_grid]],
                              uint tid [[thread_index_in_threadgroup]], uint2 tpg2 [[threads_per_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                              uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;  // MSL: position attributes share one width
  threadgroup float part[32];
  const long row = tg.y, n = a.n, cs = a.a.cstride;
  const long base = row_start(a.a, row);
  float v[kPer];
  float m = neg_inf();
  for (int k = 0; k < kPer; ++k) {
    const long j = tid + long(k) * tpg;
    v[k] = j < n ? float(x[base + j * cs]) : neg_inf();
    m = max(m, v[k]);
  }
  m = tg_max(m, part, lane, sg, nsg);
  float s = 0.0f;
  for (int k = 0; k < kPer; ++k) {
    const long j = tid + long(k) * tpg;
    if (j < n) {
      const float e = exp(v[k] - m);
      s += e;
      if (!LOG) v[k] = e;
    }
  }
  s = tg_sum(s, part, lane, sg, nsg);
  const float inv = 1.0f / s, shift = m + log(s);
  device T* out = y + row * n;
  for (int k = 0; k < kPer; ++k) {
    const long j = tid + long(k) * tpg;
    if (j < n) out[j] = T(LOG ? v[k] - shift : v[k] * inv);
  }
}

// Long rows: an online (max, sum) pass, combined across the group, then the output pass.
template <typename T, bool LOG>
kernel void softmax_fwd_looped(device const T* x [[buffer(0)]], device T* y [[buffer(1)]],
                               constant SoftmaxArgs& a [[buffer(2)]], uint2 tg [[threadgroup_position_in_grid]],
                               uint tid [[thread_index_in_threadgroup]], uint2 tpg2 [[threads_per_threadgroup]],
                               uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                               uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;  // MSL: position attributes share one width
  threadgroup float part[32];
  const long row = tg.y, n = a.n, cs = a.a.cstride;
  device const T* xr = x + row_start(a.a, row);
  float m = neg_inf(), s = 0.0f;
  for (long j = tid; j < n; j += tpg) {
    const float xv = float(xr[j * cs]);
    if (xv > m) {
      s = s * exp(m - xv) + 1.0f;
      m = xv;
    } else if (xv != neg_inf()) {  // -inf adds nothing (and exp(-inf - -inf) would be NaN); NaN passes
      s += exp(xv - m);
    }
  }
  const float M = tg_max(m, part, lane, sg, nsg);
  s = tg_sum(m == neg_inf() ? 0.0f : s * exp(m - M), part, lane, sg, nsg);
  const float inv = 1.0f / s, shift = M + log(s);
  device T* out = y + row * n;
  for (long j = tid; j < n; j += tpg) {
    const float xv = float(xr[j * cs]);
    out[j] = T(LOG ? xv - shift : exp(xv - M) * inv);
  }
}

// softmax: dx = y * (g - sum(g * y)); log_softmax (y = log p): dx = g - exp(y) * sum(g).
template <typename T, bool LOG>
kernel void softmax_bwd_simd(device const T* y [[buffer(0)]], device const T* g [[buffer(1)]],
                             device T* dx [[buffer(2)]], constant SoftmaxArgs& a [[buffer(3)]],
                             uint2 tg [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]],
                             uint sg [[simdgroup_index_in_threadgroup]], uint nsg [[simdgroups_per_threadgroup]]) {
  const long row = long(tg.y) * nsg + sg, n = a.n;
  if (row >= a.rows) return;
  const long by = row_start(a.a, row), bg = row_start(a.b, row);
  float yv[kPer], gv[kPer];
  float s = 0.0f;
  for (int k = 0; k < kPer; ++k) {
    const long j = lane + 32 * k;
    yv[k] = j < n ? float(y[by + j * a.a.cstride]) : 0.0f;
    gv[k] = j < n ? float(g[bg + j * a.b.cstride]) : 0.0f;
    s += LOG ? gv[k] : gv[k] * yv[k];
  }
  s = simd_sum(s);
  device T* out = dx + row * n;
  for (int k = 0; k < kPer; ++k) {
    const long j = lane + 32 * k;
    if (j < n) out[j] = T(LOG ? gv[k] - exp(yv[k]) * s : yv[k] * (gv[k] - s));
  }
}

template <typename T, bool LOG>
kernel void softmax_bwd_block(device const T* y [[buffer(0)]], device const T* g [[buffer(1)]],
                              device T* dx [[buffer(2)]], constant SoftmaxArgs& a [[buffer(3)]],
                              uint2 tg [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                              uint2 tpg2 [[threads_per_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]], uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;  // MSL: position attributes share one width
  threadgroup float part[32];
  const long row = tg.y, n = a.n;
  const long by = row_start(a.a, row), bg = row_start(a.b, row);
  float yv[kPer], gv[kPer];
  float s = 0.0f;
  for (int k = 0; k < kPer; ++k) {
    const long j = tid + long(k) * tpg;
    yv[k] = j < n ? float(y[by + j * a.a.cstride]) : 0.0f;
    gv[k] = j < n ? float(g[bg + j * a.b.cstride]) : 0.0f;
    s += LOG ? gv[k] : gv[k] * yv[k];
  }
  s = tg_sum(s, part, lane, sg, nsg);
  device T* out = dx + row * n;
  for (int k = 0; k < kPer; ++k) {
    const long j = tid + long(k) * tpg;
    if (j < n) out[j] = T(LOG ? gv[k] - exp(yv[k]) * s : yv[k] * (gv[k] - s));
  }
}

template <typename T, bool LOG>
kernel void softmax_bwd_looped(device const T* y [[buffer(0)]], device const T* g [[buffer(1)]],
                               device T* dx [[buffer(2)]], constant SoftmaxArgs& a [[buffer(3)]],
                               uint2 tg [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                               uint2 tpg2 [[threads_per_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                               uint sg [[simdgroup_index_in_threadgroup]], uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;  // MSL: position attributes share one width
  threadgroup float part[32];
  const long row = tg.y, n = a.n, cy = a.a.cstride, cg = a.b.cstride;
  device const T* yr = y + row_start(a.a, row);
  device const T* gr = g + row_start(a.b, row);
  float s = 0.0f;
  for (long j = tid; j < n; j += tpg) {
    const float gj = float(gr[j * cg]);
    s += LOG ? gj : gj * float(yr[j * cy]);
  }
  s = tg_sum(s, part, lane, sg, nsg);
  device T* out = dx + row * n;
  for (long j = tid; j < n; j += tpg) {
    const float yj = float(yr[j * cy]), gj = float(gr[j * cg]);
    out[j] = T(LOG ? gj - exp(yj) * s : yj * (gj - s));
  }
}

#define instantiate_softmax_one(pre, LOG, tname, T)                                                         \
  template [[host_name(pre "_fwd_simd_" #tname)]] [[kernel]] decltype(softmax_fwd_simd<T, LOG>)             \
      softmax_fwd_simd<T, LOG>;                                                                           \
  template [[host_name(pre "_bwd_simd_" #tname)]] [[kernel]] decltype(softmax_bwd_simd<T, LOG>)             \
      softmax_bwd_simd<T, LOG>;                                                                           \
  template [[host_name(pre "_fwd_block_" #tname)]] [[kernel]] decltype(softmax_fwd_block<T, LOG>)           \
      softmax_fwd_block<T, LOG>;                                                                          \
  template [[host_name(pre "_fwd_looped_" #tname)]] [[kernel]] decltype(softmax_fwd_looped<T, LOG>)         \
      softmax_fwd_looped<T, LOG>;                                                                         \
  template [[host_name(pre "_bwd_block_" #tname)]] [[kernel]] decltype(softmax_bwd_block<T, LOG>)           \
      softmax_bwd_block<T, LOG>;                                                                          \
  template [[host_name(pre "_bwd_looped_" #tname)]] [[kernel]] decltype(softmax_bwd_looped<T, LOG>)         \
      softmax_bwd_looped<T, LOG>;

#define instantiate_softmax(tname, T)                 \
  instantiate_softmax_one("softmax", false, tname, T) \
  instantiate_softmax_one("log_softmax", true, tname, T)

instantiate_softmax(float32, float)
instantiate_softmax(float16, half)
instantiate_softmax(bfloat16, bfloat)
