/* The FMA throughput loop behind bench_matmul.py's percent-of-peak: independent multiply-add chains on
   registers only, one function per ISA; each returns the float operations it performed. */
#include <immintrin.h>

#define CHAINS 12
/* the chains must live in registers: unrolled by the compiler at any -O level */
#define UNROLL _Pragma("GCC unroll 12")

__attribute__((target("avx512f"))) double fma_avx512(long iters) {
  __m512 acc[CHAINS];
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < CHAINS; ++i) acc[i] = _mm512_set1_ps((float)i);
  for (long it = 0; it < iters; ++it)
    UNROLL for (int i = 0; i < CHAINS; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < CHAINS; ++i) s = _mm512_add_ps(s, acc[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return 2.0 * 16 * CHAINS * (double)iters;
}

__attribute__((target("avx2,fma"))) double fma_avx2(long iters) {
  __m256 acc[CHAINS];
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < CHAINS; ++i) acc[i] = _mm256_set1_ps((float)i);
  for (long it = 0; it < iters; ++it)
    UNROLL for (int i = 0; i < CHAINS; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 s = acc[0];
  for (int i = 1; i < CHAINS; ++i) s = _mm256_add_ps(s, acc[i]);
  float t[8];
  _mm256_storeu_ps(t, s);
  volatile float sink = t[0] + t[7];
  (void)sink;
  return 2.0 * 8 * CHAINS * (double)iters;
}

/* base x86-64 has no FMA: a multiply and an add per lane and step, as ember's base kernels run */
double fma_base(long iters) {
  __m128 acc[CHAINS];
  const __m128 a = _mm_set1_ps(0.999f), b = _mm_set1_ps(1e-7f);
  for (int i = 0; i < CHAINS; ++i) acc[i] = _mm_set1_ps((float)i);
  for (long it = 0; it < iters; ++it)
    UNROLL for (int i = 0; i < CHAINS; ++i) acc[i] = _mm_add_ps(_mm_mul_ps(acc[i], a), b);
  __m128 s = acc[0];
  for (int i = 1; i < CHAINS; ++i) s = _mm_add_ps(s, acc[i]);
  float t[4];
  _mm_storeu_ps(t, s);
  volatile float sink = t[0] + t[3];
  (void)sink;
  return 2.0 * 4 * CHAINS * (double)iters;
}
