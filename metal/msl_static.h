// msl_static.h: the shim of the static checks (tools/metal_check): MSL type-checked as clang C++ with
// Metal's address spaces kept distinct (device 1, constant 2, threadgroup 3), half/bfloat/vectors as
// clang's own _Float16/__bf16/ext_vector_type (what Apple's compiler builds on), and the metal_stdlib
// functions declared, never defined: it is for -fsyntax-only, not for running (that is msl_cpu.h).
#pragma once
#include <stddef.h>
#include <stdint.h>

#define device __attribute__((address_space(1)))
#define constant __attribute__((address_space(2)))
#define threadgroup __attribute__((address_space(3)))
#define thread

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;
typedef _Float16 half;
typedef __bf16 bfloat;

#define MSL_VEC_NAMES(T, P)                                 \
  typedef T P##2 __attribute__((ext_vector_type(2)));      \
  typedef T P##3 __attribute__((ext_vector_type(3)));      \
  typedef T P##4 __attribute__((ext_vector_type(4)));
MSL_VEC_NAMES(float, float)
MSL_VEC_NAMES(half, half)
MSL_VEC_NAMES(bfloat, bfloat)
MSL_VEC_NAMES(int, int)
MSL_VEC_NAMES(uint, uint)
MSL_VEC_NAMES(short, short)
MSL_VEC_NAMES(ushort, ushort)
MSL_VEC_NAMES(char, char)
MSL_VEC_NAMES(uchar, uchar)
MSL_VEC_NAMES(long, long)
MSL_VEC_NAMES(ulong, ulong)
MSL_VEC_NAMES(bool, bool)
#undef MSL_VEC_NAMES

namespace metal {
template <class T, int N> using vec = T __attribute__((ext_vector_type(N)));
template <class T> struct numeric_limits {
  static T max();
  static T min();
  static T lowest();
  static T epsilon();
  static T infinity();
  static T quiet_NaN();
};

#define MSL_DECL1(NAME) template <class T> T NAME(T);
#define MSL_DECL2(NAME) template <class T> T NAME(T, T);
MSL_DECL1(exp) MSL_DECL1(exp2) MSL_DECL1(exp10) MSL_DECL1(log) MSL_DECL1(log2) MSL_DECL1(log10) MSL_DECL1(sin)
MSL_DECL1(cos) MSL_DECL1(tan) MSL_DECL1(asin) MSL_DECL1(acos) MSL_DECL1(atan) MSL_DECL1(sinh) MSL_DECL1(cosh)
MSL_DECL1(tanh) MSL_DECL1(asinh) MSL_DECL1(acosh) MSL_DECL1(atanh) MSL_DECL1(sqrt) MSL_DECL1(rsqrt) MSL_DECL1(fabs)
MSL_DECL1(abs) MSL_DECL1(floor) MSL_DECL1(ceil) MSL_DECL1(round) MSL_DECL1(rint) MSL_DECL1(trunc) MSL_DECL1(fract)
MSL_DECL1(sign) MSL_DECL1(popcount)
MSL_DECL2(pow) MSL_DECL2(powr) MSL_DECL2(fmax) MSL_DECL2(fmin) MSL_DECL2(max) MSL_DECL2(min) MSL_DECL2(fmod)
MSL_DECL2(atan2) MSL_DECL2(copysign) MSL_DECL2(step)
#undef MSL_DECL1
#undef MSL_DECL2
template <class T> T clamp(T, T, T);
template <class T> T fma(T, T, T);
template <class T> T mix(T, T, T);
template <class T> T select(T, T, bool);
template <class T> bool isnan(T);
template <class T> bool isinf(T);
template <class T> bool isfinite(T);
template <class T> bool signbit(T);
template <class T> bool all(T);
template <class T> bool any(T);
template <class V> auto dot(V a, V b) -> decltype(a.x * b.x);
template <class To, class From> To as_type(From);
namespace precise {
using metal::cos; using metal::exp; using metal::exp2; using metal::log; using metal::log2; using metal::pow;
using metal::rsqrt; using metal::sin; using metal::sqrt; using metal::tanh; using metal::tan; using metal::powr;
}  // namespace precise
namespace fast {
using metal::cos; using metal::exp; using metal::exp2; using metal::log; using metal::log2; using metal::pow;
using metal::rsqrt; using metal::sin; using metal::sqrt; using metal::tanh; using metal::tan; using metal::powr;
}  // namespace fast

enum class mem_flags : uint { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
mem_flags operator|(mem_flags, mem_flags);
void threadgroup_barrier(mem_flags);
void simdgroup_barrier(mem_flags);
#define MSL_SIMD1(NAME) template <class T> T NAME(T);
#define MSL_SIMD2(NAME) template <class T> T NAME(T, ushort);
MSL_SIMD1(simd_sum) MSL_SIMD1(simd_product) MSL_SIMD1(simd_max) MSL_SIMD1(simd_min) MSL_SIMD1(simd_and)
MSL_SIMD1(simd_or) MSL_SIMD1(simd_xor) MSL_SIMD1(simd_prefix_inclusive_sum) MSL_SIMD1(simd_prefix_exclusive_sum)
MSL_SIMD1(simd_prefix_inclusive_product) MSL_SIMD1(simd_prefix_exclusive_product) MSL_SIMD1(simd_broadcast_first)
MSL_SIMD2(simd_shuffle) MSL_SIMD2(simd_shuffle_down) MSL_SIMD2(simd_shuffle_up) MSL_SIMD2(simd_shuffle_xor)
MSL_SIMD2(simd_broadcast)
#undef MSL_SIMD1
#undef MSL_SIMD2
struct simd_vote {
  using vote_t = uint64_t;
  explicit operator vote_t() const;
  bool all() const;
  bool any() const;
};
simd_vote simd_ballot(bool);
bool simd_all(bool);
bool simd_any(bool);
simd_vote simd_active_threads_mask();
bool simd_is_first();

enum memory_order { memory_order_relaxed, memory_order_seq_cst };
template <class T> struct atomic {
  T v;
};
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;
typedef atomic<bool> atomic_bool;
template <class P, class V> void atomic_store_explicit(P, V, memory_order);
template <class P> auto atomic_load_explicit(P obj, memory_order) -> decltype(obj->v + 0);
template <class P, class V> auto atomic_exchange_explicit(P obj, V, memory_order) -> decltype(obj->v + 0);
template <class P, class E, class V> bool atomic_compare_exchange_weak_explicit(P, E*, V, memory_order, memory_order);
#define MSL_ATOMIC(NAME) template <class P, class V> auto NAME(P obj, V, memory_order) -> decltype(obj->v + 0);
MSL_ATOMIC(atomic_fetch_add_explicit) MSL_ATOMIC(atomic_fetch_sub_explicit) MSL_ATOMIC(atomic_fetch_and_explicit)
MSL_ATOMIC(atomic_fetch_or_explicit) MSL_ATOMIC(atomic_fetch_xor_explicit) MSL_ATOMIC(atomic_fetch_max_explicit)
MSL_ATOMIC(atomic_fetch_min_explicit)
#undef MSL_ATOMIC
}  // namespace metal

using metal::atomic_bool;
using metal::atomic_float;
using metal::atomic_int;
using metal::atomic_uint;
