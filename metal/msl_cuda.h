// msl_cuda.h: what `#include <metal_stdlib>` gives a kernel, for ember's .metal kernels translated to CUDA C++
// (cpp/msl/rewrite_cuda.cpp; docs/design/cuda-kernels.md). Prepended to every translation; compiles under NVRTC
// (no headers at all: its built-in device functions only) and under ember's CUDA emulator (after cuda_emu.h).
// Everything is in namespace emk, where the translated kernels live, so MSL's names (half, float2, exp, min)
// hide CUDA's and the C library's instead of overloading them.
#if defined(__CUDA_EMULATOR__)
#define EMK_EMULATED 1
#endif

namespace emk {
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;
typedef double em_double;  // for .metal lines only CUDA compiles (a .metal file may not say double: Metal lint)

// ---- a few traits (NVRTC has no <type_traits>) ------------------------------------------------------------
template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <class A, class B> struct is_same { static constexpr bool value = false; };
template <class A> struct is_same<A, A> { static constexpr bool value = true; };
template <bool C, class A, class B> struct pick { typedef A type; };
template <class A, class B> struct pick<false, A, B> { typedef B type; };
template <class T> struct is_int { static constexpr bool value = false; };
#define EMK_INT(T) template <> struct is_int<T> { static constexpr bool value = true; };
EMK_INT(bool) EMK_INT(char) EMK_INT(signed char) EMK_INT(unsigned char) EMK_INT(short) EMK_INT(unsigned short)
EMK_INT(int) EMK_INT(unsigned int) EMK_INT(long) EMK_INT(unsigned long) EMK_INT(long long)
EMK_INT(unsigned long long)
#undef EMK_INT
template <class T> struct is_arith { static constexpr bool value = is_int<T>::value; };
template <> struct is_arith<float> { static constexpr bool value = true; };
template <> struct is_arith<double> { static constexpr bool value = true; };

template <class To, class From> inline To bit_cast(const From& f) {
  static_assert(sizeof(To) == sizeof(From), "as_type needs types of one size");
  To t;
  memcpy(&t, &f, sizeof(To));
  return t;
}

// ---- half and bfloat ---------------------------------------------------------------------------------------
// 16-bit storage, arithmetic through float with one rounding (to nearest even) per operation. NVRTC has no
// cuda_fp16.h (the nvidia-cuda-nvrtc wheel ships no headers): the conversions are PTX cvt instructions
// (cvt.rn.bf16.f32 needs sm_80, ember's lowest target); the emulator uses ember's own (cpp/dtype.h).
#if defined(EMK_EMULATED)
inline unsigned short f32_to_f16(float f) { return ::ember::f32_to_f16(f); }
inline float f16_to_f32(unsigned short h) { return ::ember::f16_to_f32(h); }
inline unsigned short f32_to_bf16(float f) { return ::ember::f32_to_bf16(f); }
#else
inline unsigned short f32_to_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
inline float f16_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
inline unsigned short f32_to_bf16(float f) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
#endif
inline float bf16_to_f32(unsigned short b) { return bit_cast<float>((unsigned)b << 16); }
// double -> float rounded to odd (as cpp/dtype.h): rounding that once more to 16 bits is the double's one rounding.
inline float f64_to_f32_odd(double d) {
  float f = (float)d;
  if ((double)f != d && d == d) {
    unsigned b = bit_cast<unsigned>(f);
    if (::fabs((double)f) > ::fabs(d)) b -= 1;
    f = bit_cast<float>(b | 1u);
  }
  return f;
}

#define EMK_SMALL_FLOAT(NAME, TO_F, FROM_F)                                                                 \
  struct NAME {                                                                                             \
    unsigned short bits;                                                                                    \
    NAME() = default;                                                                                       \
    NAME(float f) : bits(FROM_F(f)) {}                                                                      \
    NAME(double d) : bits(FROM_F(f64_to_f32_odd(d))) {}                                                     \
    template <class I, typename enable_if<is_int<I>::value, int>::type = 0> NAME(I i) : bits(FROM_F((float)i)) {} \
    operator float() const { return TO_F(bits); }                                                           \
    NAME operator-() const { NAME r; r.bits = (unsigned short)(bits ^ 0x8000u); return r; }                 \
    NAME operator+() const { return *this; }                                                                \
    template <class B> NAME& operator+=(B b) { *this = NAME((float)*this + (float)b); return *this; }       \
    template <class B> NAME& operator-=(B b) { *this = NAME((float)*this - (float)b); return *this; }       \
    template <class B> NAME& operator*=(B b) { *this = NAME((float)*this * (float)b); return *this; }       \
    template <class B> NAME& operator/=(B b) { *this = NAME((float)*this / (float)b); return *this; }       \
  };
EMK_SMALL_FLOAT(half, f16_to_f32, f32_to_f16)
EMK_SMALL_FLOAT(bfloat, bf16_to_f32, f32_to_bf16)
#undef EMK_SMALL_FLOAT
template <class T> struct is_small { static constexpr bool value = false; };
template <> struct is_small<half> { static constexpr bool value = true; };
template <> struct is_small<bfloat> { static constexpr bool value = true; };
template <class T> struct is_num { static constexpr bool value = is_arith<T>::value || is_small<T>::value; };
// MSL's promotion: a 16-bit float with itself or an integer stays 16-bit; with float (or the other 16-bit kind)
// it becomes float (unsuffixed literals are float in MSL: the translation adds the f).
template <class A, class B, class = void> struct promote {};
template <class A> struct promote<A, A, typename enable_if<is_small<A>::value>::type> { typedef A type; };
template <class A, class B>
struct promote<A, B, typename enable_if<is_small<A>::value && is_int<B>::value>::type> { typedef A type; };
template <class A, class B>
struct promote<A, B, typename enable_if<is_int<A>::value && is_small<B>::value>::type> { typedef B type; };
// (with double, in the float64 variants, double: CUDA has it)
template <class A, class B>
struct promote<A, B, typename enable_if<(is_small<A>::value || is_small<B>::value) && !is_same<A, B>::value &&
                                        !is_int<A>::value && !is_int<B>::value && is_num<A>::value &&
                                        is_num<B>::value>::type> {
  typedef typename pick<is_same<A, double>::value || is_same<B, double>::value, double, float>::type type;
};
template <class R> struct calc_t { typedef float type; };  // the type a 16-bit operation is computed in
template <> struct calc_t<double> { typedef double type; };
#define EMK_SMALL_BINOP(OP)                                                   \
  template <class A, class B, class R = typename promote<A, B>::type>         \
  inline R operator OP(A a, B b) {                                            \
    typedef typename calc_t<R>::type C;                                       \
    return R((C)a OP (C)b);                                                   \
  }
EMK_SMALL_BINOP(+) EMK_SMALL_BINOP(-) EMK_SMALL_BINOP(*) EMK_SMALL_BINOP(/)
#undef EMK_SMALL_BINOP
#define EMK_SMALL_CMP(OP)                                                     \
  template <class A, class B, class = typename promote<A, B>::type>           \
  inline bool operator OP(A a, B b) { return (typename calc_t<typename promote<A, B>::type>::type)a OP  \
                                              (typename calc_t<typename promote<A, B>::type>::type)b; }
EMK_SMALL_CMP(==) EMK_SMALL_CMP(!=) EMK_SMALL_CMP(<) EMK_SMALL_CMP(<=) EMK_SMALL_CMP(>) EMK_SMALL_CMP(>=)
#undef EMK_SMALL_CMP

// ---- vectors: vec<T, N> with .x .y .z .w (a swizzle such as .xy is rewritten to swz<0, 1>()) --------------
template <class T, int N> struct vec;
template <class T> struct ncomp { static constexpr int value = 1; };
template <class T, int N> struct ncomp<vec<T, N>> { static constexpr int value = N; };
template <class... A> struct total { static constexpr int value = 0; };
template <class H, class... A> struct total<H, A...> {
  static constexpr int value = ncomp<H>::value + total<A...>::value;
};
template <class T, int N> struct vec_data;
template <class T> struct vec_data<T, 2> { T x, y; };
template <class T> struct vec_data<T, 3> { T x, y, z; };
template <class T> struct vec_data<T, 4> { T x, y, z, w; };
template <class T, int N> struct vec : vec_data<T, N> {
  typedef T value_type;
  vec() = default;
  template <class S, typename enable_if<is_num<S>::value, int>::type = 0> vec(S s) {
    for (int i = 0; i < N; ++i) (*this)[i] = T(s);
  }
  template <class U, typename enable_if<!is_same<U, T>::value, int>::type = 0> explicit vec(const vec<U, N>& o) {
    for (int i = 0; i < N; ++i) (*this)[i] = T(o[i]);
  }
  template <class A0, class A1, class... A, typename enable_if<total<A0, A1, A...>::value == N, int>::type = 0>
  vec(const A0& a0, const A1& a1, const A&... a) {
    int k = 0;
    put(k, a0);
    put(k, a1);
    int unused[] = {0, (put(k, a), 0)...};
    (void)unused;
  }
  template <class S> void put(int& k, const S& s) { (*this)[k++] = T(s); }
  template <class U, int M> void put(int& k, const vec<U, M>& s) {
    for (int i = 0; i < M; ++i) (*this)[k++] = T(s[i]);
  }
  T& operator[](int i) { return (&this->x)[i]; }
  const T& operator[](int i) const { return (&this->x)[i]; }
  template <int... I> vec<T, (int)sizeof...(I)> swz() const { return vec<T, (int)sizeof...(I)>((*this)[I]...); }
  template <class B> vec& operator+=(const B& b) { return *this = *this + b; }
  template <class B> vec& operator-=(const B& b) { return *this = *this - b; }
  template <class B> vec& operator*=(const B& b) { return *this = *this * b; }
  template <class B> vec& operator/=(const B& b) { return *this = *this / b; }
  vec operator-() const {
    vec r;
    for (int i = 0; i < N; ++i) r[i] = -(*this)[i];
    return r;
  }
};
#define EMK_VEC_BINOP(OP)                                                                                   \
  template <class T, int N> inline vec<T, N> operator OP(const vec<T, N>& a, const vec<T, N>& b) {          \
    vec<T, N> r;                                                                                            \
    for (int i = 0; i < N; ++i) r[i] = T(a[i] OP b[i]);                                                     \
    return r;                                                                                               \
  }                                                                                                         \
  template <class T, int N, class S, typename enable_if<is_num<S>::value, int>::type = 0>                   \
  inline vec<T, N> operator OP(const vec<T, N>& a, S s) { return a OP vec<T, N>(T(s)); }                    \
  template <class T, int N, class S, typename enable_if<is_num<S>::value, int>::type = 0>                   \
  inline vec<T, N> operator OP(S s, const vec<T, N>& a) { return vec<T, N>(T(s)) OP a; }
EMK_VEC_BINOP(+) EMK_VEC_BINOP(-) EMK_VEC_BINOP(*) EMK_VEC_BINOP(/) EMK_VEC_BINOP(%) EMK_VEC_BINOP(&)
EMK_VEC_BINOP(|) EMK_VEC_BINOP(^) EMK_VEC_BINOP(<<) EMK_VEC_BINOP(>>)
#undef EMK_VEC_BINOP
#define EMK_VEC_CMP(OP)                                                                                     \
  template <class T, int N> inline vec<bool, N> operator OP(const vec<T, N>& a, const vec<T, N>& b) {       \
    vec<bool, N> r;                                                                                         \
    for (int i = 0; i < N; ++i) r[i] = a[i] OP b[i];                                                        \
    return r;                                                                                               \
  }
EMK_VEC_CMP(==) EMK_VEC_CMP(!=) EMK_VEC_CMP(<) EMK_VEC_CMP(<=) EMK_VEC_CMP(>) EMK_VEC_CMP(>=)
#undef EMK_VEC_CMP
#define EMK_VEC_NAMES(T, P) typedef vec<T, 2> P##2; typedef vec<T, 3> P##3; typedef vec<T, 4> P##4;
EMK_VEC_NAMES(float, float) EMK_VEC_NAMES(double, double) EMK_VEC_NAMES(half, half) EMK_VEC_NAMES(bfloat, bfloat) EMK_VEC_NAMES(int, int)
EMK_VEC_NAMES(uint, uint) EMK_VEC_NAMES(short, short) EMK_VEC_NAMES(ushort, ushort) EMK_VEC_NAMES(char, char)
EMK_VEC_NAMES(uchar, uchar) EMK_VEC_NAMES(long, long) EMK_VEC_NAMES(ulong, ulong) EMK_VEC_NAMES(bool, bool)
#undef EMK_VEC_NAMES

// ---- metal:: --------------------------------------------------------------------------------------------
namespace metal {
template <class T> struct numeric_limits;
#define EMK_LIMITS(T, BITS, MAXB, MINB, LOWB, EPSB, INFB, NANB)                             \
  template <> struct numeric_limits<T> {                                                   \
    static constexpr bool is_specialized = true;                                           \
    static T mk(BITS b) { return bit_cast<T>(b); }                                         \
    static T max() { return mk(MAXB); }                                                    \
    static T min() { return mk(MINB); }                                                    \
    static T lowest() { return mk(LOWB); }                                                 \
    static T epsilon() { return mk(EPSB); }                                                \
    static T infinity() { return mk(INFB); }                                               \
    static T quiet_NaN() { return mk(NANB); }                                              \
  };
EMK_LIMITS(float, uint, 0x7f7fffffu, 0x00800000u, 0xff7fffffu, 0x34000000u, 0x7f800000u, 0x7fc00000u)
EMK_LIMITS(double, ulong, 0x7feffffffffffffful, 0x0010000000000000ul, 0xffeffffffffffffful, 0x3cb0000000000000ul,
           0x7ff0000000000000ul, 0x7ff8000000000000ul)
EMK_LIMITS(half, ushort, (ushort)0x7bff, (ushort)0x0400, (ushort)0xfbff, (ushort)0x1400, (ushort)0x7c00, (ushort)0x7e00)
EMK_LIMITS(bfloat, ushort, (ushort)0x7f7f, (ushort)0x0080, (ushort)0xff7f, (ushort)0x3c00, (ushort)0x7f80, (ushort)0x7fc0)
#undef EMK_LIMITS
#define EMK_ILIMITS(T, LO, HI)                                          \
  template <> struct numeric_limits<T> {                               \
    static constexpr bool is_specialized = true;                       \
    static constexpr T max() { return HI; }                            \
    static constexpr T min() { return LO; }                            \
    static constexpr T lowest() { return LO; }                         \
  };
EMK_ILIMITS(int, (int)0x80000000, 0x7fffffff)
EMK_ILIMITS(uint, 0u, 0xffffffffu)
EMK_ILIMITS(long, (long)0x8000000000000000ull, 0x7fffffffffffffffl)
EMK_ILIMITS(ulong, 0ul, 0xfffffffffffffffful)
EMK_ILIMITS(short, (short)-32768, (short)32767)
EMK_ILIMITS(ushort, (ushort)0, (ushort)65535)
EMK_ILIMITS(char, (char)-128, (char)127)
EMK_ILIMITS(uchar, (uchar)0, (uchar)255)
EMK_ILIMITS(bool, false, true)
#undef EMK_ILIMITS

// Each function in float (half and bfloat through it) and, for the float64 variants, in double.
#define EMK_UNARY(NAME, FEXPR, DEXPR)                                                         \
  inline float NAME(float x) { return FEXPR; }                                               \
  inline double NAME(double x) { return DEXPR; }                                             \
  inline half NAME(half h) { return half(NAME((float)h)); }                                  \
  inline bfloat NAME(bfloat h) { return bfloat(NAME((float)h)); }                            \
  template <class T, int N> inline vec<T, N> NAME(const vec<T, N>& v) {                      \
    vec<T, N> r;                                                                             \
    for (int i = 0; i < N; ++i) r[i] = NAME(v[i]);                                           \
    return r;                                                                                \
  }
#define EMK_UNARY2(NAME, F) EMK_UNARY(NAME, ::F##f(x), ::F(x))
EMK_UNARY2(exp, exp) EMK_UNARY2(exp2, exp2) EMK_UNARY2(exp10, exp10) EMK_UNARY2(log, log) EMK_UNARY2(log2, log2)
EMK_UNARY2(log10, log10) EMK_UNARY2(sin, sin) EMK_UNARY2(cos, cos) EMK_UNARY2(tan, tan) EMK_UNARY2(asin, asin)
EMK_UNARY2(acos, acos) EMK_UNARY2(atan, atan) EMK_UNARY2(sinh, sinh) EMK_UNARY2(cosh, cosh) EMK_UNARY2(tanh, tanh)
EMK_UNARY2(asinh, asinh) EMK_UNARY2(acosh, acosh) EMK_UNARY2(atanh, atanh) EMK_UNARY2(sqrt, sqrt)
EMK_UNARY2(fabs, fabs) EMK_UNARY2(floor, floor) EMK_UNARY2(ceil, ceil) EMK_UNARY2(round, round)
EMK_UNARY2(rint, rint) EMK_UNARY2(trunc, trunc)
EMK_UNARY(rsqrt, 1.0f / ::sqrtf(x), 1.0 / ::sqrt(x))
EMK_UNARY(fract, x - ::floorf(x), x - ::floor(x))
EMK_UNARY(sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x == x ? x * 0.0f : x)),
          x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : (x == x ? x * 0.0 : x)))
#undef EMK_UNARY2
#undef EMK_UNARY
inline float abs(float x) { return ::fabsf(x); }
inline double abs(double x) { return ::fabs(x); }
inline half abs(half h) { half r; r.bits = (ushort)(h.bits & 0x7fffu); return r; }
inline bfloat abs(bfloat h) { bfloat r; r.bits = (ushort)(h.bits & 0x7fffu); return r; }
template <class I, typename enable_if<is_int<I>::value, int>::type = 0> inline I abs(I x) { return x < 0 ? I(-x) : x; }
#define EMK_BINARY(NAME, FEXPR, DEXPR)                                                            \
  inline float NAME(float x, float y) { return FEXPR; }                                          \
  inline double NAME(double x, double y) { return DEXPR; }                                       \
  inline half NAME(half a, half b) { return half(NAME((float)a, (float)b)); }                    \
  inline bfloat NAME(bfloat a, bfloat b) { return bfloat(NAME((float)a, (float)b)); }            \
  template <class T, int N> inline vec<T, N> NAME(const vec<T, N>& a, const vec<T, N>& b) {      \
    vec<T, N> r;                                                                                 \
    for (int i = 0; i < N; ++i) r[i] = NAME(a[i], b[i]);                                         \
    return r;                                                                                    \
  }
#define EMK_BINARY2(NAME, F) EMK_BINARY(NAME, ::F##f(x, y), ::F(x, y))
EMK_BINARY(pow, ::powf(x, y), ::pow(x, y)) EMK_BINARY(powr, ::powf(x, y), ::pow(x, y)) EMK_BINARY2(fmax, fmax)
EMK_BINARY2(fmin, fmin) EMK_BINARY2(fmod, fmod) EMK_BINARY2(atan2, atan2) EMK_BINARY2(copysign, copysign)
EMK_BINARY(step, y < x ? 0.0f : 1.0f, y < x ? 0.0 : 1.0)
EMK_BINARY(max, ::fmaxf(x, y), ::fmax(x, y)) EMK_BINARY(min, ::fminf(x, y), ::fmin(x, y))
#undef EMK_BINARY2
#undef EMK_BINARY
template <class I, typename enable_if<is_int<I>::value, int>::type = 0> inline I max(I a, I b) { return a < b ? b : a; }
template <class I, typename enable_if<is_int<I>::value, int>::type = 0> inline I min(I a, I b) { return b < a ? b : a; }
template <class T> inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
inline float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
inline half fma(half a, half b, half c) { return half(::fmaf(a, b, c)); }
inline double fma(double a, double b, double c) { return ::fma(a, b, c); }
template <class T> inline T mix(T x, T y, T a) { return x + (y - x) * a; }
template <class T> inline T select(T a, T b, bool c) { return c ? b : a; }
inline bool isnan(float x) { return x != x; }
inline bool isinf(float x) { return (bit_cast<uint>(x) & 0x7fffffffu) == 0x7f800000u; }
inline bool isfinite(float x) { return (bit_cast<uint>(x) & 0x7f800000u) != 0x7f800000u; }
inline bool signbit(float x) { return (bit_cast<uint>(x) >> 31) != 0; }
inline bool isnan(double x) { return x != x; }
inline bool isinf(double x) { return (bit_cast<ulong>(x) & 0x7ffffffffffffffful) == 0x7ff0000000000000ul; }
inline bool isfinite(double x) { return (bit_cast<ulong>(x) & 0x7ff0000000000000ul) != 0x7ff0000000000000ul; }
inline bool signbit(double x) { return (bit_cast<ulong>(x) >> 63) != 0; }
inline bool isnan(half x) { return isnan((float)x); }
inline bool isinf(half x) { return isinf((float)x); }
template <int N> inline bool all(const vec<bool, N>& v) {
  for (int i = 0; i < N; ++i)
    if (!v[i]) return false;
  return true;
}
template <int N> inline bool any(const vec<bool, N>& v) {
  for (int i = 0; i < N; ++i)
    if (v[i]) return true;
  return false;
}
inline bool all(bool b) { return b; }
inline bool any(bool b) { return b; }
template <class T, int N> inline T dot(const vec<T, N>& a, const vec<T, N>& b) {
  T s = T(0);
  for (int i = 0; i < N; ++i) s += a[i] * b[i];
  return s;
}
inline uint popcount(uint x) { return (uint)__popc(x); }
inline ulong popcount(ulong x) { return (ulong)__popcll((unsigned long long)x); }
inline uint clz(uint x) { return (uint)__clz((int)x); }
inline ulong clz(ulong x) { return (ulong)__clzll((long long)x); }
template <class To, class From> inline To as_type(const From& f) { return bit_cast<To>(f); }
namespace precise {
using metal::cos; using metal::exp; using metal::exp2; using metal::log; using metal::log2; using metal::pow;
using metal::rsqrt; using metal::sin; using metal::sqrt; using metal::tanh; using metal::tan; using metal::powr;
}  // namespace precise
namespace fast {
using metal::cos; using metal::exp; using metal::exp2; using metal::log; using metal::log2; using metal::pow;
using metal::rsqrt; using metal::sin; using metal::sqrt; using metal::tanh; using metal::tan; using metal::powr;
}  // namespace fast

// ---- barriers (threadgroup_barrier is a macro below, so the emulator sees the kernel's line) ----------------
enum class mem_flags : unsigned { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags((unsigned)a | (unsigned)b); }

// ---- simdgroup = warp --------------------------------------------------------------------------------------
// MSL's simd ops act on the simdgroup's active threads: the mask is __activemask() (the lanes that exist and
// reached the call). A full warp reduces by butterfly shuffles; a partial one lane by lane (lane order).
inline uint em_lane() {
  return (threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y) & 31u;
}
// Any value of up to 64 bytes through 32-bit shuffles (NVRTC's __shfl_*_sync take only scalars).
#define EMK_SHFL(NAME, INTRINSIC, ARG)                                                   \
  template <class T> inline T NAME(uint mask, T v, ARG) {                               \
    uint w[(sizeof(T) + 3) / 4] = {};                                                   \
    memcpy(w, &v, sizeof(T));                                                           \
    for (uint i = 0; i < (sizeof(T) + 3) / 4; ++i) w[i] = INTRINSIC(mask, w[i], a);     \
    memcpy(&v, w, sizeof(T));                                                           \
    return v;                                                                           \
  }
EMK_SHFL(em_shfl, __shfl_sync, int a)
EMK_SHFL(em_shfl_up, __shfl_up_sync, uint a)
EMK_SHFL(em_shfl_down, __shfl_down_sync, uint a)
EMK_SHFL(em_shfl_xor, __shfl_xor_sync, int a)
#undef EMK_SHFL
#define EMK_SIMD_REDUCE(NAME, EXPR)                                           \
  template <class T> inline T NAME(T x) {                                    \
    const uint m = __activemask();                                           \
    if (m == 0xffffffffu) {                                                  \
      for (int o = 16; o > 0; o >>= 1) {                                     \
        const T v = em_shfl_xor(m, x, o), acc = x;                           \
        x = EXPR;                                                            \
      }                                                                      \
      return x;                                                              \
    }                                                                        \
    bool first = true;                                                       \
    T r = x;                                                                 \
    for (int l = 0; l < 32; ++l) {                                           \
      if (!((m >> l) & 1u)) continue;                                        \
      const T v = em_shfl(m, x, l), acc = r;                                 \
      r = first ? v : (EXPR);                                                \
      first = false;                                                         \
    }                                                                        \
    return r;                                                                \
  }
EMK_SIMD_REDUCE(simd_sum, acc + v)
EMK_SIMD_REDUCE(simd_product, acc * v)
EMK_SIMD_REDUCE(simd_max, max(acc, v))
EMK_SIMD_REDUCE(simd_min, min(acc, v))
EMK_SIMD_REDUCE(simd_and, acc & v)
EMK_SIMD_REDUCE(simd_or, acc | v)
EMK_SIMD_REDUCE(simd_xor, acc ^ v)
#undef EMK_SIMD_REDUCE
#define EMK_SIMD_PREFIX(NAME, INCL, COMB, ID)                                 \
  template <class T> inline T NAME(T x) {                                    \
    const uint m = __activemask(), me = em_lane();                           \
    T acc = T(ID);                                                           \
    for (uint l = 0; l < 32; ++l) {                                          \
      if (!((m >> l) & 1u)) continue;                                        \
      const T v = em_shfl(m, x, (int)l);                                     \
      if (l < me + (INCL)) acc = COMB;                                       \
    }                                                                        \
    return acc;                                                              \
  }
EMK_SIMD_PREFIX(simd_prefix_inclusive_sum, 1, acc + v, 0)
EMK_SIMD_PREFIX(simd_prefix_exclusive_sum, 0, acc + v, 0)
EMK_SIMD_PREFIX(simd_prefix_inclusive_product, 1, acc * v, 1)
EMK_SIMD_PREFIX(simd_prefix_exclusive_product, 0, acc * v, 1)
#undef EMK_SIMD_PREFIX
template <class T> inline T simd_shuffle(T x, ushort lane) { return em_shfl(__activemask(), x, (int)(lane & 31u)); }
template <class T> inline T simd_broadcast(T x, ushort lane) { return em_shfl(__activemask(), x, (int)(lane & 31u)); }
template <class T> inline T simd_shuffle_down(T x, ushort d) { return em_shfl_down(__activemask(), x, (uint)d); }
template <class T> inline T simd_shuffle_up(T x, ushort d) { return em_shfl_up(__activemask(), x, (uint)d); }
template <class T> inline T simd_shuffle_xor(T x, ushort m) { return em_shfl_xor(__activemask(), x, (int)(m & 31u)); }
template <class T> inline T simd_broadcast_first(T x) {
  const uint m = __activemask();
  return em_shfl(m, x, __ffs((int)m) - 1);
}
inline bool simd_all(bool b) { return __all_sync(__activemask(), b) != 0; }
inline bool simd_any(bool b) { return __any_sync(__activemask(), b) != 0; }
inline bool simd_is_first() { return em_lane() == (uint)(__ffs((int)__activemask()) - 1); }

// ---- atomics (Metal's relaxed atomics on device or threadgroup memory) -------------------------------------
enum memory_order { memory_order_relaxed, memory_order_seq_cst };
template <class T> struct atomic {
  T v;
  typedef T value_type;
};
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;
typedef atomic<bool> atomic_bool;
typedef atomic<ulong> atomic_ulong;
typedef atomic<long> atomic_long;
template <class T> inline T* em_atomic_word(atomic<T>* p) { return &p->v; }
inline unsigned long long* em_ull(ulong* p) { return (unsigned long long*)p; }
template <class T> inline T atomic_load_explicit(atomic<T>* p, memory_order) { return *(volatile T*)&p->v; }
template <class T, class V> inline void atomic_store_explicit(atomic<T>* p, V v, memory_order) {
  atomicExch(&p->v, (T)v);
}
inline void atomic_store_explicit(atomic<ulong>* p, ulong v, memory_order) { atomicExch(em_ull(&p->v), v); }
template <class T, class V> inline T atomic_exchange_explicit(atomic<T>* p, V v, memory_order) {
  return atomicExch(&p->v, (T)v);
}
template <class T, class V> inline T atomic_fetch_add_explicit(atomic<T>* p, V v, memory_order) {
  return atomicAdd(&p->v, (T)v);
}
template <class T, class V> inline T atomic_fetch_sub_explicit(atomic<T>* p, V v, memory_order) {
  return atomicSub(&p->v, (T)v);
}
template <class T, class V> inline T atomic_fetch_and_explicit(atomic<T>* p, V v, memory_order) {
  return atomicAnd(&p->v, (T)v);
}
template <class T, class V> inline T atomic_fetch_or_explicit(atomic<T>* p, V v, memory_order) {
  return atomicOr(&p->v, (T)v);
}
template <class T, class V> inline T atomic_fetch_xor_explicit(atomic<T>* p, V v, memory_order) {
  return atomicXor(&p->v, (T)v);
}
template <class T, class V> inline T atomic_fetch_max_explicit(atomic<T>* p, V v, memory_order) {
  return atomicMax(&p->v, (T)v);
}
template <class T, class V> inline T atomic_fetch_min_explicit(atomic<T>* p, V v, memory_order) {
  return atomicMin(&p->v, (T)v);
}
template <class T, class E, class V>
inline bool atomic_compare_exchange_weak_explicit(atomic<T>* p, E* expected, V desired, memory_order, memory_order) {
  const T old = atomicCAS(&p->v, (T)*expected, (T)desired);
  const bool ok = old == (T)*expected;
  *expected = old;
  return ok;
}
}  // namespace metal
using namespace metal;

// ---- the entries' thread positions (the launch contract, cpp/cuda/kernels.h) -------------------------------
struct em_pos {
  uint3 tpig, tpitg, tgpig, tptg, dtptg, tpg, tgpg;
  uint3 tiitg, lane, simd_id, simds, width;  // scalars, in .x
};
inline uint3 em_u3(uint x, uint y, uint z) { return uint3(x, y, z); }
// g: the grid in threads; o: this launch's first group; s: the dispatch's group size. An edge group is a launch
// of its own with the smaller block (cpp/cuda/kernels.h), so every thread is in the grid and blockDim is the
// group's real size, as Metal's partial groups are: barriers see whole groups.
inline em_pos em_position(uint gx, uint gy, uint gz, uint ox, uint oy, uint oz, uint sx, uint sy, uint sz) {
  em_pos p;
  p.tpitg = em_u3(threadIdx.x, threadIdx.y, threadIdx.z);
  p.tgpig = em_u3(blockIdx.x + ox, blockIdx.y + oy, blockIdx.z + oz);
  p.dtptg = em_u3(sx, sy, sz);
  p.tptg = em_u3(blockDim.x, blockDim.y, blockDim.z);
  p.tpg = em_u3(gx, gy, gz);
  p.tgpg = em_u3((gx + sx - 1) / sx, (gy + sy - 1) / sy, (gz + sz - 1) / sz);
  p.tpig = p.tgpig * p.dtptg + p.tpitg;
  // Linear indices over the group's real size, as Metal numbers a partial group's threads (lanes, simdgroups).
  const uint linear = p.tpitg.x + p.tpitg.y * p.tptg.x + p.tpitg.z * p.tptg.x * p.tptg.y;
  const uint count = p.tptg.x * p.tptg.y * p.tptg.z;
  p.tiitg = uint3(linear);
  p.lane = uint3(linear & 31u);
  p.simd_id = uint3(linear >> 5);
  p.simds = uint3((count + 31u) / 32u);
  p.width = uint3(32u);
  return p;
}
template <class T> struct em_attr_t {
  static T get(const uint3& v) { return T(v.x); }
};
template <class U> struct em_attr_t<vec<U, 2>> {
  static vec<U, 2> get(const uint3& v) { return vec<U, 2>(U(v.x), U(v.y)); }
};
template <class U> struct em_attr_t<vec<U, 3>> {
  static vec<U, 3> get(const uint3& v) { return vec<U, 3>(U(v.x), U(v.y), U(v.z)); }
};
template <class T> inline T em_attr(const uint3& v) { return em_attr_t<T>::get(v); }
}  // namespace emk

#define threadgroup_barrier(flags) __syncthreads()
#define simdgroup_barrier(flags) __syncwarp(__activemask())
