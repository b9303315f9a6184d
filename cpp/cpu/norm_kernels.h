// The per-run kernels batch_norm and group_norm share: sums, centred sums of squares, the folded affine and
// the backward's dot products and dx over one contiguous run of a channel, in float or double.
#pragma once
#include <algorithm>
#include <cstdint>

// The hot loops are cloned per ISA and picked by cpuid at load time (the core is built for base x86-64);
// sanitizer builds keep one copy, as their ifunc resolvers would run before the runtime is up.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define EMBER_NORM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define EMBER_NORM_CLONES
#endif

namespace ember::cpu {
namespace {  // internal linkage: each including file gets its own ISA clones

constexpr int64_t kChunk = 4096;  // elements per vector partial; chunks add up in double

// 32-byte vectors of plain GCC vector extensions, two partials per loop: each ISA clone maps them to its
// registers (one ymm, two xmm), so the sums vectorise without the auto-vectoriser's reassociation; 64-byte
// vectors spill to the stack on AVX2.
typedef float vfloat __attribute__((vector_size(32)));
typedef double vdouble __attribute__((vector_size(32)));
template <typename T> struct VecOf;
template <> struct VecOf<float> { using type = vfloat; };
template <> struct VecOf<double> { using type = vdouble; };

#define EMBER_NORM_LOAD(v, p) __builtin_memcpy(&(v), (p), sizeof(v))

// Each kernel walks one contiguous run of a channel. Sums are two vector partials per chunk, chunks in double.
#define EMBER_NORM_RUN_KERNELS(T)                                                                                \
  EMBER_NORM_CLONES double norm_sum(const T* x, int64_t n) {                                                     \
    using V = VecOf<T>::type;                                                                                    \
    constexpr int64_t L = sizeof(V) / sizeof(T);                                                                 \
    double total = 0;                                                                                            \
    for (int64_t c0 = 0; c0 < n; c0 += kChunk) {                                                                 \
      const int64_t c1 = std::min(n, c0 + kChunk);                                                               \
      V s0 = {}, s1 = {};                                                                                        \
      int64_t i = c0;                                                                                            \
      for (; i + 2 * L <= c1; i += 2 * L) {                                                                      \
        V v0, v1;                                                                                                \
        EMBER_NORM_LOAD(v0, x + i);                                                                              \
        EMBER_NORM_LOAD(v1, x + i + L);                                                                          \
        s0 += v0;                                                                                                \
        s1 += v1;                                                                                                \
      }                                                                                                          \
      s0 += s1;                                                                                                  \
      double t = 0;                                                                                              \
      for (; i < c1; ++i) t += x[i];                                                                             \
      for (int64_t k = 0; k < L; ++k) t += s0[k];                                                                \
      total += t;                                                                                                \
    }                                                                                                            \
    return total;                                                                                                \
  }                                                                                                              \
  /* sum((x - mu)^2): centred on the exact mean, so channels far from zero lose nothing */                       \
  EMBER_NORM_CLONES double norm_sqdev(const T* x, int64_t n, T mu) {                                             \
    using V = VecOf<T>::type;                                                                                    \
    constexpr int64_t L = sizeof(V) / sizeof(T);                                                                 \
    double total = 0;                                                                                            \
    for (int64_t c0 = 0; c0 < n; c0 += kChunk) {                                                                 \
      const int64_t c1 = std::min(n, c0 + kChunk);                                                               \
      V s0 = {}, s1 = {};                                                                                        \
      int64_t i = c0;                                                                                            \
      for (; i + 2 * L <= c1; i += 2 * L) {                                                                      \
        V v0, v1;                                                                                                \
        EMBER_NORM_LOAD(v0, x + i);                                                                              \
        EMBER_NORM_LOAD(v1, x + i + L);                                                                          \
        v0 -= mu;                                                                                                \
        v1 -= mu;                                                                                                \
        s0 += v0 * v0;                                                                                           \
        s1 += v1 * v1;                                                                                           \
      }                                                                                                          \
      s0 += s1;                                                                                                  \
      double t = 0;                                                                                              \
      for (; i < c1; ++i) t += ((double)x[i] - mu) * ((double)x[i] - mu);                                        \
      for (int64_t k = 0; k < L; ++k) t += s0[k];                                                                \
      total += t;                                                                                                \
    }                                                                                                            \
    return total;                                                                                                \
  }                                                                                                              \
  /* y = x * a + b */                                                                                            \
  EMBER_NORM_CLONES void norm_affine(const T* __restrict x, T* __restrict y, int64_t n, T a, T b) {              \
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;                                                         \
  }                                                                                                              \
  /* sum(g) and sum(g * (x - mu)); with dx given also dx = g * a (batch_norm eval: the same pass) */             \
  EMBER_NORM_CLONES void norm_dot(const T* __restrict g, const T* __restrict x, T* __restrict dx, int64_t n,     \
                                  T mu, T a, double& sg, double& sgc) {                                          \
    using V = VecOf<T>::type;                                                                                    \
    constexpr int64_t L = sizeof(V) / sizeof(T);                                                                 \
    sg = sgc = 0;                                                                                                \
    for (int64_t c0 = 0; c0 < n; c0 += kChunk) {                                                                 \
      const int64_t c1 = std::min(n, c0 + kChunk);                                                               \
      V p0 = {}, p1 = {}, q0 = {}, q1 = {};                                                                      \
      int64_t i = c0;                                                                                            \
      for (; i + 2 * L <= c1; i += 2 * L) {                                                                      \
        V g0, g1, x0, x1;                                                                                        \
        EMBER_NORM_LOAD(g0, g + i);                                                                              \
        EMBER_NORM_LOAD(g1, g + i + L);                                                                          \
        EMBER_NORM_LOAD(x0, x + i);                                                                              \
        EMBER_NORM_LOAD(x1, x + i + L);                                                                          \
        p0 += g0;                                                                                                \
        p1 += g1;                                                                                                \
        q0 += g0 * (x0 - mu);                                                                                    \
        q1 += g1 * (x1 - mu);                                                                                    \
        if (dx) {                                                                                                \
          const V d0 = g0 * a, d1 = g1 * a;                                                                      \
          __builtin_memcpy(dx + i, &d0, sizeof d0);                                                              \
          __builtin_memcpy(dx + i + L, &d1, sizeof d1);                                                          \
        }                                                                                                        \
      }                                                                                                          \
      p0 += p1;                                                                                                  \
      q0 += q1;                                                                                                  \
      double t1 = 0, t2 = 0;                                                                                     \
      for (; i < c1; ++i) {                                                                                      \
        t1 += g[i];                                                                                              \
        t2 += (double)g[i] * ((double)x[i] - mu);                                                                \
        if (dx) dx[i] = g[i] * a;                                                                                \
      }                                                                                                          \
      for (int64_t k = 0; k < L; ++k) t1 += p0[k], t2 += q0[k];                                                  \
      sg += t1;                                                                                                  \
      sgc += t2;                                                                                                 \
    }                                                                                                            \
  }                                                                                                              \
  /* dx = g * a + x * b + c */                                                                                   \
  EMBER_NORM_CLONES void norm_dx(const T* __restrict g, const T* __restrict x, T* __restrict dx, int64_t n, T a, \
                                 T b, T c) {                                                                     \
    for (int64_t i = 0; i < n; ++i) dx[i] = g[i] * a + x[i] * b + c;                                             \
  }

EMBER_NORM_RUN_KERNELS(float)
EMBER_NORM_RUN_KERNELS(double)
#undef EMBER_NORM_RUN_KERNELS

}  // namespace
}  // namespace ember::cpu
