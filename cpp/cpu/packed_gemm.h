// Packed float32 GEMM for the conv kernels: A (the weights) is packed once per call into row panels, B
// (an im2col tile) is written by its producer straight into column panels, so no per-tile repacking.
#pragma once
#include <cstdint>

namespace ember::cpu {

// Panel layouts, both k-major and zero-padded past m / n:
//   A panel i (rows i*mr .. i*mr+mr): ap[(i * k + kk) * mr + r] = A[i*mr + r][kk]
//   B panel j (cols j*nr .. j*nr+nr): bp[(j * k + kk) * nr + c] = B[kk][j*nr + c]
// run: C[r * ldc + c] = sum_kk A[r][kk] B[kk][c] for r < m, c < n, added to C's old value when `acc`.
struct PackedGemm {
  int mr = 1, nr = 1;
  // The general matmul's row panels (mmr rows, as tall as the registers allow): run_mm and run_rows take
  // them; the convs keep mr, a multiple that channel counts usually are.
  int mmr = 1;
  // Whether the float32 convs take this GEMM by default (EMBER_CONV_GEMM=packed|blas overrides): on
  // AVX2 OpenBLAS's own kernels with their packing were as fast, so only AVX-512 says yes.
  bool preferred = false;
  void (*run)(const float* ap, const float* bp, int64_t m, int64_t n, int64_t k, float* c, int64_t ldc,
              bool acc) = nullptr;
  void (*run_mm)(const float* ap, const float* bp, int64_t m, int64_t n, int64_t k, float* c, int64_t ldc,
                 bool acc) = nullptr;
  // run_mm with A (m x k, float, row stride lda, unit column stride) read where it lies instead of from panels:
  // the same products in the same order (the same bits), without packing A first.
  void (*run_rows)(const float* a, int64_t lda, const float* bp, int64_t m, int64_t n, int64_t k, float* c,
                   int64_t ldc, bool acc) = nullptr;
  // run_mm (or run_rows when a_rows) with B (k x n, float, row stride ldbs, unit column stride) read from where
  // it lies and packed into bw (panels(n, nr) * nr * k floats) while the tiles run: the same bits.
  void (*run_pack_b)(const float* a, int64_t lda, bool a_rows, const float* bsrc, int64_t ldbs, float* bw, int64_t m,
                     int64_t n, int64_t k, float* c, int64_t ldc, bool acc) = nullptr;
  // run_mm with A (m x k, float) read where A^T's rows hold it (A[i][kk] at asrc[kk * ldas + i]) and packed into
  // aw (panels(m, mmr) * mmr * k floats) while the tiles run: the same bits.
  void (*run_pack_a)(const float* asrc, int64_t ldas, float* aw, const float* bp, int64_t m, int64_t n, int64_t k,
                     float* c, int64_t ldc, bool acc) = nullptr;
  // Packs one panel of w (mr or nr) lines, k-major: d[kk * w + r] = lines[r][kk * ks] as float for r < nl,
  // 0 for nl <= r < w. src: 0 float, 1 f16, 2 bf16 (converted while packing). A's lines are its rows,
  // B's its columns; a transposed or strided operand is read where it lies, without a copy.
  void (*pack)(const void* const* lines, int src, int nl, int64_t ks, int64_t k, int w, float* d) = nullptr;
  // nq panels of w lines each from float lines that lie consecutively (A^T's rows, a row-major B's columns):
  // line r's element kk at src[kk * ks + r], r < lines; panel q at d + q * k * w as `pack` lays it out, lines
  // past `lines` zero. Each k step is read as one run of up to nq * w floats, with vector moves.
  void (*pack_runs)(const float* src, int64_t ks, int64_t lines, int w, int64_t nq, int64_t k, float* d) = nullptr;
  // Thin products (m of a few rows), columns [j0, j1) of C = A B, A float row-major (lda), B float, f16 or bf16
  // (src as in pack, converted in registers), nothing packed but A's rows: `thin` reads B (k x n) in place by
  // rows ldb apart (j0 a multiple of nr; scratch holds (mr + nr) * k floats); `thin_t` reads B^T (n x k) in
  // place by rows ldbt apart (dot products along k).
  void (*thin)(const float* a, int64_t lda, const void* b, int src, int64_t ldb, int64_t m, int64_t n, int64_t j0,
               int64_t j1, int64_t k, float* c, int64_t ldc, float* scratch) = nullptr;
  void (*thin_t)(const float* a, int64_t lda, const void* bt, int src, int64_t ldbt, int64_t m, int64_t j0,
                 int64_t j1, int64_t k, float* c, int64_t ldc) = nullptr;
  // d[i] = s[i] rounded to float16 (code 1) or bfloat16 (2) for i < n, bit-exact with dtype.h's conversions:
  // the half matmuls round each C block while it is still in cache.
  void (*round_out)(const float* s, int64_t n, uint16_t* d, int code) = nullptr;
};
const PackedGemm& packed_gemm();  // this CPU's kernel (cpu/dispatch.cpp picks it)
void register_gemm_base(PackedGemm& g);
void register_gemm_avx2(PackedGemm& g);
void register_gemm_avx512(PackedGemm& g);

// The bfloat16 GEMM on AMX tiles (gemm_amx.cpp, CPUs with AMX-BF16): operands packed as bf16 tiles of 16
// lines x 32 k (B's in k pairs), panels of 16 lines, each amx_panel(k) elements; products exact in float,
// accumulated in float by TDPBF16PS (subnormal inputs and sums are flushed to zero, as the instruction does).
struct AmxGemm {
  // One panel from `lines` (nl <= 16 lines, elements ks apart along k, as PackedGemm::pack), zero-padded.
  void (*pack_a)(const uint16_t* const* lines, int nl, int64_t ks, int64_t k, uint16_t* d) = nullptr;
  void (*pack_b)(const uint16_t* const* lines, int nl, int64_t ks, int64_t k, uint16_t* d) = nullptr;
  // C (m x n, row stride ldc) = A B from ceil(m / 16) A panels and ceil(n / 16) B panels.
  void (*run)(const uint16_t* ap, const uint16_t* bp, int64_t m, int64_t n, int64_t k, float* c, int64_t ldc) = nullptr;
};
inline int64_t amx_panel(int64_t k) { return (k + 31) / 32 * 512; }
// This CPU's AMX GEMM, or null: no AMX-BF16, the OS refuses tile state, EMBER_ISA below avx512, or a build
// without AMX support.
const AmxGemm* amx_gemm();
void register_gemm_amx(AmxGemm& g);

// Packs the m x k matrix A into ceil(m / mr) panels at ap: A[r][kk] = a[r * lda + kk], or with
// `transposed` a[kk * lda + r].
void pack_a(const float* a, int64_t lda, bool transposed, int64_t m, int64_t k, int mr, float* ap);
// Packs the k x n matrix B[kk][c] = b[kk * ldb + c] into ceil(n / nr) panels at bp.
void pack_b(const float* b, int64_t ldb, int64_t k, int64_t n, int nr, float* bp);
inline int64_t panels(int64_t n, int nr) { return (n + nr - 1) / nr; }

}  // namespace ember::cpu
