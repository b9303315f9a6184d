// msl_cpu.h: the shim that lets Metal Shading Language kernels compile and run as C++ under ember's emulator.
// The emulator's rewriter (cpp/msl/rewrite.cpp) turns `device T*` into msl::dptr<T> (bounds-checked),
// threadgroup variables into group-shared storage and drops attributes; this header supplies the rest of
// what `#include <metal_stdlib>` gives a kernel: half/bfloat, vectors, metal:: math, simdgroup ops,
// barriers and atomics. (The static checks use metal/msl_static.h instead, which keeps address spaces.)
#pragma once
#define __METAL_EMULATOR__ 1
#include <stddef.h>
#include <stdint.h>

#include <exception>
#include <limits>
#include <type_traits>

#if __has_include("ember_dtype.h")
#include "ember_dtype.h"
#else
#include "../cpp/dtype.h"
#endif
#include "msl_abi.h"

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;

// ---------------------------------------------------------------------------------------------------
// half and bfloat: 16-bit storage, arithmetic through float with one rounding per operation (RNE,
// Metal's default), which equals the correctly rounded 16-bit result for + - * / sqrt.
#define MSL_SMALL_FLOAT(NAME, TO_F, FROM_F)                                                              \
  struct NAME {                                                                                         \
    uint16_t bits;                                                                                      \
    NAME() = default;                                                                                   \
    NAME(float f) : bits(FROM_F(f)) {}                                                                  \
    NAME(double d) : bits(FROM_F((float)d)) {}                                                          \
    template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>              \
    NAME(I i) : bits(FROM_F((float)i)) {}                                                               \
    operator float() const { return TO_F(bits); }                                                       \
    NAME operator-() const { NAME r; r.bits = (uint16_t)(bits ^ 0x8000u); return r; }                   \
    NAME operator+() const { return *this; }                                                            \
    template <class B> NAME& operator+=(B b) { *this = NAME((float)*this + (float)b); return *this; }   \
    template <class B> NAME& operator-=(B b) { *this = NAME((float)*this - (float)b); return *this; }   \
    template <class B> NAME& operator*=(B b) { *this = NAME((float)*this * (float)b); return *this; }   \
    template <class B> NAME& operator/=(B b) { *this = NAME((float)*this / (float)b); return *this; }   \
  };
#if defined(MSL_EMU_GPU_MATH)
// GPU-math mode converts with code independent of ember's (cpp/dtype.h), so a bug there cannot hide by
// being on both sides of a comparison: the compiler's _Float16 for half, and for bfloat a rounding
// done in double arithmetic (rint at the value's last bit, ties to even) rather than on bits.
namespace msl_gm {
inline float round_bits(float f, int p, int emin, float maxv) {
  if (f != f || __builtin_isinf(f) || f == 0.0f) return f;
  int e = 0;
  (void)__builtin_frexp((double)f, &e);          // |f| = m * 2^e, m in [0.5, 1)
  const int q = (e < emin ? emin : e) - p;        // the exponent of the last kept bit (subnormals: fixed)
  const double r = __builtin_ldexp(__builtin_rint(__builtin_ldexp((double)f, -q)), q);
  if (__builtin_fabs(r) > (double)maxv) return f < 0 ? -__builtin_inff() : __builtin_inff();
  return (float)r;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  if (f != f) {
    __builtin_memcpy(&u, &f, 4);
    return (uint16_t)(((u >> 16) & 0x8000u) | 0x7fc0u);
  }
  const float r = round_bits(f, 8, -125, 3.3895313892515355e38f);
  __builtin_memcpy(&u, &r, 4);
  return (uint16_t)(u >> 16);
}
inline float bf16_to_f32(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
#if defined(__FLT16_MAX__)
inline uint16_t f32_to_f16(float f) {
  const _Float16 h = (_Float16)f;
  uint16_t b;
  __builtin_memcpy(&b, &h, 2);
  return b;
}
inline float f16_to_f32(uint16_t b) {
  _Float16 h;
  __builtin_memcpy(&h, &b, 2);
  return (float)h;
}
#else
inline uint16_t f32_to_f16(float f) { return ::ember::f32_to_f16(f); }
inline float f16_to_f32(uint16_t b) { return ::ember::f16_to_f32(b); }
#endif
}  // namespace msl_gm
MSL_SMALL_FLOAT(half, ::msl_gm::f16_to_f32, ::msl_gm::f32_to_f16)
MSL_SMALL_FLOAT(bfloat, ::msl_gm::bf16_to_f32, ::msl_gm::f32_to_bf16)
#else
MSL_SMALL_FLOAT(half, ::ember::f16_to_f32, ::ember::f32_to_f16)
MSL_SMALL_FLOAT(bfloat, ::ember::bf16_to_f32, ::ember::f32_to_bf16)
#endif
#undef MSL_SMALL_FLOAT

namespace msl {
template <class T> struct is_small : std::false_type {};
template <> struct is_small<half> : std::true_type {};
template <> struct is_small<bfloat> : std::true_type {};
template <class T> struct is_num : std::integral_constant<bool, std::is_arithmetic<T>::value || is_small<T>::value> {};
// MSL's promotion: a 16-bit float with itself or an integer stays 16-bit; with float (or another
// 16-bit kind) it becomes float. Unsuffixed literals are float in MSL (the rewriter adds the f).
template <class A, class B, class = void> struct promote {};
template <class A> struct promote<A, A, typename std::enable_if<is_small<A>::value>::type> { using type = A; };
template <class A, class B>
struct promote<A, B, typename std::enable_if<is_small<A>::value && std::is_integral<B>::value>::type> { using type = A; };
template <class A, class B>
struct promote<A, B, typename std::enable_if<std::is_integral<A>::value && is_small<B>::value>::type> { using type = B; };
template <class A, class B>
struct promote<A, B, typename std::enable_if<(is_small<A>::value || is_small<B>::value) && !std::is_same<A, B>::value &&
                                             !std::is_integral<A>::value && !std::is_integral<B>::value &&
                                             is_num<A>::value && is_num<B>::value>::type> { using type = float; };
}  // namespace msl

#define MSL_SMALL_BINOP(OP)                                                                   \
  template <class A, class B, class R = typename ::msl::promote<A, B>::type>                  \
  inline R operator OP(A a, B b) { return R((float)a OP (float)b); }
MSL_SMALL_BINOP(+)
MSL_SMALL_BINOP(-)
MSL_SMALL_BINOP(*)
MSL_SMALL_BINOP(/)
#undef MSL_SMALL_BINOP
#define MSL_SMALL_CMP(OP)                                                                     \
  template <class A, class B, class = typename ::msl::promote<A, B>::type>                    \
  inline bool operator OP(A a, B b) { return (float)a OP (float)b; }
MSL_SMALL_CMP(==)
MSL_SMALL_CMP(!=)
MSL_SMALL_CMP(<)
MSL_SMALL_CMP(<=)
MSL_SMALL_CMP(>)
MSL_SMALL_CMP(>=)
#undef MSL_SMALL_CMP

// ---------------------------------------------------------------------------------------------------
// Vectors: vec<T, N> with .x .y .z .w (and .r .g .b .a); a swizzle such as .xy is rewritten to a call.
namespace metal {
template <class T, int N> struct vec;
}
namespace msl {
template <class T> struct is_vec : std::false_type {};
template <class T, int N> struct is_vec<metal::vec<T, N>> : std::true_type {};
template <class T> struct ncomp : std::integral_constant<int, 1> {};
template <class T, int N> struct ncomp<metal::vec<T, N>> : std::integral_constant<int, N> {};
template <class... A> struct total;
template <> struct total<> : std::integral_constant<int, 0> {};
template <class H, class... A> struct total<H, A...> : std::integral_constant<int, ncomp<H>::value + total<A...>::value> {};
template <class T, class S> inline void put(T* out, int& k, const S& s) {
  if constexpr (is_vec<S>::value) {
    for (int i = 0; i < ncomp<S>::value; ++i) out[k++] = T(s[i]);
  } else {
    out[k++] = T(s);
  }
}
}  // namespace msl

namespace metal {
template <class T, int N> struct vec_data;
template <class T> struct vec_data<T, 2> { union { T x; T r; }; union { T y; T g; }; };
template <class T> struct vec_data<T, 3> { union { T x; T r; }; union { T y; T g; }; union { T z; T b; }; };
template <class T> struct vec_data<T, 4> {
  union { T x; T r; };
  union { T y; T g; };
  union { T z; T b; };
  union { T w; T a; };
};
template <class T, int N> struct vec : vec_data<T, N> {
  using value_type = T;
  vec() = default;
  template <class S, typename std::enable_if<::msl::is_num<S>::value, int>::type = 0>
  vec(S s) { for (int i = 0; i < N; ++i) (*this)[i] = T(s); }
  template <class U, typename std::enable_if<!std::is_same<U, T>::value, int>::type = 0>
  explicit vec(const vec<U, N>& o) { for (int i = 0; i < N; ++i) (*this)[i] = T(o[i]); }
  template <class A0, class A1, class... A, typename std::enable_if<::msl::total<A0, A1, A...>::value == N, int>::type = 0>
  vec(const A0& a0, const A1& a1, const A&... a) {
    int k = 0;
    T* out = &(*this)[0];
    ::msl::put(out, k, a0);
    ::msl::put(out, k, a1);
    (::msl::put(out, k, a), ...);
  }
  T& operator[](int i) { return (&this->x)[i]; }
  const T& operator[](int i) const { return (&this->x)[i]; }
  template <int... I> vec<T, (int)sizeof...(I)> swz() const { return vec<T, (int)sizeof...(I)>((*this)[I]...); }
#define MSL_VEC_ASSIGN(OP)                                                         \
  template <class B> vec& operator OP##=(const B& b) { *this = *this OP b; return *this; }
  MSL_VEC_ASSIGN(+) MSL_VEC_ASSIGN(-) MSL_VEC_ASSIGN(*) MSL_VEC_ASSIGN(/)
#undef MSL_VEC_ASSIGN
  vec operator-() const { vec r; for (int i = 0; i < N; ++i) r[i] = -(*this)[i]; return r; }
};
}  // namespace metal

#define MSL_VEC_BINOP(OP)                                                                                 \
  template <class T, int N> inline metal::vec<T, N> operator OP(const metal::vec<T, N>& a, const metal::vec<T, N>& b) { \
    metal::vec<T, N> r;                                                                                   \
    for (int i = 0; i < N; ++i) r[i] = T(a[i] OP b[i]);                                                   \
    return r;                                                                                             \
  }                                                                                                       \
  template <class T, int N, class S, typename std::enable_if<::msl::is_num<S>::value, int>::type = 0>     \
  inline metal::vec<T, N> operator OP(const metal::vec<T, N>& a, S s) { return a OP metal::vec<T, N>(T(s)); } \
  template <class T, int N, class S, typename std::enable_if<::msl::is_num<S>::value, int>::type = 0>     \
  inline metal::vec<T, N> operator OP(S s, const metal::vec<T, N>& a) { return metal::vec<T, N>(T(s)) OP a; }
MSL_VEC_BINOP(+)
MSL_VEC_BINOP(-)
MSL_VEC_BINOP(*)
MSL_VEC_BINOP(/)
#undef MSL_VEC_BINOP
#define MSL_VEC_CMP(OP)                                                                                   \
  template <class T, int N>                                                                               \
  inline metal::vec<bool, N> operator OP(const metal::vec<T, N>& a, const metal::vec<T, N>& b) {          \
    metal::vec<bool, N> r;                                                                                \
    for (int i = 0; i < N; ++i) r[i] = a[i] OP b[i];                                                      \
    return r;                                                                                             \
  }
MSL_VEC_CMP(==)
MSL_VEC_CMP(!=)
MSL_VEC_CMP(<)
MSL_VEC_CMP(<=)
MSL_VEC_CMP(>)
MSL_VEC_CMP(>=)
#undef MSL_VEC_CMP

#define MSL_VEC_NAMES(T, P)            \
  typedef metal::vec<T, 2> P##2;       \
  typedef metal::vec<T, 3> P##3;       \
  typedef metal::vec<T, 4> P##4;
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

// ---------------------------------------------------------------------------------------------------
// Bounds-checked device pointers (emulation only): every access checks the byte range against the
// bound buffer and faults naming the buffer index and offset (the runtime adds the kernel's name).
namespace metal {
template <class T> struct atomic;
}
namespace msl {
inline const msl_abi::Api* api = nullptr;  // set when the runtime loads the module

// Faults leave the module through the runtime's Api::fault (a jump back to the group's scheduler), never
// as a C++ exception (msl_abi.h says why); messages are built here without the C++ library.
using msg = msl_abi::Msg;
[[noreturn]] inline void fault(uint32_t kind, const char* m) {
  api->fault(api->current(), kind, m);
  __builtin_trap();  // Api::fault never returns
}
[[noreturn]] __attribute__((noinline, cold)) inline void bounds_fault(uint32_t index, int64_t off, uint64_t n,
                                                                     uint64_t size) {
  msg m;
  m.s("out-of-bounds access to buffer(").u(index).s(") at byte offset ").i(off).s(" (").u(n);
  fault(msl_abi::kFaultIndex, m.s(" bytes; the buffer has ").u(size).s(")").b);
}

// Threadgroup arrays are checked like device memory: `threadgroup float s[N]` becomes a tg_arr (same
// layout) whose operator[] faults past the end; it converts to a plain pointer for everything else.
[[noreturn]] __attribute__((noinline, cold)) inline void tg_bounds_fault(int64_t i, uint64_t n) {
  msg m;
  m.s("out-of-bounds access to a threadgroup array at index ").i(i).s(" (it has ").u(n);
  fault(msl_abi::kFaultIndex, m.s(" elements)").b);
}
// The body of every kernel entry: whatever the kernel's own C++ throws is caught here, inside the
// module, and reported as a fault, so no exception ever reaches the runtime.
template <class F> inline void run_entry(F&& f) noexcept {
  msg m;
  m.s("the kernel threw a C++ exception");
  try {
    f();
    return;
  } catch (const std::exception& e) {
    m.s(": ").s(e.what());
  } catch (...) {
  }
  fault(msl_abi::kFaultValue, m.b);
}
template <class T, size_t N> struct tg_arr {
  T v[N];
  template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
  T& operator[](I i) {
    if (__builtin_expect((uint64_t)(int64_t)i >= N, 0)) tg_bounds_fault((int64_t)i, N);
    return v[i];
  }
  operator T*() const { return const_cast<T*>(v); }
};
template <class T> struct tgwrap { using type = T; };
template <class U, size_t N> struct tgwrap<U[N]> { using type = tg_arr<typename tgwrap<U>::type, N>; };
// Arrays of atomics stay plain: the atomic functions take their pointer by value.
template <class U, size_t N> struct tgwrap<metal::atomic<U>[N]> { using type = metal::atomic<U>[N]; };
template <class T> using tgwrap_t = typename tgwrap<T>::type;

template <class T> struct dptr {
  char* base = nullptr;
  int64_t off = 0;  // bytes from base
  uint64_t size = 0;
  uint32_t index = 0;
  dptr() = default;
  dptr(std::nullptr_t) {}
  dptr(char* b, int64_t o, uint64_t s, uint32_t i) : base(b), off(o), size(s), index(i) {}
  template <class U, typename std::enable_if<std::is_convertible<U*, T*>::value, int>::type = 0>
  dptr(const dptr<U>& o) : base(o.base), off(o.off), size(o.size), index(o.index) {}
  template <class U, typename std::enable_if<!std::is_convertible<U*, T*>::value, int>::type = 0>
  explicit dptr(const dptr<U>& o) : base(o.base), off(o.off), size(o.size), index(o.index) {}
  // A program-scope `constant` array handed to a `constant T*` parameter: its size is not known here,
  // so accesses through it are not checked. Only `const T*` qualifies (a threadgroup T* stays an error).
  template <class P, typename std::enable_if<std::is_same<P, const T*>::value, int>::type = 0>
  dptr(P p) : base(reinterpret_cast<char*>(const_cast<T*>(p))), off(0), size(~0ull >> 2), index(~0u) {}
  T* at(int64_t i) const {
    const int64_t o = off + i * (int64_t)sizeof(T);
    if (__builtin_expect(o < 0 || (uint64_t)o + sizeof(T) > size, 0)) bounds_fault(index, o, sizeof(T), size);
    return reinterpret_cast<T*>(base + o);
  }
  template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
  T& operator[](I i) const { return *at((int64_t)i); }
  T& operator*() const { return *at(0); }
  T* operator->() const { return at(0); }
  template <class I> dptr operator+(I i) const { return dptr(base, off + (int64_t)i * (int64_t)sizeof(T), size, index); }
  template <class I> dptr operator-(I i) const { return dptr(base, off - (int64_t)i * (int64_t)sizeof(T), size, index); }
  int64_t operator-(const dptr& o) const { return (off - o.off) / (int64_t)sizeof(T); }
  template <class I> dptr& operator+=(I i) { off += (int64_t)i * (int64_t)sizeof(T); return *this; }
  template <class I> dptr& operator-=(I i) { off -= (int64_t)i * (int64_t)sizeof(T); return *this; }
  dptr& operator++() { off += sizeof(T); return *this; }
  dptr& operator--() { off -= sizeof(T); return *this; }
  dptr operator++(int) { dptr r = *this; off += sizeof(T); return r; }
  dptr operator--(int) { dptr r = *this; off -= sizeof(T); return r; }
  bool operator==(const dptr& o) const { return base + off == o.base + o.off; }
  bool operator!=(const dptr& o) const { return !(*this == o); }
  bool operator<(const dptr& o) const { return base + off < o.base + o.off; }
  bool operator>(const dptr& o) const { return o < *this; }
  bool operator<=(const dptr& o) const { return !(o < *this); }
  bool operator>=(const dptr& o) const { return !(*this < o); }
  explicit operator bool() const { return base != nullptr; }
};
template <class T, class I> inline dptr<T> operator+(I i, const dptr<T>& p) { return p + i; }

// A pointer a kernel may hand to atomics: device (checked) or threadgroup/thread (plain).
template <class T> inline T* raw(const dptr<T>& p) { return p.at(0); }
template <class T> inline T* raw(T* p) { return p; }

// Argument binding, used by the wrappers the rewriter generates.
template <class T> inline dptr<T> bind_ptr(msl_abi::Thread* t, uint32_t n) {
  return dptr<T>(t->buffers[n].data, 0, t->buffers[n].size, n);
}
template <class T> inline T& bind_ref(msl_abi::Thread* t, uint32_t n) { return *reinterpret_cast<T*>(t->buffers[n].data); }
template <class T> inline T attr(const uint32_t* v) {
  if constexpr (is_vec<T>::value) {
    T r;
    for (int i = 0; i < ncomp<T>::value; ++i) r[i] = (typename T::value_type)v[i];
    return r;
  } else {
    return (T)v[0];
  }
}
// How the generated wrappers bind a parameter of declared type P to [[buffer(n)]].
template <class P> struct binder;
template <class T> struct binder<dptr<T>> {
  static constexpr uint32_t min_size = 0;
  static dptr<T> get(msl_abi::Thread* t, uint32_t n) { return bind_ptr<T>(t, n); }
};
template <class T> struct binder<const dptr<T>> : binder<dptr<T>> {};
template <class T> struct binder<T&> {
  static constexpr uint32_t min_size = sizeof(T);
  static T& get(msl_abi::Thread* t, uint32_t n) { return bind_ref<T>(t, n); }
};
// A kernel parameter `device T& x [[buffer(n)]]` of a scalar or atomic T: reads and writes go to the
// buffer, and `&x` is a checked pointer, so `(&x)[i]` is bounds-checked like any device pointer.
template <class T> struct dref {
  dptr<T> p;
  T& get() const { return *p.at(0); }
  operator T&() const { return get(); }
  dptr<T> operator&() const { return p; }
  dref& operator=(const dref& o) {
    get() = o.get();
    return *this;
  }
  template <class V> dref& operator=(const V& v) {
    get() = v;
    return *this;
  }
#define MSL_DREF_OP(OP) \
  template <class V> dref& operator OP(const V& v) { get() OP v; return *this; }
  MSL_DREF_OP(+=) MSL_DREF_OP(-=) MSL_DREF_OP(*=) MSL_DREF_OP(/=) MSL_DREF_OP(%=) MSL_DREF_OP(&=)
  MSL_DREF_OP(|=) MSL_DREF_OP(^=) MSL_DREF_OP(<<=) MSL_DREF_OP(>>=)
#undef MSL_DREF_OP
  T& operator++() const { return ++get(); }
  T& operator--() const { return --get(); }
  T operator++(int) const { return get()++; }
  T operator--(int) const { return get()--; }
};
template <class T> struct binder<dref<T>> {
  static constexpr uint32_t min_size = sizeof(T);
  static dref<T> get(msl_abi::Thread* t, uint32_t n) { return dref<T>{bind_ptr<T>(t, n)}; }
};
// `&x` of a kernel parameter `device T& x [[buffer(n)]]` or `constant T& x` (and `&x.member...`): the
// rewriter turns it into ref_in(n, &x[, &x.member...]), a checked pointer into the binding, so
// `(&x)[i]` is bounds-checked whatever T is (a scalar's dref already gives one).
template <class T> inline dptr<T> ref_in(uint32_t, const dptr<T>& p) { return p; }
template <class T> inline dptr<std::remove_const_t<T>> ref_in(uint32_t n, const void* base, T* p) {
  using U = std::remove_const_t<T>;
  const msl_abi::Buffer& b = api->current()->buffers[n];
  const char* c = static_cast<const char*>(base);
  if (c >= b.data && c < b.data + b.size) return dptr<U>(b.data, (const char*)p - b.data, b.size, n);
  // not the binding: a local that shadows the parameter's name
  return dptr<U>(reinterpret_cast<char*>(const_cast<U*>(p)), 0, ~0ull >> 2, ~0u);
}
template <class T> inline dptr<std::remove_const_t<T>> ref_in(uint32_t n, T* p) { return ref_in(n, p, p); }
template <class T> struct dref_target : std::integral_constant<bool, std::is_arithmetic<T>::value> {};
template <> struct dref_target<half> : std::true_type {};
template <> struct dref_target<bfloat> : std::true_type {};
template <class U> struct dref_target<metal::atomic<U>> : std::true_type {};
// Structs and vectors stay plain references (their members must stay reachable with `.`).
template <class T> using dref_t = typename std::conditional<dref_target<T>::value, dref<T>, T&>::type;
inline const uint32_t simd_width_value[3] = {msl_abi::kSimdWidth, 1, 1};
template <class T> inline T* tg_decl(uint32_t site) {
  return static_cast<T*>(api->tg_alloc(api->current(), site, sizeof(T), alignof(T)));
}
template <class T> inline T tg_param(msl_abi::Thread* t, uint32_t n) {
  uint64_t size = 0;
  return static_cast<T>(api->tg_param(t, n, &size));
}
}  // namespace msl

// ---------------------------------------------------------------------------------------------------
// metal:: math. float versions call the compiler's builtins (no <cmath> overloads in the way); half and
// bfloat go through float and round once; vectors apply the scalar function per component.
namespace metal {
template <class T> struct numeric_limits : std::numeric_limits<T> {};
#define MSL_LIMITS(T, MAXB, MINB, LOWB, EPSB, INFB, NANB)                    \
  template <> struct numeric_limits<T> {                                     \
    static constexpr bool is_specialized = true;                             \
    static T mk(uint16_t b) { T r; r.bits = b; return r; }                  \
    static T max() { return mk(MAXB); }                                      \
    static T min() { return mk(MINB); }                                      \
    static T lowest() { return mk(LOWB); }                                   \
    static T epsilon() { return mk(EPSB); }                                  \
    static T infinity() { return mk(INFB); }                                 \
    static T quiet_NaN() { return mk(NANB); }                                \
  };
MSL_LIMITS(half, 0x7bff, 0x0400, 0xfbff, 0x1400, 0x7c00, 0x7e00)
MSL_LIMITS(bfloat, 0x7f7f, 0x0080, 0xff7f, 0x3c00, 0x7f80, 0x7fc0)
#undef MSL_LIMITS

#define MSL_UNARY(NAME, FEXPR)                                                            \
  inline float NAME(float x) { return FEXPR; }                                           \
  inline half NAME(half h) { return half(NAME((float)h)); }                              \
  inline bfloat NAME(bfloat h) { return bfloat(NAME((float)h)); }                        \
  template <class T, int N> inline vec<T, N> NAME(const vec<T, N>& v) {                  \
    vec<T, N> r;                                                                         \
    for (int i = 0; i < N; ++i) r[i] = NAME(v[i]);                                       \
    return r;                                                                            \
  }
#if defined(MSL_EMU_GPU_MATH)
}  // namespace metal
namespace msl_gm {
// GPU-math mode: a transcendental returns any float within the MSL specification's bound for it with
// fast math off (1 ulp for each function here): one of the floats on either side of the exact value
// (the double result), or of its neighbours when the exact value is a float, picked by a hash of the
// arguments (so exp2(3.0f) may give 8 - 2^-21, as a GPU may).
inline uint64_t key(uint32_t fn, float a, float b) {
  uint32_t ua, ub;
  __builtin_memcpy(&ua, &a, 4);
  __builtin_memcpy(&ub, &b, 4);
  uint64_t x = ((uint64_t)ua << 32 | ub) ^ ((uint64_t)fn * 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// Special cases stay exact, as the specification's edge-case rules have them: a zero, infinite or NaN
// argument (exp2(0) = 1, atan(inf) rounded), and results equal to the argument (sin(x) = x for tiny x).
inline float within_1ulp(double exact, uint64_t k, float x = 1.0f, float y = 1.0f, bool keep_exact = false) {
  const float f = (float)exact;
  if (!__builtin_isfinite(f) || exact == 0.0 || f == x) return f;
  if (keep_exact && (double)f == exact) return f;  // log2 at powers of two (ember relies on it)
  if (x == 0.0f || y == 0.0f || !__builtin_isfinite(x) || !__builtin_isfinite(y)) return f;
  const float down = __builtin_nextafterf(f, -__builtin_inff()), up = __builtin_nextafterf(f, __builtin_inff());
  float r;
  if ((double)f == exact) r = k % 3 == 0 ? down : (k % 3 == 1 ? f : up);
  else if ((double)f < exact) r = k % 2 ? f : up;
  else r = k % 2 ? f : down;
  return __builtin_isfinite(r) ? r : f;
}
// sin, cos and tanh stay within [-1, 1], as any implementation's do.
inline float bounded(uint32_t fn, float r) {
  if (fn == 7 || fn == 8 || fn == 15) return r > 1.0f ? 1.0f : (r < -1.0f ? -1.0f : r);
  return r;
}
}  // namespace msl_gm
namespace metal {
#define MSL_TRANS1(NAME, ID, FEXPR, DEXPR) \
  MSL_UNARY(NAME, ::msl_gm::bounded(ID, ::msl_gm::within_1ulp([](double d) { return DEXPR; }((double)x), \
                                                                ::msl_gm::key(ID, x, 0.0f), x, 1.0f, ID == 5)))
#else
#define MSL_TRANS1(NAME, ID, FEXPR, DEXPR) MSL_UNARY(NAME, FEXPR)
#endif
MSL_TRANS1(exp, 1, __builtin_expf(x), __builtin_exp(d))
MSL_TRANS1(exp2, 2, __builtin_exp2f(x), __builtin_exp2(d))
MSL_TRANS1(exp10, 3, __builtin_powf(10.0f, x), __builtin_pow(10.0, d))
MSL_TRANS1(log, 4, __builtin_logf(x), __builtin_log(d))
MSL_TRANS1(log2, 5, __builtin_log2f(x), __builtin_log2(d))
MSL_TRANS1(log10, 6, __builtin_log10f(x), __builtin_log10(d))
MSL_TRANS1(sin, 7, __builtin_sinf(x), __builtin_sin(d))
MSL_TRANS1(cos, 8, __builtin_cosf(x), __builtin_cos(d))
MSL_TRANS1(tan, 9, __builtin_tanf(x), __builtin_tan(d))
MSL_TRANS1(asin, 10, __builtin_asinf(x), __builtin_asin(d))
MSL_TRANS1(acos, 11, __builtin_acosf(x), __builtin_acos(d))
MSL_TRANS1(atan, 12, __builtin_atanf(x), __builtin_atan(d))
MSL_TRANS1(sinh, 13, __builtin_sinhf(x), __builtin_sinh(d))
MSL_TRANS1(cosh, 14, __builtin_coshf(x), __builtin_cosh(d))
MSL_TRANS1(tanh, 15, __builtin_tanhf(x), __builtin_tanh(d))
MSL_TRANS1(asinh, 16, __builtin_asinhf(x), __builtin_asinh(d))
MSL_TRANS1(acosh, 17, __builtin_acoshf(x), __builtin_acosh(d))
MSL_TRANS1(atanh, 18, __builtin_atanhf(x), __builtin_atanh(d))
#undef MSL_TRANS1
MSL_UNARY(sqrt, __builtin_sqrtf(x))
MSL_UNARY(rsqrt, 1.0f / __builtin_sqrtf(x))
MSL_UNARY(fabs, __builtin_fabsf(x))
MSL_UNARY(floor, __builtin_floorf(x))
MSL_UNARY(ceil, __builtin_ceilf(x))
MSL_UNARY(round, __builtin_roundf(x))
MSL_UNARY(rint, __builtin_rintf(x))
MSL_UNARY(trunc, __builtin_truncf(x))
MSL_UNARY(fract, x - __builtin_floorf(x))
MSL_UNARY(sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x == x ? x * 0.0f : x)))
#undef MSL_UNARY
inline float abs(float x) { return __builtin_fabsf(x); }
inline half abs(half h) { half r; r.bits = (uint16_t)(h.bits & 0x7fffu); return r; }
inline bfloat abs(bfloat h) { bfloat r; r.bits = (uint16_t)(h.bits & 0x7fffu); return r; }
template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
inline I abs(I x) { return x < 0 ? I(-x) : x; }
template <class T, int N> inline vec<T, N> abs(const vec<T, N>& v) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = abs(v[i]);
  return r;
}

#define MSL_BINARY(NAME, FEXPR)                                                               \
  inline float NAME(float x, float y) { return FEXPR; }                                      \
  inline half NAME(half a, half b) { return half(NAME((float)a, (float)b)); }                \
  inline bfloat NAME(bfloat a, bfloat b) { return bfloat(NAME((float)a, (float)b)); }        \
  template <class T, int N> inline vec<T, N> NAME(const vec<T, N>& a, const vec<T, N>& b) {  \
    vec<T, N> r;                                                                             \
    for (int i = 0; i < N; ++i) r[i] = NAME(a[i], b[i]);                                     \
    return r;                                                                                \
  }
#if defined(MSL_EMU_GPU_MATH)
MSL_BINARY(pow, x == 1.0f ? 1.0f : ::msl_gm::within_1ulp(__builtin_pow((double)x, (double)y), ::msl_gm::key(19, x, y), x, y))
MSL_BINARY(powr, x == 1.0f ? 1.0f : ::msl_gm::within_1ulp(__builtin_pow((double)x, (double)y), ::msl_gm::key(19, x, y), x, y))
#else
MSL_BINARY(pow, __builtin_powf(x, y))
MSL_BINARY(powr, __builtin_powf(x, y))
#endif
MSL_BINARY(fmax, __builtin_fmaxf(x, y))
MSL_BINARY(fmin, __builtin_fminf(x, y))
MSL_BINARY(fmod, __builtin_fmodf(x, y))
#if defined(MSL_EMU_GPU_MATH)
MSL_BINARY(atan2, ::msl_gm::within_1ulp(__builtin_atan2((double)x, (double)y), ::msl_gm::key(20, x, y), x, y))
#else
MSL_BINARY(atan2, __builtin_atan2f(x, y))
#endif
MSL_BINARY(copysign, __builtin_copysignf(x, y))
MSL_BINARY(step, y < x ? 0.0f : 1.0f)
#undef MSL_BINARY
// max/min: fmax semantics for floats (a NaN operand gives the other), plain compare for integers.
inline float max(float x, float y) { return __builtin_fmaxf(x, y); }
inline float min(float x, float y) { return __builtin_fminf(x, y); }
inline half max(half a, half b) { return half(__builtin_fmaxf(a, b)); }
inline half min(half a, half b) { return half(__builtin_fminf(a, b)); }
inline bfloat max(bfloat a, bfloat b) { return bfloat(__builtin_fmaxf(a, b)); }
inline bfloat min(bfloat a, bfloat b) { return bfloat(__builtin_fminf(a, b)); }
template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
inline I max(I a, I b) { return a < b ? b : a; }
template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
inline I min(I a, I b) { return b < a ? b : a; }
template <class T, int N> inline vec<T, N> max(const vec<T, N>& a, const vec<T, N>& b) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = max(a[i], b[i]);
  return r;
}
template <class T, int N> inline vec<T, N> min(const vec<T, N>& a, const vec<T, N>& b) {
  vec<T, N> r;
  for (int i = 0; i < N; ++i) r[i] = min(a[i], b[i]);
  return r;
}
template <class T> inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
inline float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
inline half fma(half a, half b, half c) { return half(__builtin_fmaf(a, b, c)); }
template <class T> inline T mix(T x, T y, T a) { return x + (y - x) * a; }
template <class T> inline T select(T a, T b, bool c) { return c ? b : a; }
inline bool isnan(float x) { return x != x; }
inline bool isinf(float x) { return __builtin_isinf(x); }
inline bool isfinite(float x) { return __builtin_isfinite(x); }
inline bool signbit(float x) { return __builtin_signbit(x); }
template <int N> inline bool all(const vec<bool, N>& v) { for (int i = 0; i < N; ++i) if (!v[i]) return false; return true; }
template <int N> inline bool any(const vec<bool, N>& v) { for (int i = 0; i < N; ++i) if (v[i]) return true; return false; }
inline bool all(bool b) { return b; }
inline bool any(bool b) { return b; }
template <class T, int N> inline T dot(const vec<T, N>& a, const vec<T, N>& b) {
  T s = T(0);
  for (int i = 0; i < N; ++i) s += a[i] * b[i];
  return s;
}
template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
inline I popcount(I x) { return (I)__builtin_popcountll((unsigned long long)(typename std::make_unsigned<I>::type)x); }
template <class To, class From> inline To as_type(const From& f) {
  static_assert(sizeof(To) == sizeof(From), "as_type needs types of one size");
  To t;
  __builtin_memcpy(&t, &f, sizeof(To));
  return t;
}
namespace precise {
using metal::cos; using metal::exp; using metal::exp2; using metal::log; using metal::log2; using metal::pow;
using metal::rsqrt; using metal::sin; using metal::sqrt; using metal::tanh; using metal::tan; using metal::powr;
}  // namespace precise
namespace fast {
using metal::cos; using metal::exp; using metal::exp2; using metal::log; using metal::log2; using metal::pow;
using metal::rsqrt; using metal::sin; using metal::sqrt; using metal::tanh; using metal::tan; using metal::powr;
}  // namespace fast

// ---------------------------------------------------------------------------------------------------
// Synchronisation: barriers and simdgroup ops hand control to the runtime's scheduler (a fiber switch).
enum class mem_flags : uint32_t {
  mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4, mem_threadgroup_imageblock = 8,
  mem_object_data = 16
};
inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags((uint32_t)a | (uint32_t)b); }

inline void threadgroup_barrier(mem_flags) { ::msl::api->barrier(::msl::api->current()); }
namespace simdops {
enum : uint32_t { Sync, Sum, Prod, Max, Min, And, Or, Xor, PreIncSum, PreExcSum, PreIncProd, PreExcProd, Shuffle,
                  ShuffleDown, ShuffleUp, ShuffleXor, Broadcast, BroadcastFirst, Ballot, All, Any, IsFirst };
}
// Hands x to the simdgroup and waits for its active lanes; returns their mask and this lane's slots.
template <class T> inline uint64_t simd_exchange(const T& x, uint32_t op, char** slots, uint32_t* lane) {
  static_assert(sizeof(T) <= msl_abi::kSimdSlotBytes, "simd op value too large");
  msl_abi::Thread* t = ::msl::api->current();
  char* s = ::msl::api->simd_begin(t);
  __builtin_memcpy(s + t->lane * msl_abi::kSimdSlotBytes, &x, sizeof(T));
  const uint64_t mask = ::msl::api->simd_end(t, op);
  *slots = s;
  *lane = t->lane;
  return mask;
}
template <class T> inline T simd_slot(const char* s, uint32_t l) {
  T v;
  __builtin_memcpy(&v, s + l * msl_abi::kSimdSlotBytes, sizeof(T));
  return v;
}
inline void simdgroup_barrier(mem_flags) {
  char* s;
  uint32_t l;
  simd_exchange(0, simdops::Sync, &s, &l);
}
// Reductions in lane order, so results are deterministic.
#define MSL_SIMD_REDUCE(NAME, OP, EXPR)                                                     \
  template <class T> inline T NAME(T x) {                                                  \
    char* s;                                                                               \
    uint32_t me;                                                                           \
    const uint64_t m = simd_exchange(x, simdops::OP, &s, &me);                             \
    bool first = true;                                                                     \
    T acc = x;                                                                             \
    for (uint32_t l = 0; l < msl_abi::kSimdWidth; ++l) {                                   \
      if (!((m >> l) & 1)) continue;                                                       \
      const T v = simd_slot<T>(s, l);                                                      \
      if (first) { acc = v; first = false; } else { acc = EXPR; }                          \
    }                                                                                      \
    return acc;                                                                            \
  }
MSL_SIMD_REDUCE(simd_sum, Sum, acc + v)
MSL_SIMD_REDUCE(simd_product, Prod, acc * v)
MSL_SIMD_REDUCE(simd_max, Max, max(acc, v))
MSL_SIMD_REDUCE(simd_min, Min, min(acc, v))
MSL_SIMD_REDUCE(simd_and, And, acc & v)
MSL_SIMD_REDUCE(simd_or, Or, acc | v)
MSL_SIMD_REDUCE(simd_xor, Xor, acc ^ v)
#undef MSL_SIMD_REDUCE
#define MSL_SIMD_PREFIX(NAME, OP, INCL, COMB, ID)                                           \
  template <class T> inline T NAME(T x) {                                                  \
    char* s;                                                                               \
    uint32_t me;                                                                           \
    const uint64_t m = simd_exchange(x, simdops::OP, &s, &me);                             \
    T acc = T(ID);                                                                         \
    for (uint32_t l = 0; l < me + (INCL); ++l)                                             \
      if ((m >> l) & 1) acc = COMB;                                                        \
    return acc;                                                                            \
  }
MSL_SIMD_PREFIX(simd_prefix_inclusive_sum, PreIncSum, 1, acc + simd_slot<T>(s, l), 0)
MSL_SIMD_PREFIX(simd_prefix_exclusive_sum, PreExcSum, 0, acc + simd_slot<T>(s, l), 0)
MSL_SIMD_PREFIX(simd_prefix_inclusive_product, PreIncProd, 1, acc * simd_slot<T>(s, l), 1)
MSL_SIMD_PREFIX(simd_prefix_exclusive_product, PreExcProd, 0, acc * simd_slot<T>(s, l), 1)
#undef MSL_SIMD_PREFIX
// A lane reading an inactive lane gets that lane's slot, which the runtime fills with 0xff bytes.
template <class T> inline T simd_shuffle(T x, ushort lane) {
  char* s;
  uint32_t me;
  simd_exchange(x, simdops::Shuffle, &s, &me);
  return simd_slot<T>(s, lane % msl_abi::kSimdWidth);
}
template <class T> inline T simd_shuffle_down(T x, ushort delta) {
  char* s;
  uint32_t me;
  simd_exchange(x, simdops::ShuffleDown, &s, &me);
  return me + delta < msl_abi::kSimdWidth ? simd_slot<T>(s, me + delta) : x;
}
template <class T> inline T simd_shuffle_up(T x, ushort delta) {
  char* s;
  uint32_t me;
  simd_exchange(x, simdops::ShuffleUp, &s, &me);
  return me >= delta ? simd_slot<T>(s, me - delta) : x;
}
template <class T> inline T simd_shuffle_xor(T x, ushort mask) {
  char* s;
  uint32_t me;
  simd_exchange(x, simdops::ShuffleXor, &s, &me);
  return simd_slot<T>(s, (me ^ mask) % msl_abi::kSimdWidth);
}
template <class T> inline T simd_broadcast(T x, ushort lane) {
  char* s;
  uint32_t me;
  simd_exchange(x, simdops::Broadcast, &s, &me);
  return simd_slot<T>(s, lane % msl_abi::kSimdWidth);
}
template <class T> inline T simd_broadcast_first(T x) {
  char* s;
  uint32_t me;
  const uint64_t m = simd_exchange(x, simdops::BroadcastFirst, &s, &me);
  return simd_slot<T>(s, (uint32_t)__builtin_ctzll(m));
}
struct simd_vote {
  using vote_t = uint64_t;
  vote_t v;
  explicit operator vote_t() const { return v; }
  bool all() const { return v == mask; }
  bool any() const { return v != 0; }
  vote_t mask;
};
inline simd_vote simd_ballot(bool b) {
  char* s;
  uint32_t me;
  const uint64_t m = simd_exchange(b, simdops::Ballot, &s, &me);
  uint64_t v = 0;
  for (uint32_t l = 0; l < msl_abi::kSimdWidth; ++l)
    if (((m >> l) & 1) && simd_slot<bool>(s, l)) v |= 1ull << l;
  return simd_vote{v, m};
}
inline bool simd_all(bool b) { return simd_ballot(b).all(); }
inline bool simd_any(bool b) { return simd_ballot(b).any(); }
inline simd_vote simd_active_threads_mask() { return simd_ballot(true); }
inline bool simd_is_first() {
  char* s;
  uint32_t me;
  const uint64_t m = simd_exchange(0, simdops::IsFirst, &s, &me);
  return me == (uint32_t)__builtin_ctzll(m);
}

// ---------------------------------------------------------------------------------------------------
// Atomics: Metal's relaxed atomics on device or threadgroup memory, as GCC atomic builtins (threadgroups
// run on several OS threads at once).
enum memory_order { memory_order_relaxed, memory_order_seq_cst };
template <class T> struct atomic {
  T v;
  using value_type = T;
};
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;
typedef atomic<bool> atomic_bool;
typedef atomic<ulong> atomic_ulong;
typedef atomic<long> atomic_long;

template <class P> inline auto* atomic_ptr(P p) { return &::msl::raw(p)->v; }
template <class P, class V> inline void atomic_store_explicit(P obj, V val, memory_order) {
  auto* q = atomic_ptr(obj);
  std::remove_reference_t<decltype(*q)> v = val;
  __atomic_store(q, &v, __ATOMIC_SEQ_CST);
}
template <class P> inline auto atomic_load_explicit(P obj, memory_order) {
  auto* q = atomic_ptr(obj);
  std::remove_reference_t<decltype(*q)> v;
  __atomic_load(q, &v, __ATOMIC_SEQ_CST);
  return v;
}
template <class P, class V> inline auto atomic_exchange_explicit(P obj, V val, memory_order) {
  auto* q = atomic_ptr(obj);
  std::remove_reference_t<decltype(*q)> v = val, old;
  __atomic_exchange(q, &v, &old, __ATOMIC_SEQ_CST);
  return old;
}
template <class P, class E, class V>
inline bool atomic_compare_exchange_weak_explicit(P obj, E* expected, V desired, memory_order, memory_order) {
  auto* q = atomic_ptr(obj);
  std::remove_reference_t<decltype(*q)> d = desired;
  return __atomic_compare_exchange(q, expected, &d, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}
// Read-modify-write through a compare-and-swap loop (the generic builtins also take floats).
template <class P, class F> inline auto atomic_rmw(P obj, F f) {
  auto* q = atomic_ptr(obj);
  using T = std::remove_reference_t<decltype(*q)>;
  T old, next;
  __atomic_load(q, &old, __ATOMIC_SEQ_CST);
  do {
    next = (T)f(old);
  } while (!__atomic_compare_exchange(q, &old, &next, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  return old;
}
#define MSL_ATOMIC_RMW(NAME, EXPR)                                                   \
  template <class P, class V> inline auto NAME(P obj, V val, memory_order) {         \
    return atomic_rmw(obj, [&](auto old) { return EXPR; });                          \
  }
MSL_ATOMIC_RMW(atomic_fetch_add_explicit, old + val)
MSL_ATOMIC_RMW(atomic_fetch_sub_explicit, old - val)
MSL_ATOMIC_RMW(atomic_fetch_and_explicit, old & val)
MSL_ATOMIC_RMW(atomic_fetch_or_explicit, old | val)
MSL_ATOMIC_RMW(atomic_fetch_xor_explicit, old ^ val)
MSL_ATOMIC_RMW(atomic_fetch_max_explicit, old < (decltype(old))val ? (decltype(old))val : old)
MSL_ATOMIC_RMW(atomic_fetch_min_explicit, (decltype(old))val < old ? (decltype(old))val : old)
#undef MSL_ATOMIC_RMW
}  // namespace metal

using metal::atomic_bool;
using metal::atomic_float;
using metal::atomic_int;
using metal::atomic_long;
using metal::atomic_uint;
using metal::atomic_ulong;
