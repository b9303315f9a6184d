// The packed GEMM's register-tile micro-kernel (see cpu/packed_gemm.h), compiled once per ISA
// (EMBER_ISA): an mr x nr block of C in registers, one broadcast of A against nr/width vectors of B per k.
#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <immintrin.h>
#endif

#include "cpu/packed_gemm.h"

#ifndef EMBER_ISA
#define EMBER_ISA base
#endif
#define EMBER_GCAT2(a, b) a##b
#define EMBER_GCAT(a, b) EMBER_GCAT2(a, b)

namespace ember::cpu {
// Internal linkage throughout, so the three ISA copies never get merged by the linker.
namespace {

// Tile shapes: two vectors of B per k step and as many rows of A as leave registers for them (AVX2:
// 12 accumulators of 16; AVX-512: 16 of 32, rows a multiple that channel counts usually are).
#if defined(__AVX512F__)
constexpr int kW = 16, kMR = 8;
typedef float V __attribute__((vector_size(64)));
static inline V fma(V a, V b, V c) { return (V)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kW = 8, kMR = 6;
typedef float V __attribute__((vector_size(32)));
static inline V fma(V a, V b, V c) { return (V)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c); }
#else
constexpr int kW = 4, kMR = 4;
typedef float V __attribute__((vector_size(16)));
static inline V fma(V a, V b, V c) { return a * b + c; }
#endif
constexpr int kNV = 2, kNR = kNV * kW;
// k is split into blocks of about kKC and the rows into blocks of kMC (whole row panels): a B
// micro-panel (kKC x nr) fits L1 and an A block (kMC x kKC) a quarter of a small L2.
constexpr int64_t kKC = kW == 16 ? 192 : 256;
constexpr int64_t kMC = 128 / kMR * kMR;

static inline V vld(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
static inline void vst(float* p, V v) { std::memcpy(p, &v, sizeof v); }

// c (row stride ldc) = [c +] a_panel . b_panel over kc steps, the whole mr x nr tile.
static void tile(int64_t kc, const float* __restrict a, const float* __restrict b, float* __restrict c, int64_t ldc,
                 bool acc) {
  V r[kMR][kNV];
#pragma GCC unroll 32
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < kNV; ++j) r[i][j] = acc ? vld(c + i * ldc + j * kW) : V{};
  for (int64_t kk = 0; kk < kc; ++kk, a += kMR, b += kNR) {
    V bv[kNV];
#pragma GCC unroll 4
    for (int j = 0; j < kNV; ++j) bv[j] = vld(b + j * kW);
#pragma GCC unroll 32
    for (int i = 0; i < kMR; ++i) {
      const V ai = a[i] - V{};
#pragma GCC unroll 4
      for (int j = 0; j < kNV; ++j) r[i][j] = fma(ai, bv[j], r[i][j]);
    }
  }
#pragma GCC unroll 32
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < kNV; ++j) vst(c + i * ldc + j * kW, r[i][j]);
}

void run(const float* ap, const float* bp, int64_t m, int64_t n, int64_t k, float* c, int64_t ldc, bool acc) {
  const int64_t mp = panels(m, kMR), np = panels(n, kNR);
  const int64_t nkb = std::max<int64_t>(1, (k + kKC - 1) / kKC);
  alignas(64) float edge[kMR * kNR];
  // Blocks of kMC rows by kc: one block of A stays in L2 while each B micro-panel (kc x nr, in L1) passes
  // over all of its row panels; A's micro-panels stream from L2, the narrower of the two streams.
  for (int64_t ib = 0; ib < mp; ib += kMC / kMR)
    for (int64_t kb = 0; kb < nkb; ++kb) {
      const int64_t k0 = k * kb / nkb, kc = k * (kb + 1) / nkb - k0;
      const bool add = acc || kb > 0;
      for (int64_t jp = 0; jp < np; ++jp) {
        const float* b = bp + (jp * k + k0) * kNR;
        const int64_t nv = std::min<int64_t>(kNR, n - jp * kNR);
        for (int64_t ip = ib; ip < std::min(mp, ib + kMC / kMR); ++ip) {
          const float* a = ap + (ip * k + k0) * kMR;
          const int64_t mv = std::min<int64_t>(kMR, m - ip * kMR);
          float* ct = c + ip * kMR * ldc + jp * kNR;
          if (mv == kMR && nv == kNR) {
            tile(kc, a, b, ct, ldc, add);
            continue;
          }
          // A ragged tile runs on a full-size copy, then only its valid part goes back.
          if (add)
            for (int64_t i = 0; i < mv; ++i) std::memcpy(edge + i * kNR, ct + i * ldc, (size_t)nv * sizeof(float));
          tile(kc, a, b, edge, kNR, add);
          for (int64_t i = 0; i < mv; ++i) std::memcpy(ct + i * ldc, edge + i * kNR, (size_t)nv * sizeof(float));
        }
      }
    }
}

}  // namespace

void EMBER_GCAT(register_gemm_, EMBER_ISA)(PackedGemm& g) {
  g.mr = kMR;
  g.nr = kNR;
  g.run = &run;
  g.preferred = kW == 16;
}

}  // namespace ember::cpu
