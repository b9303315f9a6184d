// rms_norm and layer_norm over the last dim, forward (saving rstd, and layer_norm's mean, in float per
// row) and backward (dx per row; dw / db reduced over rows in two deterministic passes: per-chunk
// column partials, then their sum in chunk order). f32/f16/bf16 computed in float. Inputs are read
// through a RowLayout (any strides and offset), weight and bias through (offset, stride); outputs are
// dense. Threadgroup sizes are multiples of 32.
#include <metal_stdlib>
using namespace metal;

constant constexpr int kRowDims = 8;  // outer dims of a row layout, after the host coalesced them

// Row r starts at offset + sum((r unravelled) * stride); its elements are cstride apart. Must match
// the host's copy in cpp/metal/ops/fused.cpp.
struct RowLayout {
  long offset;
  long cstride;
  long nd;
  long shape[kRowDims];
  long stride[kRowDims];
};
struct NormArgs {
  RowLayout x;
  RowLayout g;     // the incoming gradient (backward only)
  long n;          // row length
  long rows;
  long w_off, w_st, b_off, b_st;
  long chunk;      // rows per partial of the dw/db pass
  long nchunks;
  float eps;
  uint has_w;      // weight / bias given (else ones / zeros)
  uint has_b;
  uint has_mean;   // the dw/db passes: layer_norm (x - mean) or rms_norm (x)
};

inline long row_start(constant RowLayout& l, long r) {
  long o = l.offset;
  for (long d = l.nd - 1; d >= 0; --d) {
    o += (r % l.shape[d]) * l.stride[d];
    r /= l.shape[d];
  }
  return o;
}

// A threadgroup-wide sum every thread gets, reduced in a fixed order (see softmax.metal).
inline float tg_sum(float v, threadgroup float* part, uint lane, uint sg, uint nsg) {
  v = simd_sum(v);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lane == 0) part[sg] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return simd_sum(lane < nsg ? part[lane] : 0.0f);
}

// y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps). One threadgroup per row (grid (tpg, rows)).
template <typename T>
kernel void rms_norm_fwd(device const T* x [[buffer(0)]], device const T* w [[buffer(1)]], device T* y [[buffer(2)]],
                         device float* rstd [[buffer(3)]], constant NormArgs& a [[buffer(4)]],
                         uint2 tg [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                         uint2 tpg2 [[threads_per_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                         uint sg [[simdgroup_index_in_threadgroup]], uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;  // MSL: position attributes share one width
  threadgroup float part[32];
  const long row = tg.y, n = a.n, cs = a.x.cstride;
  device const T* xr = x + row_start(a.x, row);
  float ss = 0.0f;
  for (long j = tid; j < n; j += tpg) {
    const float v = float(xr[j * cs]);
    ss += v * v;
  }
  ss = tg_sum(ss, part, lane, sg, nsg);
  const float r = 1.0f / sqrt(ss / float(n) + a.eps);
  if (tid == 0) rstd[row] = r;
  device T* out = y + row * n;
  for (long j = tid; j < n; j += tpg)
    out[j] = T(float(xr[j * cs]) * r * (a.has_w ? float(w[a.w_off + j * a.w_st]) : 1.0f));
}

// y = (x - mean) * rstd * w + b with the biased variance (two passes over the row: mean, then the
// centred squares, which keeps the variance exact for rows far from zero).
template <typename T>
kernel void layer_norm_fwd(device const T* x [[buffer(0)]], device const T* w [[buffer(1)]],
                           device const T* b [[buffer(2)]], device T* y [[buffer(3)]],
                           device float* mean [[buffer(4)]], device float* rstd [[buffer(5)]],
                           constant NormArgs& a [[buffer(6)]], uint2 tg [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]], uint2 tpg2 [[threads_per_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                           uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;  // MSL: position attributes share one width
  threadgroup float part[32];
  const long row = tg.y, n = a.n, cs = a.x.cstride;
  device const T* xr = x + row_start(a.x, row);
  float s = 0.0f;
  for (long j = tid; j < n; j += tpg) s += float(xr[j * cs]);
  const float mu = tg_sum(s, part, lane, sg, nsg) / float(n);
  float ss = 0.0f;
  for (long j = tid; j < n; j += tpg) {
    const float c = float(xr[j * cs]) - mu;
    ss += c * c;
  }
  const float r = 1.0f / sqrt(tg_sum(ss, part, lane, sg, nsg) / float(n) + a.eps);
  if (tid == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
  device T* out = y + row * n;
  for (long j = tid; j < n; j += tpg) {
    const float wj = a.has_w ? float(w[a.w_off + j * a.w_st]) : 1.0f;
    const float bj = a.has_b ? float(b[a.b_off + j * a.b_st]) : 0.0f;
    out[j] = T((float(xr[j * cs]) - mu) * r * wj + bj);
  }
}

// dx = r * (g*w - xhat * mean(g*w*xhat)), xhat = x * r.
template <typename T>
kernel void rms_norm_bwd_dx(device const T* x [[buffer(0)]], device const T* w [[buffer(1)]],
                            device const float* rstd [[buffer(2)]], device const T* g [[buffer(3)]],
                            device T* dx [[buffer(4)]], constant NormArgs& a [[buffer(5)]],
                            uint2 tg [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                            uint2 tpg2 [[threads_per_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                            uint sg [[simdgroup_index_in_threadgroup]], uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;  // MSL: position attributes share one width
  threadgroup float part[32];
  const long row = tg.y, n = a.n, cx = a.x.cstride, cg = a.g.cstride;
  device const T* xr = x + row_start(a.x, row);
  device const T* gr = g + row_start(a.g, row);
  const float r = rstd[row];
  float s = 0.0f;
  for (long j = tid; j < n; j += tpg)
    s += float(gr[j * cg]) * (a.has_w ? float(w[a.w_off + j * a.w_st]) : 1.0f) * float(xr[j * cx]);
  const float c = r * r * tg_sum(s, part, lane, sg, nsg) / float(n);  // mean(g*w*xhat) * r
  device T* out = dx + row * n;
  for (long j = tid; j < n; j += tpg) {
    const float gw = float(gr[j * cg]) * (a.has_w ? float(w[a.w_off + j * a.w_st]) : 1.0f);
    out[j] = T(r * (gw - float(xr[j * cx]) * c));
  }
}

// dx = r * (g*w - mean(g*w) - xhat * mean(g*w*xhat)), xhat = (x - mean) * r.
template <typename T>
kernel void layer_norm_bwd_dx(device const T* x [[buffer(0)]], device const T* w [[buffer(1)]],
                              device const float* mean [[buffer(2)]], device const float* rstd [[buffer(3)]],
                              device const T* g [[buffer(4)]], device T* dx [[buffer(5)]],
                              constant NormArgs& a [[buffer(6)]], uint2 tg [[threadgroup_position_in_grid]],
                              uint tid [[thread_index_in_threadgroup]], uint2 tpg2 [[threads_per_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                              uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg2.x;  // MSL: position attributes share one width
  threadgroup float part[32];
  const long row = tg.y, n = a.n, cx = a.x.cstride, cg = a.g.cstride;
  device const T* xr = x + row_start(a.x, row);
  device const T* gr = g + row_start(a.g, row);
  const float mu = mean[row], r = rstd[row];
  float s1 = 0.0f, s2 = 0.0f;
  for (long j = tid; j < n; j += tpg) {
    const float gw = float(gr[j * cg]) * (a.has_w ? float(w[a.w_off + j * a.w_st]) : 1.0f);
    s1 += gw;
    s2 += gw * (float(xr[j * cx]) - mu) * r;
  }
  const float m1 = tg_sum(s1, part, lane, sg, nsg) / float(n);
  const float m2 = tg_sum(s2, part, lane, sg, nsg) / float(n);
  device T* out = dx + row * n;
  for (long j = tid; j < n; j += tpg) {
    const float gw = float(gr[j * cg]) * (a.has_w ? float(w[a.w_off + j * a.w_st]) : 1.0f);
    out[j] = T(r * (gw - m1 - (float(xr[j * cx]) - mu) * r * m2));
  }
}

// dw/db, pass 1: thread (j, c) sums column j over the rows of chunk c: pw = sum g * xhat, pb = sum g.
// Grid (n, nchunks); any threadgroup size.
template <typename T>
kernel void norm_bwd_params_part(device const T* x [[buffer(0)]], device const float* mean [[buffer(1)]],
                                 device const float* rstd [[buffer(2)]], device const T* g [[buffer(3)]],
                                 device float* pw [[buffer(4)]], device float* pb [[buffer(5)]],
                                 constant NormArgs& a [[buffer(6)]], uint2 pos [[thread_position_in_grid]]) {
  const long j = pos.x, c = pos.y, n = a.n;
  if (j >= n || c >= a.nchunks) return;
  const long r0 = c * a.chunk, r1 = min(a.rows, r0 + a.chunk);
  float sw = 0.0f, sb = 0.0f;
  for (long r = r0; r < r1; ++r) {
    const float gv = float(g[row_start(a.g, r) + j * a.g.cstride]);
    const float xv = float(x[row_start(a.x, r) + j * a.x.cstride]);
    sw += gv * (xv - (a.has_mean ? mean[r] : 0.0f)) * rstd[r];
    sb += gv;
  }
  pw[c * n + j] = sw;
  if (a.has_b) pb[c * n + j] = sb;
}

// dw/db, pass 2: thread j sums its column's partials in chunk order. Grid (n).
template <typename T>
kernel void norm_bwd_params_sum(device const float* pw [[buffer(0)]], device const float* pb [[buffer(1)]],
                                device T* dw [[buffer(2)]], device T* db [[buffer(3)]],
                                constant NormArgs& a [[buffer(4)]], uint j [[thread_position_in_grid]]) {
  const long n = a.n;
  if (long(j) >= n) return;
  float sw = 0.0f, sb = 0.0f;
  for (long c = 0; c < a.nchunks; ++c) {
    sw += pw[c * n + j];
    if (a.has_b) sb += pb[c * n + j];
  }
  dw[j] = T(sw);
  if (a.has_b) db[j] = T(sb);
}

#define instantiate_norm(tname, T)                                                                          \
  template [[host_name("rms_norm_fwd_" #tname)]] [[kernel]] decltype(rms_norm_fwd<T>) rms_norm_fwd<T>;       \
  template [[host_name("layer_norm_fwd_" #tname)]] [[kernel]] decltype(layer_norm_fwd<T>) layer_norm_fwd<T>; \
  template [[host_name("rms_norm_bwd_dx_" #tname)]] [[kernel]] decltype(rms_norm_bwd_dx<T>)                  \
      rms_norm_bwd_dx<T>;                                                                                    \
  template [[host_name("layer_norm_bwd_dx_" #tname)]] [[kernel]] decltype(layer_norm_bwd_dx<T>)              \
      layer_norm_bwd_dx<T>;                                                                                  \
  template [[host_name("norm_bwd_params_part_" #tname)]] [[kernel]] decltype(norm_bwd_params_part<T>)        \
      norm_bwd_params_part<T>;                                                                               \
  template [[host_name("norm_bwd_params_sum_" #tname)]] [[kernel]] decltype(norm_bwd_params_sum<T>)          \
      norm_bwd_params_sum<T>;

instantiate_norm(float32, float)
instantiate_norm(float16, half)
instantiate_norm(bfloat16, bfloat)
