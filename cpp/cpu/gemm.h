// The CPU backend's BLAS entry for kernels that feed GEMM tiles themselves (conv): row-major, one thread.
#pragma once
#include <cstdint>

namespace ember::cpu {

// C (m x n, row stride ldc) = op(A) op(B) + beta C; op transposes when ta / tb. The caller keeps m, n, k
// > 0. Runs single-threaded BLAS on the calling thread (call from inside parallel_for).
void gemm_rowmajor(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                   int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_rowmajor(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
                   int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace ember::cpu
