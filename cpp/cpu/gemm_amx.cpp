// The bfloat16 matmul on AMX tiles (cpu/packed_gemm.h: AmxGemm): operands packed as 16 x 32 bf16 tiles (B in
// k pairs), C in 2 x 2 tiles of 16 x 16 floats accumulated over all of k by TDPBF16PS. Built with AMX flags.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include "cpu/packed_gemm.h"

namespace ember::cpu {
namespace {  // internal linkage: nothing here may be shared with baseline code by the linker

constexpr int kT = 16;            // tile rows (and C tile columns)
constexpr int kKB = 32;           // bf16 per tile row: one k block
constexpr int kTile = kT * kKB;   // bf16 per packed tile (1 KiB)

// Palette 1, every tile 16 rows of 64 bytes: 0-3 C, 4-5 A, 6-7 B.
struct alignas(64) TileCfg {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

inline int64_t kblocks(int64_t k) { return (k + kKB - 1) / kKB; }

// A panel (16 rows): tile kb holds d[kb * 512 + r * 32 + q] = line r's element kb * 32 + q (zero past k, nl).
void pack_a(const uint16_t* const* lines, int nl, int64_t ks, int64_t k, uint16_t* d) {
  const int64_t nkb = kblocks(k);
  std::memset(d, 0, (size_t)(nkb * kTile) * sizeof(uint16_t));
  bool consecutive = true;  // line r starts r elements after line 0 (a transposed A)
  for (int r = 1; r < nl && consecutive; ++r) consecutive = lines[r] == lines[0] + r;
  if (ks == 1) {  // each line runs along k: 64-byte runs
    for (int r = 0; r < nl; ++r)
      for (int64_t kb = 0; kb < nkb; ++kb) {
        const int64_t len = std::min<int64_t>(kKB, k - kb * kKB);
        std::memcpy(d + kb * kTile + r * kKB, lines[r] + kb * kKB, (size_t)len * sizeof(uint16_t));
      }
    return;
  }
  if (consecutive) {  // each k step is one run of nl values: 16 x 32 blocks transposed through registers
    alignas(64) uint16_t blk[kKB][kT];
    for (int64_t kb = 0; kb < nkb; ++kb) {
      const int64_t len = std::min<int64_t>(kKB, k - kb * kKB);
      for (int64_t q = 0; q < len; ++q) std::memcpy(blk[q], lines[0] + (kb * kKB + q) * ks, (size_t)nl * 2);
      uint16_t* t = d + kb * kTile;
      for (int r = 0; r < nl; ++r)
        for (int64_t q = 0; q < len; ++q) t[r * kKB + q] = blk[q][r];
    }
    return;
  }
  for (int r = 0; r < nl; ++r)
    for (int64_t kk = 0; kk < k; ++kk) d[kk / kKB * kTile + r * kKB + kk % kKB] = lines[r][kk * ks];
}

// B panel (16 columns), k in pairs: tile kb holds d[kb * 512 + p * 32 + c * 2 + e] = line c's element
// kb * 32 + 2p + e (the VNNI layout TDPBF16PS reads), zero past k and nl.
void pack_b(const uint16_t* const* lines, int nl, int64_t ks, int64_t k, uint16_t* d) {
  const int64_t nkb = kblocks(k);
  bool consecutive = true;  // a row-major B: line c starts c elements after line 0
  for (int r = 1; r < nl && consecutive; ++r) consecutive = lines[r] == lines[0] + r;
  if (consecutive && ks != 1) {  // two rows of B, 16 columns each, interleaved into 16 words per k pair
    const __mmask16 mk = (__mmask16)((1u << nl) - 1);
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t kb = 0; kb < nkb; ++kb)
      for (int p = 0; p < kKB / 2; ++p) {
        const int64_t k0 = kb * kKB + 2 * p;
        __m512i w = zero;
        if (k0 < k) {
          const __m256i r0 = _mm256_maskz_loadu_epi16(mk, lines[0] + k0 * ks);
          const __m256i r1 = k0 + 1 < k ? _mm256_maskz_loadu_epi16(mk, lines[0] + (k0 + 1) * ks) : _mm256_setzero_si256();
          w = _mm512_or_si512(_mm512_cvtepu16_epi32(r0), _mm512_slli_epi32(_mm512_cvtepu16_epi32(r1), 16));
        }
        _mm512_storeu_si512(d + kb * kTile + p * kKB, w);
      }
    return;
  }
  std::memset(d, 0, (size_t)(nkb * kTile) * sizeof(uint16_t));
  if (ks == 1) {  // B^T: each line runs along k, so a k pair is one 32-bit word of it
    const int64_t kp = k / 2;
    for (int c = 0; c < nl; ++c) {
      const uint16_t* l = lines[c];
      for (int64_t p = 0; p < kp; ++p) {
        uint32_t w;
        std::memcpy(&w, l + 2 * p, 4);
        std::memcpy(d + (2 * p) / kKB * kTile + (p % (kKB / 2)) * kKB + c * 2, &w, 4);
      }
      if (k % 2) d[(k - 1) / kKB * kTile + ((k - 1) / 2 % (kKB / 2)) * kKB + c * 2] = l[k - 1];
    }
    return;
  }
  for (int c = 0; c < nl; ++c)
    for (int64_t kk = 0; kk < k; ++kk)
      d[kk / kKB * kTile + (kk % kKB / 2) * kKB + c * 2 + kk % 2] = lines[c][kk * ks];
}

// C tile T (16 x 16) to c at rows < mv, cols < nv: straight from the tile when whole, else through a buffer.
// (GCC's tile intrinsics paste the tile number into the instruction, so it is a literal, not a parameter.)
inline void copy_part(const float* buf, float* c, int64_t ldc, int64_t mv, int64_t nv) {
  for (int64_t i = 0; i < std::min<int64_t>(mv, kT); ++i)
    std::memcpy(c + i * ldc, buf + i * kT, (size_t)std::min<int64_t>(nv, kT) * sizeof(float));
}
#define EMBER_STORE_C(T, c, ldc, mv, nv)                     \
  do {                                                       \
    if ((mv) >= kT && (nv) >= kT) {                          \
      _tile_stored(T, (c), (ldc) * (int64_t)sizeof(float));  \
    } else {                                                 \
      alignas(64) float buf_[kT * kT];                       \
      _tile_stored(T, buf_, kT * sizeof(float));             \
      copy_part(buf_, (c), (ldc), (mv), (nv));               \
    }                                                        \
  } while (0)

// Loads C tile T from c (rows < mv, cols < nv; the rest zero), as EMBER_STORE_C stores it.
#define EMBER_LOAD_C(T, c, ldc, mv, nv)                                               \
  do {                                                                                \
    if ((mv) >= kT && (nv) >= kT) {                                                   \
      _tile_loadd(T, (c), (ldc) * (int64_t)sizeof(float));                            \
    } else {                                                                          \
      alignas(64) float buf_[kT * kT] = {};                                           \
      for (int64_t i_ = 0; i_ < std::min<int64_t>((mv), kT); ++i_)                    \
        std::memcpy(buf_ + i_ * kT, (c) + i_ * (ldc),                                 \
                    (size_t)std::min<int64_t>((nv), kT) * sizeof(float));              \
      _tile_loadd(T, buf_, kT * sizeof(float));                                       \
    }                                                                                 \
  } while (0)

// (MI x 16) x (NJ x 16) block of C over k blocks [kb0, kb1): MI A tiles against NJ B tiles per k block, C
// starting from zero or (acc) from its stored partial sums, which float holds exactly.
template <int MI, int NJ>
void block(const uint16_t* a0, const uint16_t* a1, const uint16_t* b0, const uint16_t* b1, int64_t kb0, int64_t kb1,
           bool acc, float* c, int64_t ldc, int64_t mv, int64_t nv) {
  if (acc) {
    EMBER_LOAD_C(0, c, ldc, mv, nv);
    if constexpr (NJ > 1) EMBER_LOAD_C(1, c + kT, ldc, mv, nv - kT);
    if constexpr (MI > 1) EMBER_LOAD_C(2, c + kT * ldc, ldc, mv - kT, nv);
    if constexpr (MI > 1 && NJ > 1) EMBER_LOAD_C(3, c + kT * ldc + kT, ldc, mv - kT, nv - kT);
  } else {
    _tile_zero(0);
    if constexpr (NJ > 1) _tile_zero(1);
    if constexpr (MI > 1) _tile_zero(2);
    if constexpr (MI > 1 && NJ > 1) _tile_zero(3);
  }
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    _tile_loadd(4, a0 + kb * kTile, kKB * 2);
    _tile_loadd(6, b0 + kb * kTile, kKB * 2);
    if constexpr (NJ > 1) _tile_loadd(7, b1 + kb * kTile, kKB * 2);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NJ > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MI > 1) {
      _tile_loadd(5, a1 + kb * kTile, kKB * 2);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (NJ > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  EMBER_STORE_C(0, c, ldc, mv, nv);
  if constexpr (NJ > 1) EMBER_STORE_C(1, c + kT, ldc, mv, nv - kT);
  if constexpr (MI > 1) EMBER_STORE_C(2, c + kT * ldc, ldc, mv - kT, nv);
  if constexpr (MI > 1 && NJ > 1) EMBER_STORE_C(3, c + kT * ldc + kT, ldc, mv - kT, nv - kT);
}

// C (m x n, ldc) = A B from packed panels. Rows go in blocks whose A panels (about 512 KiB) stay in L2; for
// each pair of B panels, k goes in chunks of 1024 (64 KiB of B tiles) while the block's A panels pass over
// them, C's partial sums staying in cache between chunks. Every C element is one TDPBF16PS chain over the k
// blocks in order, whatever the chunks.
void run(const uint16_t* ap, const uint16_t* bp, int64_t m, int64_t n, int64_t k, float* c, int64_t ldc) {
  TileCfg cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = kT;
  _tile_loadconfig(&cfg);
  const int64_t nkb = kblocks(k), psz = nkb * kTile;
  const int64_t mp = (m + kT - 1) / kT, np = (n + kT - 1) / kT;
  const int64_t rb = std::max<int64_t>(2, (int64_t(1) << 18) / std::max<int64_t>(1, psz) / 2 * 2);
  constexpr int64_t kc = 32;  // k blocks per chunk
  for (int64_t ib = 0; ib < mp; ib += rb) {
    const int64_t ie = std::min(mp, ib + rb);
    for (int64_t jp = 0; jp < np; jp += 2) {
      const uint16_t* b0 = bp + jp * psz;
      const uint16_t* b1 = b0 + psz;
      const int64_t nv = n - jp * kT;
      const bool two_j = jp + 1 < np;
      for (int64_t kb0 = 0; kb0 < nkb; kb0 += kc) {
        const int64_t kb1 = std::min(nkb, kb0 + kc);
        for (int64_t ip = ib; ip < ie; ip += 2) {
          const uint16_t* a0 = ap + ip * psz;
          const uint16_t* a1 = a0 + psz;
          float* ct = c + ip * kT * ldc + jp * kT;
          const int64_t mv = m - ip * kT;
          const bool two_i = ip + 1 < ie, acc = kb0 > 0;
          if (two_i && two_j) block<2, 2>(a0, a1, b0, b1, kb0, kb1, acc, ct, ldc, mv, nv);
          else if (two_i) block<2, 1>(a0, a1, b0, b1, kb0, kb1, acc, ct, ldc, mv, nv);
          else if (two_j) block<1, 2>(a0, a1, b0, b1, kb0, kb1, acc, ct, ldc, mv, nv);
          else block<1, 1>(a0, a1, b0, b1, kb0, kb1, acc, ct, ldc, mv, nv);
        }
      }
    }
  }
  _tile_release();  // the kernel then need not save tile state at a context switch
}

}  // namespace

void register_gemm_amx(AmxGemm& g) {
  g.pack_a = &pack_a;
  g.pack_b = &pack_b;
  g.run = &run;
}

}  // namespace ember::cpu
