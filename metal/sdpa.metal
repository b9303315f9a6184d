// Scaled dot-product attention, f32/f16/bf16 accumulated in float, never forming the Lq x Lk matrix:
// a tiled flash-attention forward (one simdgroup per query row, K/V tiles shared through threadgroup
// memory, online softmax, writing out and the logsumexp), a decode forward for a few queries (the
// group's simdgroups split the keys and merge their partial softmaxes; over a long cache the keys are
// also split over threadgroups, merged by a second kernel), and a backward in two
// deterministic passes: dQ per query row over K/V tiles, dK/dV per key row over Q/dO tiles (and over
// the query heads it serves, so grouped-query heads need no atomics). Causal aligned bottom-right (query
// i sees keys j <= i + Lk - Lq, a KV-cache step's mask), an additive float or uint8 keep-mask with broadcast strides, H % Hkv == 0, head dims
// up to 256, Lq != Lk; inputs with any strides and offset. Scores are kept in base 2 (log2(e) folded
// into the scale), as in the CPU kernels. Optional soft-capping (Gemma 2): the scaled score s becomes
// c * tanh(s / c) before the mask; Q is then scaled by scale / c and the cap applied to each dot product.
#include <metal_stdlib>
using namespace metal;

constant constexpr int kMaxD = 256;
constant constexpr int kSlots = kMaxD / 32;  // head-dim elements per lane: d = lane + 32 * t
constant constexpr int kTile = 2048;         // floats per threadgroup tile (8 KiB)
constant constexpr int kMaxTileRows = 64;    // rows per tile (kTile / max(D, Dv), at most this)
constant constexpr float kLog2e = 1.44269504088896341f;
constant constexpr float kLn2 = 0.693147180559945309f;

// Must match the host's copy in cpp/metal/ops/fused.cpp. Strides in elements for (b, h, row, col);
// broadcast mask dims have stride 0.
struct SdpaArgs {
  long B, H, Hkv, Lq, Lk, D, Dv;
  long q_off, k_off, v_off, m_off, o_off, g_off;
  long sq[4], sk[4], sv[4], sm[4], so[4], sg[4];
  long tile;       // rows per K/V (forward, dQ) or Q/dO (dK/dV) tile; tile * max(D, Dv) <= kTile
  float scale;
  uint causal;
  uint mask_kind;  // 0 none, 1 keep-mask (uint8: 0 = masked out), 2 additive
  uint pad;        // sdpa_decode_split / merge: the number of key chunks
  float softcap;   // 0: off
  uint pad2;
};

inline float neg_inf() { return -numeric_limits<float>::infinity(); }
// Causal: the keys [0, causal_end(a, i)) are visible to query i (bottom-right aligned).
inline long causal_end(constant SdpaArgs& a, long i) { return max(long(0), min(a.Lk, i + 1 + a.Lk - a.Lq)); }

// Q's factor: scale * log2(e) (base-2 scores), or scale / c with soft-capping (then `capped` gives the
// base-2 score c * log2(e) * tanh(dot), with the cap's derivative 1 - tanh^2 in dth).
inline float q_mul(constant SdpaArgs& a) { return a.softcap > 0.0f ? a.scale / a.softcap : a.scale * kLog2e; }
inline float capped(float dot, constant SdpaArgs& a, thread float& dth) {
  if (a.softcap <= 0.0f) {
    dth = 1.0f;
    return dot;
  }
  const float t = precise::tanh(dot);
  dth = 1.0f - t * t;
  return t * (a.softcap * kLog2e);
}
// dK's factor against Q * q_mul: scale / q_mul.
inline float k_mul(constant SdpaArgs& a) { return a.softcap > 0.0f ? a.softcap : kLn2; }

// NaN scores (a NaN query, key or mask) make their row NaN, as in torch; only a row whose scores are all
// -inf is fully masked (0). max() drops a NaN operand, so the running max takes the NaN explicitly.
inline float nan_max(float a, float b) { return (a != a || b != b) ? a + b : max(a, b); }
inline float inv_sum(float l) { return l > 0.0f ? 1.0f / l : (l == l ? 0.0f : l); }
inline float row_lse(float m, float l) { return l > 0.0f ? (m + log2(l)) * kLn2 : (l == l ? neg_inf() : l); }

// The base-2 score s of (b, h, i, j) after the mask; -inf when masked out.
template <typename M>
inline float masked(float s, device const M* mask, constant SdpaArgs& a, long b, long h, long i, long j) {
  if (a.mask_kind == 0) return s;
  const float mv = float(mask[a.m_off + b * a.sm[0] + h * a.sm[1] + i * a.sm[2] + j * a.sm[3]]);
  if (a.mask_kind == 1) return mv == 0.0f ? neg_inf() : s;
  return s + mv * kLog2e;
}

// Rows [r0, r0 + nr) of a strided (rows, cols) matrix into dst (dense, ld = cols) as float times mul,
// by the whole threadgroup.
template <typename T>
inline void load_tile(threadgroup float* dst, device const T* src, long rs, long cs, long r0, long nr, long cols,
                      float mul, uint tid, uint tpg) {
  for (long e = tid; e < nr * cols; e += tpg) {
    const long r = e / cols, c = e % cols;
    dst[e] = float(src[(r0 + r) * rs + c * cs]) * mul;
  }
}

// Forward: grid (32 * nsg, ceil(Lq / nsg), B * H); simdgroup sg of group y handles query y * nsg + sg.
template <typename T, typename M>
kernel void sdpa_fwd(device const T* q [[buffer(0)]], device const T* k [[buffer(1)]], device const T* v [[buffer(2)]],
                     device const M* mask [[buffer(3)]], device T* out [[buffer(4)]], device float* lse [[buffer(5)]],
                     constant SdpaArgs& a [[buffer(6)]], uint3 tg [[threadgroup_position_in_grid]],
                     uint tid [[thread_index_in_threadgroup]], uint3 tpg3 [[threads_per_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                     uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg3.x;  // MSL: position attributes share one width
  threadgroup float Ks[kTile];
  threadgroup float Vs[kTile];
  const long bh = tg.z, b = bh / a.H, h = bh % a.H, hk = h / (a.H / a.Hkv);
  const long D = a.D, Dv = a.Dv, i0 = long(tg.y) * nsg, i = i0 + sg;
  const bool live = i < a.Lq;  // uniform in a simdgroup, so its simd_sums stay uniform too
  device const T* qp = q + a.q_off + b * a.sq[0] + h * a.sq[1] + i * a.sq[2];
  device const T* kp = k + a.k_off + b * a.sk[0] + hk * a.sk[1];
  device const T* vp = v + a.v_off + b * a.sv[0] + hk * a.sv[1];
  float qr[kSlots], acc[kSlots];
  for (int t = 0; t < kSlots; ++t) {
    const long d = lane + 32 * t;
    qr[t] = live && d < D ? float(qp[d * a.sq[3]]) * q_mul(a) : 0.0f;
    acc[t] = 0.0f;
  }
  float m = neg_inf(), l = 0.0f;
  const long ilast = min(a.Lq, i0 + long(nsg)) - 1;
  const long kend = a.causal ? causal_end(a, ilast) : a.Lk;
  for (long kt = 0; kt < kend; kt += a.tile) {
    const long nk = min(a.tile, kend - kt);
    threadgroup_barrier(mem_flags::mem_threadgroup);  // the previous tile's readers are done
    load_tile(Ks, kp, a.sk[2], a.sk[3], kt, nk, D, 1.0f, tid, tpg);
    load_tile(Vs, vp, a.sv[2], a.sv[3], kt, nk, Dv, 1.0f, tid, tpg);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (!live) continue;
    const long jend = a.causal ? min(nk, causal_end(a, i) - kt) : nk;
    for (long jj = 0; jj < jend; ++jj) {
      float part = 0.0f;
      for (int t = 0; t < kSlots; ++t) {
        const long d = lane + 32 * t;
        if (d < D) part += qr[t] * Ks[jj * D + d];
      }
      float dth;
      const float s = masked(capped(simd_sum(part), a, dth), mask, a, b, h, i, kt + jj);
      if (s == neg_inf()) continue;  // adds nothing (and -inf - -inf would be NaN)
      if (s != s) m = s;  // from here on p, l and the row are NaN
      float alpha = 1.0f, p = 1.0f;
      if (s > m) {
        alpha = exp2(m - s);
        m = s;
      } else {
        p = exp2(s - m);
      }
      l = l * alpha + p;
      for (int t = 0; t < kSlots; ++t) {
        const long d = lane + 32 * t;
        if (d < Dv) acc[t] = acc[t] * alpha + p * Vs[jj * Dv + d];
      }
    }
  }
  if (!live) return;
  const float inv = inv_sum(l);  // a fully masked row gives 0 and lse = -inf, a NaN row NaN
  device T* o = out + (bh * a.Lq + i) * Dv;
  for (int t = 0; t < kSlots; ++t) {
    const long d = lane + 32 * t;
    if (d < Dv) o[d] = T(acc[t] * inv);
  }
  if (lane == 0) lse[bh * a.Lq + i] = row_lse(m, l);
}

// Decode (few queries, many keys): one threadgroup per (query, key chunk); simdgroup sg takes keys
// k0 + sg, k0 + sg + nsg, ... of the chunk straight from device memory, then the group merges the nsg
// partial softmaxes in simdgroup order. Returns the chunk's (max, sum) (base 2) and leaves its
// unnormalised P·V, scaled to that max, in Os[d] for d < Dv. nsg * Dv <= kTile.
template <typename T, typename M>
inline void decode_chunk(device const T* q, device const T* k, device const T* v, device const M* mask,
                         constant SdpaArgs& a, long bh, long i, long k0, long k1, uint tid, uint tpg, uint lane,
                         uint sg, uint nsg, threadgroup float* Ms, threadgroup float* Ls, threadgroup float* Os,
                         thread float& mx_out, thread float& sum_out) {
  const long b = bh / a.H, h = bh % a.H, hk = h / (a.H / a.Hkv);
  const long D = a.D, Dv = a.Dv;
  device const T* qp = q + a.q_off + b * a.sq[0] + h * a.sq[1] + i * a.sq[2];
  device const T* kp = k + a.k_off + b * a.sk[0] + hk * a.sk[1];
  device const T* vp = v + a.v_off + b * a.sv[0] + hk * a.sv[1];
  float qr[kSlots], acc[kSlots];
  for (int t = 0; t < kSlots; ++t) {
    const long d = lane + 32 * t;
    qr[t] = d < D ? float(qp[d * a.sq[3]]) * q_mul(a) : 0.0f;
    acc[t] = 0.0f;
  }
  float m = neg_inf(), l = 0.0f;
  const long kend = a.causal ? min(k1, causal_end(a, i)) : k1;
  for (long j = k0 + sg; j < kend; j += nsg) {
    float part = 0.0f;
    for (int t = 0; t < kSlots; ++t) {
      const long d = lane + 32 * t;
      if (d < D) part += qr[t] * float(kp[j * a.sk[2] + d * a.sk[3]]);
    }
    float dth;
    const float s = masked(capped(simd_sum(part), a, dth), mask, a, b, h, i, j);
    if (s == neg_inf()) continue;
    if (s != s) m = s;  // a NaN score: the chunk's max, sum and P·V are NaN
    float alpha = 1.0f, p = 1.0f;
    if (s > m) {
      alpha = exp2(m - s);
      m = s;
    } else {
      p = exp2(s - m);
    }
    l = l * alpha + p;
    for (int t = 0; t < kSlots; ++t) {
      const long d = lane + 32 * t;
      if (d < Dv) acc[t] = acc[t] * alpha + p * float(vp[j * a.sv[2] + d * a.sv[3]]);
    }
  }
  if (lane == 0) {
    Ms[sg] = m;
    Ls[sg] = l;
  }
  for (int t = 0; t < kSlots; ++t) {
    const long d = lane + 32 * t;
    if (d < Dv) Os[sg * Dv + d] = acc[t];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float mx = neg_inf();
  for (uint s = 0; s < nsg; ++s) mx = nan_max(mx, Ms[s]);
  float L = 0.0f;
  for (uint s = 0; s < nsg; ++s) L += Ms[s] == neg_inf() ? 0.0f : Ls[s] * exp2(Ms[s] - mx);
  // Merged in place into row 0 of Os: each thread owns its own columns d.
  for (long d = tid; d < Dv; d += tpg) {
    float acc_d = 0.0f;
    for (uint s = 0; s < nsg; ++s)
      if (Ms[s] != neg_inf()) acc_d += Os[s * Dv + d] * exp2(Ms[s] - mx);
    Os[d] = acc_d;
  }
  mx_out = mx;
  sum_out = L;
}

// Decode, one key chunk per query: grid (32 * nsg, Lq, B * H).
template <typename T, typename M>
kernel void sdpa_decode(device const T* q [[buffer(0)]], device const T* k [[buffer(1)]],
                        device const T* v [[buffer(2)]], device const M* mask [[buffer(3)]],
                        device T* out [[buffer(4)]], device float* lse [[buffer(5)]],
                        constant SdpaArgs& a [[buffer(6)]], uint3 tg [[threadgroup_position_in_grid]],
                        uint tid [[thread_index_in_threadgroup]], uint3 tpg3 [[threads_per_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                        uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg3.x;  // MSL: position attributes share one width
  threadgroup float Ms[32];
  threadgroup float Ls[32];
  threadgroup float Os[kTile];
  const long bh = tg.z, i = tg.y;
  float mx, L;
  decode_chunk(q, k, v, mask, a, bh, i, 0, a.Lk, tid, tpg, lane, sg, nsg, Ms, Ls, Os, mx, L);
  const float inv = inv_sum(L);  // a fully masked row gives 0 and lse = -inf, a NaN row NaN
  device T* o = out + (bh * a.Lq + i) * a.Dv;
  for (long d = tid; d < a.Dv; d += tpg) o[d] = T(Os[d] * inv);
  if (tid == 0) lse[bh * a.Lq + i] = row_lse(mx, L);
}

// Decode with the keys split over a.pad chunks (threadgroups), for few (query, head) pairs over a long
// cache: grid (32 * nsg, Lq * chunks, B * H); each group leaves (max, sum, P·V) of its chunk in part
// (rows of Dv + 2 floats), merged by sdpa_decode_merge.
template <typename T, typename M>
kernel void sdpa_decode_split(device const T* q [[buffer(0)]], device const T* k [[buffer(1)]],
                              device const T* v [[buffer(2)]], device const M* mask [[buffer(3)]],
                              device float* part [[buffer(4)]], constant SdpaArgs& a [[buffer(5)]],
                              uint3 tg [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                              uint3 tpg3 [[threads_per_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                              uint sg [[simdgroup_index_in_threadgroup]], uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg3.x;  // MSL: position attributes share one width
  threadgroup float Ms[32];
  threadgroup float Ls[32];
  threadgroup float Os[kTile];
  const long chunks = a.pad, bh = tg.z, i = long(tg.y) / chunks, c = long(tg.y) % chunks;
  const long len = (a.Lk + chunks - 1) / chunks, k0 = c * len, k1 = min(a.Lk, k0 + len);
  float mx, L;
  decode_chunk(q, k, v, mask, a, bh, i, k0, k1, tid, tpg, lane, sg, nsg, Ms, Ls, Os, mx, L);
  device float* pr = part + ((bh * a.Lq + i) * chunks + c) * (a.Dv + 2);
  for (long d = tid; d < a.Dv; d += tpg) pr[2 + d] = Os[d];
  if (tid == 0) {
    pr[0] = mx;
    pr[1] = L;
  }
}

// Merges sdpa_decode_split's chunks in chunk order: grid (32, Lq, B * H).
template <typename T>
kernel void sdpa_decode_merge(device const float* part [[buffer(0)]], device T* out [[buffer(1)]],
                              device float* lse [[buffer(2)]], constant SdpaArgs& a [[buffer(3)]],
                              uint3 tg [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],
                              uint3 tpg3 [[threads_per_threadgroup]]) {
  const uint tpg = tpg3.x;  // MSL: position attributes share one width
  const long chunks = a.pad, row = long(tg.z) * a.Lq + tg.y, ld = a.Dv + 2;
  device const float* pr = part + row * chunks * ld;
  float mx = neg_inf();
  for (long c = 0; c < chunks; ++c) mx = nan_max(mx, pr[c * ld]);
  float L = 0.0f;
  for (long c = 0; c < chunks; ++c) L += pr[c * ld] == neg_inf() ? 0.0f : pr[c * ld + 1] * exp2(pr[c * ld] - mx);
  const float inv = inv_sum(L);
  for (long d = tid; d < a.Dv; d += tpg) {
    float acc = 0.0f;
    for (long c = 0; c < chunks; ++c)
      if (pr[c * ld] != neg_inf()) acc += pr[c * ld + 2 + d] * exp2(pr[c * ld] - mx);
    out[row * a.Dv + d] = T(acc * inv);
  }
  if (tid == 0) lse[row] = row_lse(mx, L);
}

// Backward, pass 0: di[bh, i] = rowsum(dO * O). Grid (32, Lq, B * H), a simdgroup per row.
template <typename T>
kernel void sdpa_bwd_prep(device const T* o [[buffer(0)]], device const T* g [[buffer(1)]],
                          device float* di [[buffer(2)]], constant SdpaArgs& a [[buffer(3)]],
                          uint3 tg [[threadgroup_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  const long bh = tg.z, b = bh / a.H, h = bh % a.H, i = tg.y;
  device const T* op = o + a.o_off + b * a.so[0] + h * a.so[1] + i * a.so[2];
  device const T* gp = g + a.g_off + b * a.sg[0] + h * a.sg[1] + i * a.sg[2];
  float s = 0.0f;
  for (long d = lane; d < a.Dv; d += 32) s += float(op[d * a.so[3]]) * float(gp[d * a.sg[3]]);
  s = simd_sum(s);
  if (lane == 0) di[bh * a.Lq + i] = s;
}

// Backward, dQ: grid and tiles as the forward. P = exp2(S - lse2), dS = P * (dO V^T - di) (times
// 1 - tanh^2 with soft-capping), dQ = scale * dS K.
template <typename T, typename M>
kernel void sdpa_bwd_dq(device const T* q [[buffer(0)]], device const T* k [[buffer(1)]],
                        device const T* v [[buffer(2)]], device const M* mask [[buffer(3)]],
                        device const T* g [[buffer(4)]], device const float* lse [[buffer(5)]],
                        device const float* di [[buffer(6)]], device T* dq [[buffer(7)]],
                        constant SdpaArgs& a [[buffer(8)]], uint3 tg [[threadgroup_position_in_grid]],
                        uint tid [[thread_index_in_threadgroup]], uint3 tpg3 [[threads_per_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                        uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg3.x;  // MSL: position attributes share one width
  threadgroup float Ks[kTile];
  threadgroup float Vs[kTile];
  const long bh = tg.z, b = bh / a.H, h = bh % a.H, hk = h / (a.H / a.Hkv);
  const long D = a.D, Dv = a.Dv, i0 = long(tg.y) * nsg, i = i0 + sg;
  const bool live = i < a.Lq;
  device const T* qp = q + a.q_off + b * a.sq[0] + h * a.sq[1] + i * a.sq[2];
  device const T* gp = g + a.g_off + b * a.sg[0] + h * a.sg[1] + i * a.sg[2];
  device const T* kp = k + a.k_off + b * a.sk[0] + hk * a.sk[1];
  device const T* vp = v + a.v_off + b * a.sv[0] + hk * a.sv[1];
  float qr[kSlots], gr[kSlots], acc[kSlots];
  for (int t = 0; t < kSlots; ++t) {
    const long d = lane + 32 * t;
    qr[t] = live && d < D ? float(qp[d * a.sq[3]]) * q_mul(a) : 0.0f;
    gr[t] = live && d < Dv ? float(gp[d * a.sg[3]]) : 0.0f;
    acc[t] = 0.0f;
  }
  const float lse_i = live ? lse[bh * a.Lq + i] : neg_inf();
  const bool dead = lse_i == neg_inf();  // a fully masked row: P = 0 everywhere
  const float l2 = lse_i * kLog2e, di_i = live ? di[bh * a.Lq + i] : 0.0f;
  const long ilast = min(a.Lq, i0 + long(nsg)) - 1;
  const long kend = a.causal ? causal_end(a, ilast) : a.Lk;
  for (long kt = 0; kt < kend; kt += a.tile) {
    const long nk = min(a.tile, kend - kt);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    load_tile(Ks, kp, a.sk[2], a.sk[3], kt, nk, D, 1.0f, tid, tpg);
    load_tile(Vs, vp, a.sv[2], a.sv[3], kt, nk, Dv, 1.0f, tid, tpg);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (!live || dead) continue;
    const long jend = a.causal ? min(nk, causal_end(a, i) - kt) : nk;
    for (long jj = 0; jj < jend; ++jj) {
      float ps = 0.0f, pd = 0.0f;
      for (int t = 0; t < kSlots; ++t) {
        const long d = lane + 32 * t;
        if (d < D) ps += qr[t] * Ks[jj * D + d];
        if (d < Dv) pd += gr[t] * Vs[jj * Dv + d];
      }
      float dth;
      const float s = masked(capped(simd_sum(ps), a, dth), mask, a, b, h, i, kt + jj);
      const float dp = simd_sum(pd);
      if (s == neg_inf()) continue;
      const float p = exp2(s - l2), ds = p * (dp - di_i) * dth;
      for (int t = 0; t < kSlots; ++t) {
        const long d = lane + 32 * t;
        if (d < D) acc[t] += ds * Ks[jj * D + d];
      }
    }
  }
  if (!live) return;
  device T* out = dq + (bh * a.Lq + i) * D;
  for (int t = 0; t < kSlots; ++t) {
    const long d = lane + 32 * t;
    if (d < D) out[d] = T(acc[t] * a.scale);
  }
}

// Backward, dK and dV: grid (32 * nsg, ceil(Lk / nsg), B * Hkv); simdgroup sg of group y owns key
// y * nsg + sg and walks every query row of every query head it serves, in tiles of Q and dO:
// dV = sum P dO, dK = sum dS Q * scale.
template <typename T, typename M>
kernel void sdpa_bwd_dkv(device const T* q [[buffer(0)]], device const T* k [[buffer(1)]],
                         device const T* v [[buffer(2)]], device const M* mask [[buffer(3)]],
                         device const T* g [[buffer(4)]], device const float* lse [[buffer(5)]],
                         device const float* di [[buffer(6)]], device T* dk [[buffer(7)]], device T* dv [[buffer(8)]],
                         constant SdpaArgs& a [[buffer(9)]], uint3 tg [[threadgroup_position_in_grid]],
                         uint tid [[thread_index_in_threadgroup]], uint3 tpg3 [[threads_per_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                         uint nsg [[simdgroups_per_threadgroup]]) {
  const uint tpg = tpg3.x;  // MSL: position attributes share one width
  threadgroup float Qs[kTile];
  threadgroup float Gs[kTile];
  threadgroup float L2s[kMaxTileRows];
  threadgroup float Ds[kMaxTileRows];
  const long bhk = tg.z, b = bhk / a.Hkv, hk = bhk % a.Hkv, group = a.H / a.Hkv;
  const long D = a.D, Dv = a.Dv, j0 = long(tg.y) * nsg, j = j0 + sg;
  const bool live = j < a.Lk;
  device const T* kp = k + a.k_off + b * a.sk[0] + hk * a.sk[1] + j * a.sk[2];
  device const T* vp = v + a.v_off + b * a.sv[0] + hk * a.sv[1] + j * a.sv[2];
  float kr[kSlots], vr[kSlots], dka[kSlots], dva[kSlots];
  for (int t = 0; t < kSlots; ++t) {
    const long d = lane + 32 * t;
    kr[t] = live && d < D ? float(kp[d * a.sk[3]]) : 0.0f;
    vr[t] = live && d < Dv ? float(vp[d * a.sv[3]]) : 0.0f;
    dka[t] = 0.0f;
    dva[t] = 0.0f;
  }
  // earlier queries see none of this group's keys (query i sees keys j <= i + Lk - Lq)
  const long qstart = a.causal ? max(long(0), min(a.Lq, j0 - (a.Lk - a.Lq))) : 0;
  for (long hh = 0; hh < group; ++hh) {
    const long h = hk * group + hh, bh = b * a.H + h;
    device const T* qp = q + a.q_off + b * a.sq[0] + h * a.sq[1];
    device const T* gp = g + a.g_off + b * a.sg[0] + h * a.sg[1];
    for (long qt = qstart; qt < a.Lq; qt += a.tile) {
      const long nq = min(a.tile, a.Lq - qt);
      threadgroup_barrier(mem_flags::mem_threadgroup);
      load_tile(Qs, qp, a.sq[2], a.sq[3], qt, nq, D, q_mul(a), tid, tpg);
      load_tile(Gs, gp, a.sg[2], a.sg[3], qt, nq, Dv, 1.0f, tid, tpg);
      for (long r = tid; r < nq; r += tpg) {
        const float ls = lse[bh * a.Lq + qt + r];
        // a fully masked row (lse = -inf) must give P = 0: exp2(s - +inf)
        L2s[r] = ls == neg_inf() ? numeric_limits<float>::infinity() : ls * kLog2e;
        Ds[r] = di[bh * a.Lq + qt + r];
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
      if (!live) continue;
      for (long r = 0; r < nq; ++r) {
        const long i = qt + r;
        if (a.causal && j > i + a.Lk - a.Lq) continue;
        float ps = 0.0f, pd = 0.0f;
        for (int t = 0; t < kSlots; ++t) {
          const long d = lane + 32 * t;
          if (d < D) ps += Qs[r * D + d] * kr[t];
          if (d < Dv) pd += Gs[r * Dv + d] * vr[t];
        }
        float dth;
        const float s = masked(capped(simd_sum(ps), a, dth), mask, a, b, h, i, j);
        const float dp = simd_sum(pd);
        if (s == neg_inf()) continue;
        const float p = exp2(s - L2s[r]), ds = p * (dp - Ds[r]) * dth;
        for (int t = 0; t < kSlots; ++t) {
          const long d = lane + 32 * t;
          if (d < Dv) dva[t] += p * Gs[r * Dv + d];
          if (d < D) dka[t] += ds * Qs[r * D + d];
        }
      }
    }
  }
  if (!live) return;
  device T* dko = dk + (bhk * a.Lk + j) * D;
  device T* dvo = dv + (bhk * a.Lk + j) * Dv;
  for (int t = 0; t < kSlots; ++t) {
    const long d = lane + 32 * t;
    if (d < D) dko[d] = T(dka[t] * k_mul(a));  // Q was scaled by q_mul
    if (d < Dv) dvo[d] = T(dva[t]);
  }
}

#define instantiate_sdpa_mask(tname, T, mname, M)                                                        \
  template [[host_name("sdpa_fwd_" #tname "_" #mname)]] [[kernel]] decltype(sdpa_fwd<T, M>) sdpa_fwd<T, M>; \
  template [[host_name("sdpa_decode_" #tname "_" #mname)]] [[kernel]] decltype(sdpa_decode<T, M>)          \
      sdpa_decode<T, M>;                                                                                 \
  template [[host_name("sdpa_decode_split_" #tname "_" #mname)]] [[kernel]]                              \
      decltype(sdpa_decode_split<T, M>) sdpa_decode_split<T, M>;                                         \
  template [[host_name("sdpa_bwd_dq_" #tname "_" #mname)]] [[kernel]] decltype(sdpa_bwd_dq<T, M>)          \
      sdpa_bwd_dq<T, M>;                                                                                 \
  template [[host_name("sdpa_bwd_dkv_" #tname "_" #mname)]] [[kernel]] decltype(sdpa_bwd_dkv<T, M>)        \
      sdpa_bwd_dkv<T, M>;

// Without a mask the uint8 variants run with mask_kind 0.
#define instantiate_sdpa(tname, T)                                                                        \
  template [[host_name("sdpa_bwd_prep_" #tname)]] [[kernel]] decltype(sdpa_bwd_prep<T>) sdpa_bwd_prep<T>;  \
  template [[host_name("sdpa_decode_merge_" #tname)]] [[kernel]] decltype(sdpa_decode_merge<T>)            \
      sdpa_decode_merge<T>;                                                                               \
  instantiate_sdpa_mask(tname, T, uint8, uchar)                                                          \
  instantiate_sdpa_mask(tname, T, float32, float)                                                        \
  instantiate_sdpa_mask(tname, T, float16, half)                                                         \
  instantiate_sdpa_mask(tname, T, bfloat16, bfloat)

instantiate_sdpa(float32, float)
instantiate_sdpa(float16, half)
instantiate_sdpa(bfloat16, bfloat)
