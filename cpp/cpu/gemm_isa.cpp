// The packed GEMM's register-tile micro-kernel (see cpu/packed_gemm.h), compiled once per ISA
// (EMBER_ISA): an mr x nr block of C in registers, one broadcast of A against nr/width vectors of B per k.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <immintrin.h>
#endif

#include "cpu/packed_gemm.h"
#include "dtype.h"

#ifndef EMBER_ISA
#define EMBER_ISA base
#endif
#define EMBER_GCAT2(a, b) a##b
#define EMBER_GCAT(a, b) EMBER_GCAT2(a, b)

namespace ember::cpu {
// Internal linkage throughout, so the three ISA copies never get merged by the linker.
namespace {

// Tile shapes: two vectors of B per k step and as many rows of A as leave registers for them (AVX2:
// 12 accumulators of 16). AVX-512: the matmul's 14 rows use 28 of the 32 registers; the convs keep 8 rows,
// a multiple that channel counts usually are (kMMR is the general matmul's panel height).
#if defined(__AVX512F__)
constexpr int kW = 16, kMR = 8, kMMR = 14;
typedef float V __attribute__((vector_size(64)));
static inline V fma(V a, V b, V c) { return (V)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kW = 8, kMR = 6, kMMR = 6;
typedef float V __attribute__((vector_size(32)));
static inline V fma(V a, V b, V c) { return (V)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c); }
#else
constexpr int kW = 4, kMR = 4, kMMR = 4;
typedef float V __attribute__((vector_size(16)));
static inline V fma(V a, V b, V c) { return a * b + c; }
#endif
constexpr int kNV = 2, kNR = kNV * kW;
// k is split into blocks of about kKC and the rows into blocks of about 128 (whole row panels): a B
// micro-panel (kKC x nr) fits L1, an A block (128 x kKC) and B's part for one k block (kKC x 512) an L2.
// The AVX-512 matmul's 14-row tiles take k blocks of about kKCMM: half as many passes over C and tile set-ups,
// its B micro-panel (64 KiB) then read from L2, which kept up.
constexpr int64_t kKC = 256, kKCMM = 512;

static inline V vld(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
static inline void vst(float* p, V v) { std::memcpy(p, &v, sizeof v); }
// kW consecutive elements of a float, f16 or bf16 operand as floats (the thin products read B in place).
template <typename S> static inline V vlds(const S* p) {
  if constexpr (std::is_same_v<S, float>) {
    return vld(p);
  } else {
#if defined(__AVX512F__)
    const __m256i h = _mm256_loadu_si256((const __m256i*)p);
    if constexpr (std::is_same_v<S, f16>) return (V)_mm512_cvtph_ps(h);
    else return (V)_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
#elif defined(__AVX2__)
    const __m128i h = _mm_loadu_si128((const __m128i*)p);
    if constexpr (std::is_same_v<S, f16>) return (V)_mm256_cvtph_ps(h);
    else return (V)_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
#else
    V v;
    for (int l = 0; l < kW; ++l) v[l] = load<S>(p[l]);
    return v;
#endif
  }
}

// Up to kW floats of one panel's k step: the first `nl` (0 .. kW) from s, zeros after; `nw` (1 .. kW) stored.
EMBER_INLINE void copy_part(const float* s, int nl, int nw, float* d) {
#if defined(__AVX512F__)
  const __m512 v = _mm512_maskz_loadu_ps((__mmask16)((1u << nl) - 1), s);
  if (nw == 16) _mm512_storeu_ps(d, v);
  else _mm512_mask_storeu_ps(d, (__mmask16)((1u << nw) - 1), v);
#elif defined(__AVX2__)
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 v = nl == 8 ? _mm256_loadu_ps(s) : _mm256_maskload_ps(s, _mm256_cmpgt_epi32(_mm256_set1_epi32(nl), lane));
  if (nw == 8) _mm256_storeu_ps(d, v);
  else _mm256_maskstore_ps(d, _mm256_cmpgt_epi32(_mm256_set1_epi32(nw), lane), v);
#else
  for (int r = 0; r < nw; ++r) d[r] = r < nl ? s[r] : 0.0f;
#endif
}

// c (row stride ldc) = [c +] a_panel . b over kc steps, a whole R x nr tile: a is an R-row panel (R floats
// per k), b's rows (nr floats each) lie ldb apart (nr when packed; a row-major B read in place for thin
// products). Every element is one FMA chain over k in order, whatever the tile or block around it.
// AR: A's rows read in place instead (row i's k-th element at a[i * lda + kk]: a row-major operand, no panel).
// AS: the panel's width (floats per k step), R or more: the last rows of a taller panel run as a shorter tile.
// PF: the matmul's packed tiles also fetch the next tile's operands into L2 while they run: pfa (unless null),
// the next A panel not yet in L2; pfb (unless null), the next B micro-panel. From L3 they otherwise arrive by
// demand misses that the hardware prefetchers, stopping at each 4 KiB page, only partly hide.
// PB: b is B's unpacked rows (ldb apart), each k step's nr floats also stored into the micro-panel at bw (kNR
// apart) as they pass, so packing B costs no pass of its own; the rows are fetched kPBAhead steps ahead.
// PA: likewise for A, whose R rows lie consecutively in each k step (A^T's rows), k steps lda apart: each step's
// R floats stored into the panel at bw (R apart); pfs (unless null): the next panel's k steps, fetched into L2.
constexpr int64_t kPBAhead = 16;
// PS: pfs (B's rows for a later PB tile) is fetched too (a template flag: the other tiles' k loop keeps no test).
template <int R, typename SB = float, bool AR = false, int AS = R, bool PF = false, bool PB = false, bool PA = false,
          bool PS = false>
static void tile(int64_t kc, const float* __restrict a, const SB* __restrict b, int64_t ldb, float* __restrict c,
                 int64_t ldc, bool acc, const float* cn, int64_t lda = 0, const float* pfa = nullptr,
                 const float* pfb = nullptr, float* __restrict bw = nullptr, const float* pfs = nullptr,
                 int64_t pfs_ld = 0, int64_t pfs_n = 0) {
  V r[R][kNV];
#if defined(__SSE__)
  // The next tile's C lines, so their misses overlap this tile's work (C often lies beyond L2).
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < kNR; j += 16) _mm_prefetch((const char*)(cn + i * ldc + j), _MM_HINT_T0);
#else
  (void)cn;
#endif
#pragma GCC unroll 32
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < kNV; ++j) r[i][j] = acc ? vld(c + i * ldc + j * kW) : V{};
  auto step = [&](const float* ak, const SB* bk, int64_t kk) {
#if defined(__SSE__)
    if constexpr (PF) {
      if (pfa) _mm_prefetch((const char*)(pfa + kk * AS), _MM_HINT_T1);
      if (pfb) {
        _mm_prefetch((const char*)(pfb + kk * kNR), _MM_HINT_T1);
        _mm_prefetch((const char*)(pfb + kk * kNR + 16), _MM_HINT_T1);
      }
    }
    if constexpr (PS || PB) {
      // pfs: B rows that a later PB tile reads, one row every 4 k steps, into L2 (spread over the tiles before it)
      if (pfs && (kk & 3) == 0 && (kk >> 2) < pfs_n) {
        _mm_prefetch((const char*)(pfs + (kk >> 2) * pfs_ld), _MM_HINT_T1);
        _mm_prefetch((const char*)(pfs + (kk >> 2) * pfs_ld + kNR - 1), _MM_HINT_T1);
      }
    }
    if constexpr (PA) {
      _mm_prefetch((const char*)(ak + kPBAhead * lda), _MM_HINT_T0);
      _mm_prefetch((const char*)(ak + kPBAhead * lda + R - 1), _MM_HINT_T0);
      if (pfs && kk < pfs_n) {
        _mm_prefetch((const char*)(pfs + kk * pfs_ld), _MM_HINT_T1);
        _mm_prefetch((const char*)(pfs + kk * pfs_ld + R - 1), _MM_HINT_T1);
      }
    }
    if constexpr (PB) {
      _mm_prefetch((const char*)(bk + kPBAhead * ldb), _MM_HINT_T0);
      _mm_prefetch((const char*)(bk + kPBAhead * ldb + kNR - 1), _MM_HINT_T0);
    }
#else
    (void)kk;
#endif
    V bv[kNV];
#pragma GCC unroll 4
    for (int j = 0; j < kNV; ++j) bv[j] = vlds(bk + j * kW);
    if constexpr (PB) {
#pragma GCC unroll 4
      for (int j = 0; j < kNV; ++j) vst(bw + kk * kNR + j * kW, bv[j]);
    }
    if constexpr (PA) {
      static_assert(R <= kW, "an A panel's k step is one vector");
      copy_part(ak, R, R, bw + kk * R);
    }
#pragma GCC unroll 32
    for (int i = 0; i < R; ++i) {
      const V ai = (AR ? ak[i * lda] : ak[i]) - V{};
#pragma GCC unroll 4
      for (int j = 0; j < kNV; ++j) r[i][j] = fma(ai, bv[j], r[i][j]);
    }
  };
  if constexpr (R > 4) {
    // unrolled: the loop's own adds and branch otherwise take issue slots from the FMA ports (the short
    // tiles of the thin products, bound by B's stream, ran slower so)
#pragma GCC unroll 4
    for (int64_t kk = 0; kk < kc; ++kk, a += AR ? 1 : PA ? lda : AS, b += ldb) step(a, b, kk);
  } else {
    for (int64_t kk = 0; kk < kc; ++kk, a += AR ? 1 : PA ? lda : AS, b += ldb) step(a, b, kk);
  }
#pragma GCC unroll 32
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < kNV; ++j) vst(c + i * ldc + j * kW, r[i][j]);
}

// The tile of the last r < MR rows of an MR-row panel (or of r rows read in place), r = 1 .. MR - 1.
using TileFn = void (*)(int64_t, const float*, const float*, int64_t, float*, int64_t, bool, const float*, int64_t,
                        const float*, const float*, float*, const float*, int64_t, int64_t);
template <int MR, bool AR, size_t... I> constexpr std::array<TileFn, sizeof...(I)> short_tiles(std::index_sequence<I...>) {
  return {&tile<int(I) + 1, float, AR, MR>...};
}

// C = [C +] A B over whole MR-row panels of A and nr-column panels of B. AR: A (m x k, row stride lda) read
// where it lies, not from panels. A ragged last row panel runs as a shorter tile (no wasted rows); a ragged
// last column panel runs on a full-width copy of its C part.
void pack_runs(const float* src, int64_t ks, int64_t lines, int w, int64_t nq, int64_t k, float* d);

// bsrc (unless null): B (k x n, float) read from its rows ldbs apart and packed into bp (then writable) on the
// way: each k block's first row panel runs its tiles from those rows and stores B's micro-panels as it reads
// them, the other row panels use the micro-panels. Same products in the same order as from packed panels.
// asrc (unless null, not with AR or bsrc): A with its rows consecutive in each k step (A[i][kk] at
// asrc[kk * ldas + i]) read there and packed into ap (then writable) by the first column panel's tiles.
template <int MR, bool AR>
void run_t(const float* ap, int64_t lda, const float* bp, int64_t m, int64_t n, int64_t k, float* c, int64_t ldc,
           bool acc, const float* bsrc = nullptr, int64_t ldbs = 0, const float* asrc = nullptr, int64_t ldas = 0) {
  static constexpr auto shorts = short_tiles<MR, AR>(std::make_index_sequence<MR - 1>());
  constexpr int64_t MB = std::max(1, 128 / MR);  // row panels per block
  const int64_t mp = panels(m, MR), np = panels(n, kNR);
  constexpr int64_t KC = MR == kMMR && kW == 16 ? kKCMM : kKC;
  const int64_t nkb = std::max<int64_t>(1, (k + KC - 1) / KC);
  alignas(64) float edge[MR * kNR];
  auto a_at = [&](int64_t ip, int64_t k0) { return AR ? ap + ip * MR * lda + k0 : ap + (ip * k + k0) * MR; };
  float* bw = const_cast<float*>(bp);
  if (bsrc) {
    // the ragged last column panel, and all of B when the first row panel is short, packed first
    const int64_t full = m < MR ? 0 : n / kNR;
    if (full < np) pack_runs(bsrc + full * kNR, ldbs, n - full * kNR, kNR, np - full, k, bw + full * kNR * k);
    if (full == 0) bsrc = nullptr;
  }
  float* aw = const_cast<float*>(ap);
  if (asrc) {
    // the ragged last row panel, and all of A when the first column panel is ragged, packed first
    const int64_t full = n < kNR ? 0 : m / MR;
    if (full < mp) pack_runs(asrc + full * MR, ldas, m - full * MR, MR, mp - full, k, aw + full * MR * k);
    if (full == 0) asrc = nullptr;
  }
  // k blocks outermost: B's part for one k block (kc x n; the callers' blocks are <= 512 columns) stays in L2
  // while blocks of ~128 rows of A pass over it, each B micro-panel (kc x nr, in L1) over all of a block's
  // row panels. Every C element is still one FMA chain over k in order (k blocks in order, C carried between).
  for (int64_t kb = 0; kb < nkb; ++kb) {
    const int64_t k0 = k * kb / nkb, kc = k * (kb + 1) / nkb - k0;
    const bool add = acc || kb > 0;
    for (int64_t ib = 0; ib < mp; ib += MB) {
      const int64_t ie = std::min(mp, ib + MB);
      for (int64_t jp = 0; jp < np; ++jp) {
        const float* b = bp + (jp * k + k0) * kNR;
        const int64_t nv = std::min<int64_t>(kNR, n - jp * kNR);
        for (int64_t ip = ib; ip < ie; ++ip) {
          const float* a = a_at(ip, k0);
          const int64_t mv = std::min<int64_t>(MR, m - ip * MR);
          float* ct = c + ip * MR * ldc + jp * kNR;
          // the next tile: the next row panel, or the block's first one in the next column panel
          const float* cn = ip + 1 < ie ? ct + MR * ldc : jp + 1 < np ? c + ib * MR * ldc + (jp + 1) * kNR : ct;
          // while the first row panels run, the next column panel's B rows are fetched into L2, a quarter of
          // the k block's rows per tile
          const float* pfs = nullptr;
          int64_t pfs_n = 0;
          const int64_t kq = (kc + 3) / 4;
          if (bsrc && ib == 0 && jp + 1 < np && ip * kq < kc) {
            pfs = bsrc + (k0 + ip * kq) * ldbs + (jp + 1) * kNR;
            pfs_n = std::min<int64_t>(kq, kc - ip * kq);
          }
          if (bsrc && ip == 0 && nv == kNR) {  // (mv == MR: bsrc is null when the first panel is short)
            tile<MR, float, AR, MR, false, true>(kc, a, bsrc + k0 * ldbs + jp * kNR, ldbs, ct, ldc, add, cn, lda,
                                                 nullptr, nullptr, bw + (jp * k + k0) * kNR, pfs, ldbs, pfs_n);
            continue;
          }
          if (asrc && jp == 0 && mv == MR) {  // (nv == kNR: asrc is null when the first column panel is ragged)
            const float* pfs = ip + 1 < m / MR ? asrc + k0 * ldas + (ip + 1) * MR : nullptr;
            tile<MR, float, false, MR, false, false, true>(kc, asrc + k0 * ldas + ip * MR, b, kNR, ct, ldc, add, cn,
                                                           ldas, nullptr, nullptr, aw + (ip * k + k0) * MR, pfs, ldas,
                                                           kc);
            continue;
          }
          if (nv == kNR && mv == MR) {
            // the next tile's A panel (the next block's first one after the block's last tile) and, when it
            // starts a new column panel, its B micro-panel
            const float* pfa = nullptr;
            const float* pfb = nullptr;
            if (ip + 1 < ie) pfa = jp == 0 ? a_at(ip + 1, k0) : nullptr;
            else if (jp + 1 < np) pfb = bsrc && ib == 0 ? nullptr : bp + ((jp + 1) * k + k0) * kNR;
            else if (ie < mp) pfa = a_at(ie, k0);
            else if (kb + 1 < nkb) pfa = a_at(0, k * (kb + 1) / nkb);
            if (asrc) pfa = nullptr;  // (those panels are not packed yet)
            // (not when A is read in place: the row offsets already fill the integer registers)
            if (pfs)
              tile<MR, float, AR, MR, !AR, false, false, true>(kc, a, b, kNR, ct, ldc, add, cn, lda, pfa, pfb, nullptr,
                                                               pfs, ldbs, pfs_n);
            else tile<MR, float, AR, MR, !AR>(kc, a, b, kNR, ct, ldc, add, cn, lda, pfa, pfb);
            continue;
          }
          if (nv == kNR) {
            shorts[mv - 1](kc, a, b, kNR, ct, ldc, add, cn, lda, nullptr, nullptr, nullptr, nullptr, 0, 0);
            continue;
          }
          if (add)
            for (int64_t i = 0; i < mv; ++i) std::memcpy(edge + i * kNR, ct + i * ldc, (size_t)nv * sizeof(float));
          if (mv == MR) tile<MR, float, AR>(kc, a, b, kNR, edge, kNR, add, edge, lda);
          else shorts[mv - 1](kc, a, b, kNR, edge, kNR, add, edge, lda, nullptr, nullptr, nullptr, nullptr, 0, 0);
          for (int64_t i = 0; i < mv; ++i) std::memcpy(ct + i * ldc, edge + i * kNR, (size_t)nv * sizeof(float));
        }
      }
    }
  }
}

void run(const float* ap, const float* bp, int64_t m, int64_t n, int64_t k, float* c, int64_t ldc, bool acc) {
  run_t<kMR, false>(ap, 0, bp, m, n, k, c, ldc, acc);
}
void run_mm(const float* ap, const float* bp, int64_t m, int64_t n, int64_t k, float* c, int64_t ldc, bool acc) {
  run_t<kMMR, false>(ap, 0, bp, m, n, k, c, ldc, acc);
}
void run_rows_mm(const float* a, int64_t lda, const float* bp, int64_t m, int64_t n, int64_t k, float* c, int64_t ldc,
                 bool acc) {
  run_t<kMMR, true>(a, lda, bp, m, n, k, c, ldc, acc);
}
void run_pack_a(const float* asrc, int64_t ldas, float* aw, const float* bp, int64_t m, int64_t n, int64_t k, float* c,
                int64_t ldc, bool acc) {
  run_t<kMMR, false>(aw, 0, bp, m, n, k, c, ldc, acc, nullptr, 0, asrc, ldas);
}
void run_pack_b(const float* a, int64_t lda, bool a_rows, const float* bsrc, int64_t ldbs, float* bw, int64_t m,
                int64_t n, int64_t k, float* c, int64_t ldc, bool acc) {
  if (a_rows) run_t<kMMR, true>(a, lda, bw, m, n, k, c, ldc, acc, bsrc, ldbs);
  else run_t<kMMR, false>(a, 0, bw, m, n, k, c, ldc, acc, bsrc, ldbs);
}

// Thin products (few rows): C[:, j0:j1] = A B with B (k x n, row stride ldb, unit column stride; float, f16 or
// bf16, converted in registers) read in place, A (m x k, float, row-major, lda) packed a group of rows at a
// time; rows in groups of kMR, 4, 2, 1.
template <int R, typename SB>
static void thin_rows(const float* a, int64_t lda, const SB* b, int64_t ldb, int64_t n, int64_t j0, int64_t j1,
                      int64_t k, float* c, int64_t ldc, float* ap, float* bedge) {
  for (int64_t kk = 0; kk < k; ++kk)
    for (int i = 0; i < R; ++i) ap[kk * R + i] = a[i * lda + kk];
  alignas(64) float edge[R * kNR];
  for (int64_t j = j0; j < j1; j += kNR) {
    const int64_t nv = std::min<int64_t>(kNR, n - j);
    if (nv == kNR) {
      tile<R>(k, ap, b + j, ldb, c + j, ldc, false, c + std::min(j + kNR, j1 - 1));
      continue;
    }
    // the ragged last columns: a zero-padded float copy, so no read runs past B's end
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int64_t q = 0; q < nv; ++q) bedge[kk * kNR + q] = load<SB>(b[kk * ldb + j + q]);
      std::fill(bedge + kk * kNR + nv, bedge + (kk + 1) * kNR, 0.0f);
    }
    tile<R>(k, ap, bedge, kNR, edge, kNR, false, edge);
    for (int i = 0; i < R; ++i) std::memcpy(c + i * ldc + j, edge + i * kNR, (size_t)nv * sizeof(float));
  }
}

template <typename SB>
void thin_s(const float* a, int64_t lda, const SB* b, int64_t ldb, int64_t m, int64_t n, int64_t j0, int64_t j1,
            int64_t k, float* c, int64_t ldc, float* scratch) {
  float* bedge = scratch + kMR * k;  // scratch: (kMR + kNR) * k floats
  for (int64_t i = 0; i < m;) {
    const int64_t left = m - i;
    const float* ai = a + i * lda;
    float* ci = c + i * ldc;
    if (left >= kMR) { thin_rows<kMR>(ai, lda, b, ldb, n, j0, j1, k, ci, ldc, scratch, bedge); i += kMR; }
    else if (left >= 4) { thin_rows<4>(ai, lda, b, ldb, n, j0, j1, k, ci, ldc, scratch, bedge); i += 4; }
    else if (left >= 2) { thin_rows<2>(ai, lda, b, ldb, n, j0, j1, k, ci, ldc, scratch, bedge); i += 2; }
    else { thin_rows<1>(ai, lda, b, ldb, n, j0, j1, k, ci, ldc, scratch, bedge); i += 1; }
  }
}

void thin(const float* a, int64_t lda, const void* b, int src, int64_t ldb, int64_t m, int64_t n, int64_t j0,
          int64_t j1, int64_t k, float* c, int64_t ldc, float* scratch) {
  switch (src) {
    case 1: thin_s(a, lda, (const f16*)b, ldb, m, n, j0, j1, k, c, ldc, scratch); break;
    case 2: thin_s(a, lda, (const bf16*)b, ldb, m, n, j0, j1, k, c, ldc, scratch); break;
    default: thin_s(a, lda, (const float*)b, ldb, m, n, j0, j1, k, c, ldc, scratch); break;
  }
}

// Thin products with B^T row-major (x @ W.T, decode): C[i][j] = dot(A row i, Bt row j), both along k in
// place (Bt float, f16 or bf16, converted in registers), R rows by 4 columns of vector partial sums added
// across lanes at the end.
template <int R, typename SB>
static void dot_rows(const float* a, int64_t lda, const SB* bt, int64_t ldbt, int64_t j0, int64_t j1, int64_t k,
                     float* c, int64_t ldc) {
  constexpr int J = 4;
  const int64_t kv = k / kW * kW;
  for (int64_t j = j0; j < j1; j += J) {
    const int nj = (int)std::min<int64_t>(J, j1 - j);
    const SB* bj[J];
    for (int q = 0; q < J; ++q) bj[q] = bt + (j + std::min(q, nj - 1)) * ldbt;
    V s[R][J];
    for (int i = 0; i < R; ++i)
      for (int q = 0; q < J; ++q) s[i][q] = V{};
    for (int64_t kk = 0; kk < kv; kk += kW) {
      V bv[J];
#pragma GCC unroll 4
      for (int q = 0; q < J; ++q) bv[q] = vlds(bj[q] + kk);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const V av = vld(a + i * lda + kk);
#pragma GCC unroll 4
        for (int q = 0; q < J; ++q) s[i][q] = fma(av, bv[q], s[i][q]);
      }
    }
    for (int i = 0; i < R; ++i)
      for (int q = 0; q < nj; ++q) {
        alignas(64) float t[kW];
        vst(t, s[i][q]);
        float sum = 0.0f;
        for (int l = 0; l < kW; ++l) sum += t[l];
        for (int64_t kk = kv; kk < k; ++kk) sum += a[i * lda + kk] * load<SB>(bj[q][kk]);
        c[i * ldc + j + q] = sum;
      }
  }
}

template <typename SB>
void thin_t_s(const float* a, int64_t lda, const SB* bt, int64_t ldbt, int64_t m, int64_t j0, int64_t j1, int64_t k,
              float* c, int64_t ldc) {
  for (int64_t i = 0; i < m;) {
    const int64_t left = m - i;
    if (left >= 4) { dot_rows<4>(a + i * lda, lda, bt, ldbt, j0, j1, k, c + i * ldc, ldc); i += 4; }
    else if (left >= 2) { dot_rows<2>(a + i * lda, lda, bt, ldbt, j0, j1, k, c + i * ldc, ldc); i += 2; }
    else { dot_rows<1>(a + i * lda, lda, bt, ldbt, j0, j1, k, c + i * ldc, ldc); i += 1; }
  }
}

void thin_t(const float* a, int64_t lda, const void* bt, int src, int64_t ldbt, int64_t m, int64_t j0, int64_t j1,
            int64_t k, float* c, int64_t ldc) {
  switch (src) {
    case 1: thin_t_s(a, lda, (const f16*)bt, ldbt, m, j0, j1, k, c, ldc); break;
    case 2: thin_t_s(a, lda, (const bf16*)bt, ldbt, m, j0, j1, k, c, ldc); break;
    default: thin_t_s(a, lda, (const float*)bt, ldbt, m, j0, j1, k, c, ldc); break;
  }
}

// --- packing (cpu/packed_gemm.h: pack_lines) ---

template <typename S> EMBER_INLINE float ld1(const S* p) { return load<S>(*p); }

#if defined(__AVX2__)
// 8 consecutive elements as floats (F16C for f16, a shift for bf16).
template <typename S> EMBER_INLINE __m256 ld8(const S* p) {
  if constexpr (std::is_same_v<S, float>) return _mm256_loadu_ps(p);
  else if constexpr (std::is_same_v<S, f16>) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
  else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
// v[q] becomes column q of the 8 x 8 block whose rows were v[0..7].
EMBER_INLINE void transpose8(__m256* v) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    __m256 a = t[4 * h], b = t[4 * h + 1], c = t[4 * h + 2], d = t[4 * h + 3];
    s[4 * h] = _mm256_shuffle_ps(a, c, 0x44);
    s[4 * h + 1] = _mm256_shuffle_ps(a, c, 0xee);
    s[4 * h + 2] = _mm256_shuffle_ps(b, d, 0x44);
    s[4 * h + 3] = _mm256_shuffle_ps(b, d, 0xee);
  }
  for (int q = 0; q < 4; ++q) {
    v[q] = _mm256_permute2f128_ps(s[q], s[q + 4], 0x20);
    v[q + 4] = _mm256_permute2f128_ps(s[q], s[q + 4], 0x31);
  }
}
#endif

#if defined(__AVX512F__)
// v[q] becomes column q of the 16 x 16 block whose rows were v[0..15]: rows interleaved in pairs, then in
// fours (u[4g + j]: rows 4g..4g+3 of columns j, j + 4, j + 8, j + 12, one per 128-bit lane), then the lanes
// gathered across the four groups in two steps.
EMBER_INLINE void transpose16(__m512* v) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {
    const __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  for (int j = 0; j < 4; ++j) {
    const __m512 a = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), b = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd);
    const __m512 c = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    const __m512 e = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xdd);
    v[j] = _mm512_shuffle_f32x4(a, c, 0x88);
    v[j + 8] = _mm512_shuffle_f32x4(a, c, 0xdd);
    v[j + 4] = _mm512_shuffle_f32x4(b, e, 0x88);
    v[j + 12] = _mm512_shuffle_f32x4(b, e, 0xdd);
  }
}
#endif

// n consecutive source elements to floats.
template <typename S> EMBER_INLINE void cvt_run(const S* src, int64_t n, float* d) {
  int64_t i = 0;
  if constexpr (std::is_same_v<S, float>) {
    // fixed-size pieces the compiler inlines: a libc memcpy call per k step of a panel cost more than the copy
    for (; i + 8 <= n; i += 8) std::memcpy(d + i, src + i, 8 * sizeof(float));
    for (; i < n; ++i) d[i] = src[i];
    return;
  }
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, ld8(src + i));
#endif
  for (; i < n; ++i) d[i] = ld1(src + i);
}

constexpr int64_t kPackAhead = 8;
// d[kk * w + r] = line r's element kk (lines[r][kk * ks]) for r < nl, zero for nl <= r < w.
template <typename S>
void pack_lines_t(const S* const* lines, int nl, int64_t ks, int64_t k, int w, float* d) {
  bool consecutive = true;  // line r starts r elements after line 0: each k step is one contiguous run
  for (int r = 1; r < nl && consecutive; ++r) consecutive = lines[r] == lines[0] + r;
  if (consecutive && (ks != 1 || nl == 1)) {
    for (int64_t kk = 0; kk < k; ++kk) {
      // k steps lie ks apart (often 4 KiB: no hardware prefetch, L1 set conflicts): fetch a few steps ahead
      if (kk + kPackAhead < k) {
        const char* p = reinterpret_cast<const char*>(lines[0] + (kk + kPackAhead) * ks);
        __builtin_prefetch(p);
        __builtin_prefetch(p + (nl * sizeof(S) - 1));
      }
      cvt_run(lines[0] + kk * ks, nl, d + kk * w);
      std::fill(d + kk * w + nl, d + kk * w + w, 0.0f);
    }
    return;
  }
  int64_t k0 = 0;
#if defined(__AVX512F__)
  if (ks == 1) {  // each line runs along k: 16 x 16 blocks transposed in registers, each k step's w lanes stored
    const __mmask16 full = 0xffff;
    for (; k0 + 16 <= k; k0 += 16)
      for (int r0 = 0; r0 < w; r0 += 16) {
        __m512 v[16];
        for (int q = 0; q < 16; ++q) v[q] = r0 + q < nl ? (__m512)vlds(lines[r0 + q] + k0) : _mm512_setzero_ps();
        transpose16(v);
        const __mmask16 keep = w - r0 >= 16 ? full : (__mmask16)((1u << (w - r0)) - 1);
        for (int q = 0; q < 16; ++q) _mm512_mask_storeu_ps(d + (k0 + q) * w + r0, keep, v[q]);
      }
  }
#elif defined(__AVX2__)
  if (ks == 1) {  // each line runs along k: 8 x 8 blocks transposed in registers
    for (; k0 + 8 <= k; k0 += 8)
      for (int r0 = 0; r0 < w; r0 += 8) {
        __m256 v[8];
        for (int q = 0; q < 8; ++q) v[q] = r0 + q < nl ? ld8(lines[r0 + q] + k0) : _mm256_setzero_ps();
        transpose8(v);
        if (r0 + 8 <= w) {
          for (int q = 0; q < 8; ++q) _mm256_storeu_ps(d + (k0 + q) * w + r0, v[q]);
        } else {
          alignas(32) float t[8];
          for (int q = 0; q < 8; ++q) {
            _mm256_store_ps(t, v[q]);
            std::memcpy(d + (k0 + q) * w + r0, t, (size_t)(w - r0) * sizeof(float));
          }
        }
      }
  }
#endif
  for (int64_t kk = k0; kk < k; ++kk) {
    float* dk = d + kk * w;
    for (int r = 0; r < nl; ++r) dk[r] = ld1(lines[r] + kk * ks);
    std::fill(dk + nl, dk + w, 0.0f);
  }
}

void pack_runs(const float* src, int64_t ks, int64_t lines, int w, int64_t nq, int64_t k, float* d) {
  const int64_t run = std::min<int64_t>(lines, nq * w);
  // panels with all w lines (w a whole number of vectors) copied without masks: the masks' set-up per vector
  // was a good part of packing B
  const int64_t nfull = w % kW == 0 ? std::min<int64_t>(nq, lines / w) : 0;
  for (int64_t kk = 0; kk < k; ++kk, src += ks) {
    // k steps often lie a page or more apart, past the hardware prefetchers: fetch a few steps ahead
    if (kk + kPackAhead < k)
      for (int64_t off = 0; off < run; off += 16) __builtin_prefetch(src + kPackAhead * ks + off);
    for (int64_t q = 0; q < nfull; ++q)
      for (int r = 0; r < w; r += kW) vst(d + (q * k + kk) * w + r, vld(src + q * w + r));
    for (int64_t q = nfull; q < nq; ++q) {
      const int64_t nl = std::min<int64_t>(w, lines - q * w);
      float* dq = d + (q * k + kk) * w;
      const float* sq = src + q * w;
      for (int r = 0; r < w; r += kW)
        copy_part(sq + r, (int)std::clamp<int64_t>(nl - r, 0, kW), std::min(kW, w - r), dq + r);
    }
  }
}

void pack_lines(const void* const* lines, int src, int nl, int64_t ks, int64_t k, int w, float* d) {
  switch (src) {
    case 1: pack_lines_t((const f16* const*)lines, nl, ks, k, w, d); break;
    case 2: pack_lines_t((const bf16* const*)lines, nl, ks, k, w, d); break;
    default: pack_lines_t((const float* const*)lines, nl, ks, k, w, d); break;
  }
}

// d[i] = s[i] rounded to f16 (code 1) or bf16 (2) to nearest even, as dtype.h's scalar conversions round
// (NaN stays a quiet NaN, overflow goes to inf).
void round_out(const float* s, int64_t n, uint16_t* d, int code) {
  int64_t i = 0;
#if defined(__AVX512F__)
  if (code == 1) {
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256((__m256i*)(d + i), _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  } else {
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i abs = _mm512_set1_epi32(0x7fffffff), quiet = _mm512_set1_epi32(0x40);
    for (; i + 16 <= n; i += 16) {
      const __m512i x = _mm512_castps_si512(_mm512_loadu_ps(s + i));
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs), inf);
      const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
      __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(bias, odd)), 16);
      r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(x, 16), quiet));
      _mm256_storeu_si256((__m256i*)(d + i), _mm512_cvtepi32_epi16(r));
    }
  }
#elif defined(__AVX2__)
  if (code == 1) {
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128((__m128i*)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  } else {
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), quiet = _mm256_set1_epi32(0x40);
    for (; i + 8 <= n; i += 8) {
      const __m256i x = _mm256_castps_si256(_mm256_loadu_ps(s + i));
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs), inf);  // both sides non-negative
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
      __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, odd)), 16);
      r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(x, 16), quiet), nan);
      r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
      _mm_storeu_si128((__m128i*)(d + i), _mm256_castsi256_si128(r));
    }
  }
#endif
  for (; i < n; ++i) d[i] = code == 1 ? f32_to_f16(s[i]) : f32_to_bf16(s[i]);
}

}  // namespace

void EMBER_GCAT(register_gemm_, EMBER_ISA)(PackedGemm& g) {
  g.mr = kMR;
  g.nr = kNR;
  g.mmr = kMMR;
  g.run = &run;
  g.run_mm = &run_mm;
  g.run_rows = &run_rows_mm;
  g.pack = &pack_lines;
  g.pack_runs = &pack_runs;
  g.run_pack_b = &run_pack_b;
  g.run_pack_a = &run_pack_a;
  g.thin = &thin;
  g.thin_t = &thin_t;
  g.round_out = &round_out;
  g.preferred = kW == 16;
}

}  // namespace ember::cpu
