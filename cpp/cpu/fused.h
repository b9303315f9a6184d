// Fused CPU kernels (softmax, log_softmax, rms_norm, layer_norm, sdpa, sigmoid/silu/gelu) forward and
// backward. Row kernels are compiled per ISA (fused_isa.cpp) into a FusedTable; fused.cpp walks rows
// of any layout (last dim contiguous read in place, otherwise gathered per row) across the pool.
//
// Saved statistics (rms/layer norm rstd and mean, sdpa logsumexp) use the "stats type": float for
// f32/f16/bf16 inputs and double for f64, so f64 stays exact through the backward.
#pragma once
#include <tuple>

#include "cpu/cpu_storage.h"

namespace ember::cpu {

// ---- per-ISA row kernels. Rows are contiguous (stride 1) of n elements; `rows` rows start at
// x + r*ldx (elements); outputs are dense (row r at y + r*n). `S` = the stats type (see above).
// `nt`: write the output with streaming stores where its rows are vector-aligned (see stream_output).
using SoftmaxFwdFn = void (*)(const void* x, int64_t ldx, void* y, int64_t rows, int64_t n, bool log, bool nt);
using SoftmaxBwdFn = void (*)(const void* y, int64_t ldy, const void* g, int64_t ldg, void* dx, int64_t rows,
                              int64_t n, bool log, bool nt);
// w: contiguous (n,); rstd: S[rows].
using RmsFwdFn = void (*)(const void* x, int64_t ldx, const void* w, void* y, void* rstd, int64_t rows,
                          int64_t n, double eps, bool nt);
// dw_acc: S[n] accumulator (+= g*x*rstd).
// dw_acc (and db_acc) may be null: no parameter gradient is wanted, and their sums are skipped.
using RmsBwdFn = void (*)(const void* x, int64_t ldx, const void* w, const void* rstd, const void* g,
                          int64_t ldg, void* dx, void* dw_acc, int64_t rows, int64_t n, bool nt);
// w, b may be null (treated as ones / zeros).
using LnFwdFn = void (*)(const void* x, int64_t ldx, const void* w, const void* b, void* y, void* mean,
                         void* rstd, int64_t rows, int64_t n, double eps, bool nt);
using LnBwdFn = void (*)(const void* x, int64_t ldx, const void* w, const void* mean, const void* rstd,
                         const void* g, int64_t ldg, void* dx, void* dw_acc, void* db_acc, int64_t rows,
                         int64_t n, bool nt);
// Elementwise backward over n contiguous elements: dx = g * f'(a).
using EltBwdFn = void (*)(const void* a, const void* g, void* dx, int64_t n);
// The same for the activations with scalar parameters p0, p1 (ActKind::Elu on).
using ActBwdFn = void (*)(const void* a, const void* g, void* dx, int64_t n, double p0, double p1);
// gelu(x + b) over rows (b contiguous (n,)); the backward writes dx = g * gelu'(x + b) and, when db_acc
// (stats type, n) is not null, adds dx's column sums into it.
using BiasGeluFwdFn = void (*)(const void* x, int64_t ldx, const void* b, void* y, int64_t rows, int64_t n);
using BiasGeluBwdFn = void (*)(const void* x, int64_t ldx, const void* b, const void* g, int64_t ldg, void* dx,
                               void* db_acc, int64_t rows, int64_t n);

// Per-thread scratch for the ISA kernels, one buffer per slot, 64-byte aligned, grown on demand and
// valid until the same thread asks for the same slot again. It lives in the baseline object on
// purpose: a std::vector in an AVX2/AVX-512 object instantiates vector's out-of-line members there,
// and the linker keeps one copy of them for the whole library, which could then run AVX-512 code on a
// CPU without it. (`tools/dev-build.sh` checks that the ISA objects define no such shared symbols.)
enum class Scratch { SoftmaxRows, NormParams, RmsCoefs, LnMeans, SdpaFwd, SdpaBwd, SdpaDecode, RnnCell, Count };
void* thread_scratch(Scratch slot, size_t bytes);
template <typename C> C* scratch_of(Scratch slot, int64_t n) {
  return static_cast<C*>(thread_scratch(slot, (size_t)n * sizeof(C)));
}

// Everything the attention kernels need; strides in elements for (b, h, row, col).
struct SdpaParams {
  // H query heads share Hkv key/value heads (grouped-query attention; H % Hkv == 0): query head h reads
  // key/value head h / (H / Hkv), as torch's enable_gqa and MLX do.
  int64_t B = 0, H = 0, Hkv = 0, Lq = 0, Lk = 0, D = 0, Dv = 0;
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  int64_t sq[4] = {}, sk[4] = {}, sv[4] = {};
  // Optional mask (additive float, or uint8 where 0 = masked out); broadcast dims have stride 0.
  const void* mask = nullptr;
  DType mask_dtype = DType::F32;
  int64_t sm[4] = {};
  double scale = 1.0;
  // Soft-capping (0 = off): scores are c * tanh(scale * q.k / c), with Q packed times scale / c.
  double softcap = 0.0;
  // Causal: query i sees keys j <= i + coff (coff = Lk - Lq, the bottom-right alignment of a KV cache).
  bool causal = false;
  int64_t coff = 0;
  // Forward outputs: out (B,H,Lq,Dv) dense in the input dtype, lse (B,H,Lq) dense in the stats type.
  void* out = nullptr;
  void* lse = nullptr;
  // Backward inputs (o = forward output, g = its gradient) and outputs (dense like q, k, v).
  const void *o = nullptr, *g = nullptr;
  int64_t so[4] = {}, sg[4] = {};
  const void* lse_in = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
  // With H > Hkv, several query heads add into one key/value head's gradients: the backward then writes
  // each query head's dK/dV (stats type, B*H*Lk rows of sdpa_dq_ld(D) / sdpa_dq_ld(Dv)) here instead,
  // and the caller sums each group.
  void *dk_part = nullptr, *dv_part = nullptr;
  // Where out, dq, dk and dv rows go: strides (b, h, row) in elements, unit columns; all zero = dense
  // (B, H, L, n), as allocated. Set when the caller hands strided destinations (a packed qkv gradient).
  int64_t st_out[3] = {}, st_dq[3] = {}, st_dk[3] = {}, st_dv[3] = {};
};
// Where the first of the L rows (n wide) of (b, h) of H heads lies in an output with strides st (see
// SdpaParams), in elements; ld: the rows' stride.
static inline int64_t sdpa_out_offset(const int64_t* st, int64_t b, int64_t h, int64_t H, int64_t L, int64_t n,
                                      int64_t& ld) {
  if (st[0] == 0 && st[1] == 0 && st[2] == 0) {
    ld = n;
    return (b * H + h) * L * n;
  }
  ld = st[2];
  return b * st[0] + h * st[1];
}
// That first row itself, in an output of T at base.
template <typename T>
static inline T* sdpa_out_rows(void* base, const int64_t* st, int64_t b, int64_t h, int64_t H, int64_t L, int64_t n,
                               int64_t& ld) {
  return (T*)base + sdpa_out_offset(st, b, h, H, L, n, ld);
}
// Forward for one (batch*head) index bh and query rows [i0, i1). Backward for one bh and the key tiles
// t (of kSdpaKeyTile keys) with t % nparts == part: it writes those keys' dK/dV rows, and dQ either
// straight into p.dq (nparts == 1) or, unscaled, into dq_part (stats type, Lq rows of
// sdpa_dq_ld(D) elements) for the caller to sum over the parts.
using SdpaFwdFn = void (*)(const SdpaParams& p, int64_t bh, int64_t i0, int64_t i1);
using SdpaBwdFn = void (*)(const SdpaParams& p, int64_t bh, int64_t part, int64_t nparts, void* dq_part);
constexpr int64_t kSdpaKeyTile = 64;
// Decode forward (a few query rows, many keys): for batch b, key/value head hk and keys [k0, k1), every
// query row of every query head the kv head serves (R = (H / Hkv) * Lq rows, row r = (head hh, query
// i) as r = hh * Lq + i). Writes, per row, the base-2 running max, the sum of 2^(s - max) and the
// unnormalised P·V into part (stats type, R rows of sdpa_decode_ld(Dv)); the caller merges the chunks.
using SdpaDecodeFn = void (*)(const SdpaParams& p, int64_t b, int64_t hk, int64_t k0, int64_t k1, void* part);
inline int64_t sdpa_decode_ld(int64_t Dv) { return Dv + 2; }
// Rotary embedding of one contiguous row of D elements into y: pairs i < half rotated by (cs[i], sn[i])
// (stats type; sn already negated for the inverse), the rest copied.
using RopeRowFn = void (*)(const void* x, void* y, const void* cs, const void* sn, int64_t half, int64_t D,
                           bool traditional);
// Recurrent cells, one batch row of H hidden units (cpu/fused_rnn.inc): xg, hg, s, the outputs and dh/dc
// rows in T; b (G values) and the workspace ws in the stats type; absent operands are null.
using RnnRowFwdFn = void (*)(RnnCell kind, const void* xg, const void* hg, const void* b, const void* s, void* h,
                             void* c, void* ws, int64_t H);
using RnnRowBwdFn = void (*)(RnnCell kind, const void* ws, const void* s, const void* dh, const void* dc, void* dxg,
                             void* dhg, void* ds, int64_t H);
// Row length of a dq_part buffer: D padded to 32 elements (a multiple of the register tile's width at
// every ISA and dtype).
inline int64_t sdpa_dq_ld(int64_t D) { return (D + 31) / 32 * 32; }

// One optimizer step over n elements at p, g and the state buffers (see OptimArgs in backend.h; flags
// and scalars as there); element i reads and writes index i only.
using OptimFn = void (*)(OptimKind kind, uint32_t flags, const double* s, void* p, const void* g, void* s0, void* s1,
                         void* s2, int64_t n);

// Filled per ISA by fused_isa.cpp (optim by optim_isa.cpp); indexed by (int)DType for the four float dtypes.
struct FusedTable {
  SoftmaxFwdFn softmax_fwd[4] = {};
  SoftmaxBwdFn softmax_bwd[4] = {};
  RmsFwdFn rms_fwd[4] = {};
  RmsBwdFn rms_bwd[4] = {};
  LnFwdFn ln_fwd[4] = {};
  LnBwdFn ln_bwd[4] = {};
  EltBwdFn sigmoid_bwd[4] = {};  // a = y (the forward output)
  EltBwdFn silu_bwd[4] = {};     // a = x
  EltBwdFn gelu_bwd[4] = {};     // a = x (exact erf gelu)
  BiasGeluFwdFn bias_gelu_fwd[4] = {};
  BiasGeluBwdFn bias_gelu_bwd[4] = {};
  ActBwdFn act_bwd[(int)ActKind::Count][4] = {};  // a = x; the kinds with parameters (elu on, see ActKind)
  SdpaFwdFn sdpa_fwd[4] = {};
  SdpaBwdFn sdpa_bwd[4] = {};
  SdpaDecodeFn sdpa_decode[4] = {};
  RopeRowFn rope_row[4] = {};
  OptimFn optim[4] = {};  // f32 and f64 only
  RnnRowFwdFn rnn_fwd[4] = {};
  RnnRowBwdFn rnn_bwd[4] = {};
};
const FusedTable& fused_kernels();
void register_fused_base(FusedTable& t);
void register_fused_avx2(FusedTable& t);
void register_fused_avx512(FusedTable& t);
void register_fused_optim_base(FusedTable& t);
void register_fused_optim_avx2(FusedTable& t);
void register_fused_optim_avx512(FusedTable& t);

using Sto = std::shared_ptr<BackendStorage>;  // the host side's results (new dense storages)

}  // namespace ember::cpu
