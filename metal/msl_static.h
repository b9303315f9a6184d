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

// Math functions are declared for the types MSL 3.1 has them for, as plain overloads the way its headers
// give them: a call with another type (exp(bfloat), exp(int), max(half, float)) finds none, or several.
#define MSL_FLOATS(M, A) M(float, A) M(float2, A) M(float3, A) M(float4, A) M(half, A) M(half2, A) M(half3, A) M(half4, A)
#define MSL_INTS_OF(M, A, T) M(T, A) M(T##2, A) M(T##3, A) M(T##4, A)
#define MSL_INTS(M, A)                                                                                 \
  MSL_INTS_OF(M, A, char) MSL_INTS_OF(M, A, uchar) MSL_INTS_OF(M, A, short) MSL_INTS_OF(M, A, ushort) \
  MSL_INTS_OF(M, A, int) MSL_INTS_OF(M, A, uint) MSL_INTS_OF(M, A, long) MSL_INTS_OF(M, A, ulong)
// bfloat converts to float silently, so its overloads are there, deleted: exp(bfloat) is an error.
#define MSL_BFLOATS(M, A) M(bfloat, A) M(bfloat2, A) M(bfloat3, A) M(bfloat4, A)
#define MSL_F1(T, NAME) T NAME(T);
#define MSL_F2(T, NAME) T NAME(T, T);
#define MSL_F3(T, NAME) T NAME(T, T, T);
#define MSL_X1(T, NAME) T NAME(T) = delete;
#define MSL_X2(T, NAME) T NAME(T, T) = delete;
#define MSL_X3(T, NAME) T NAME(T, T, T) = delete;
#define MSL_FLOAT1(NAME) MSL_FLOATS(MSL_F1, NAME) MSL_BFLOATS(MSL_X1, NAME)
#define MSL_FLOAT2(NAME) MSL_FLOATS(MSL_F2, NAME) MSL_BFLOATS(MSL_X2, NAME)
MSL_FLOAT1(exp) MSL_FLOAT1(exp2) MSL_FLOAT1(exp10) MSL_FLOAT1(log) MSL_FLOAT1(log2) MSL_FLOAT1(log10) MSL_FLOAT1(sin)
MSL_FLOAT1(cos) MSL_FLOAT1(tan) MSL_FLOAT1(asin) MSL_FLOAT1(acos) MSL_FLOAT1(atan) MSL_FLOAT1(sinh) MSL_FLOAT1(cosh)
MSL_FLOAT1(tanh) MSL_FLOAT1(asinh) MSL_FLOAT1(acosh) MSL_FLOAT1(atanh) MSL_FLOAT1(sqrt) MSL_FLOAT1(rsqrt)
MSL_FLOAT1(fabs) MSL_FLOAT1(floor) MSL_FLOAT1(ceil) MSL_FLOAT1(round) MSL_FLOAT1(rint) MSL_FLOAT1(trunc)
MSL_FLOAT1(fract) MSL_FLOAT1(sign)
MSL_FLOAT2(pow) MSL_FLOAT2(powr) MSL_FLOAT2(fmax) MSL_FLOAT2(fmin) MSL_FLOAT2(fmod) MSL_FLOAT2(atan2)
MSL_FLOAT2(copysign) MSL_FLOAT2(step)
MSL_FLOATS(MSL_F3, fma) MSL_FLOATS(MSL_F3, mix) MSL_BFLOATS(MSL_X3, fma) MSL_BFLOATS(MSL_X3, mix)
// abs, max, min and clamp take integers too; popcount only integers
MSL_FLOAT1(abs) MSL_INTS(MSL_F1, abs) MSL_FLOAT2(max) MSL_INTS(MSL_F2, max)
MSL_FLOAT2(min) MSL_INTS(MSL_F2, min) MSL_FLOATS(MSL_F3, clamp) MSL_BFLOATS(MSL_X3, clamp) MSL_INTS(MSL_F3, clamp)
MSL_INTS(MSL_F1, popcount)
#define MSL_PRED(T, NAME) bool NAME(T);
#define MSL_PREDV(T, NAME) bool2 NAME(T##2); bool3 NAME(T##3); bool4 NAME(T##4);
#define MSL_PREDICATE(NAME) MSL_PRED(float, NAME) MSL_PRED(half, NAME) MSL_PREDV(float, NAME) MSL_PREDV(half, NAME)
MSL_PREDICATE(isnan) MSL_PREDICATE(isinf) MSL_PREDICATE(isfinite) MSL_PREDICATE(signbit)
#undef MSL_PRED
#undef MSL_PREDV
#undef MSL_PREDICATE
#undef MSL_FLOAT1
#undef MSL_FLOAT2
template <class T> T select(T, T, bool);
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
// simdgroup functions: floats and integers (not bfloat in MSL 3.1); the bitwise ones integers only.
#define MSL_S2(T, NAME) T NAME(T, ushort);
#define MSL_XS2(T, NAME) T NAME(T, ushort) = delete;
#define MSL_SIMD1(NAME) MSL_FLOATS(MSL_F1, NAME) MSL_INTS(MSL_F1, NAME) MSL_BFLOATS(MSL_X1, NAME)
#define MSL_SIMD2(NAME) MSL_FLOATS(MSL_S2, NAME) MSL_INTS(MSL_S2, NAME) MSL_BFLOATS(MSL_XS2, NAME)
MSL_SIMD1(simd_sum) MSL_SIMD1(simd_product) MSL_SIMD1(simd_max) MSL_SIMD1(simd_min)
MSL_INTS(MSL_F1, simd_and) MSL_INTS(MSL_F1, simd_or) MSL_INTS(MSL_F1, simd_xor)
MSL_SIMD1(simd_prefix_inclusive_sum) MSL_SIMD1(simd_prefix_exclusive_sum) MSL_SIMD1(simd_prefix_inclusive_product)
MSL_SIMD1(simd_prefix_exclusive_product) MSL_SIMD1(simd_broadcast_first)
MSL_SIMD2(simd_shuffle) MSL_SIMD2(simd_shuffle_down) MSL_SIMD2(simd_shuffle_up) MSL_SIMD2(simd_shuffle_xor)
MSL_SIMD2(simd_broadcast)
#undef MSL_SIMD1
#undef MSL_SIMD2
#undef MSL_S2
#undef MSL_XS2
#undef MSL_X1
#undef MSL_X2
#undef MSL_X3
#undef MSL_BFLOATS
#undef MSL_F1
#undef MSL_F2
#undef MSL_F3
#undef MSL_FLOATS
#undef MSL_INTS_OF
#undef MSL_INTS
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
