// DType: the element types ember stores, their sizes, f16/bf16 <-> f32 conversions and the dispatch macro.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

// Conversions are forced inline: they are used inside per-ISA kernels, and an out-of-line copy
// compiled for AVX-512 must never be picked by the linker for a baseline caller.
#if defined(__GNUC__)
#define EMBER_INLINE inline __attribute__((always_inline))
#else
#define EMBER_INLINE inline
#endif

namespace ember {

// I32 and Bool are appended so that the earlier codes (and every table indexed by them) keep their values.
enum class DType : uint8_t { F32 = 0, F16 = 1, BF16 = 2, F64 = 3, I64 = 4, U32 = 5, U8 = 6, I32 = 7, Bool = 8 };
constexpr int kNumDTypes = 9;

inline size_t itemsize(DType dt) {
  switch (dt) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::F64: return 8;
    case DType::I64: return 8;
    case DType::U32: return 4;
    case DType::U8: return 1;
    case DType::I32: return 4;
    case DType::Bool: return 1;
  }
  return 0;
}
inline bool is_float(DType dt) { return dt <= DType::F64; }
inline const char* dtype_name(DType dt) {
  static const char* names[] = {"float32", "float16", "bfloat16", "float64", "int64", "uint32", "uint8", "int32", "bool"};
  return names[static_cast<int>(dt)];
}

// Half types are plain 16-bit containers; arithmetic always goes through float.
struct f16 { uint16_t bits; };
struct bf16 { uint16_t bits; };

EMBER_INLINE uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
EMBER_INLINE float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

EMBER_INLINE float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return bits_f32(sign);
    // subnormal: value = man * 2^-24, exact in float
    float v = (float)man * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

// Round-to-nearest-even, bit-exact with numpy's float16 cast.
EMBER_INLINE uint16_t f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? (0x7e00 | ((ax >> 13) & 0x3ff)) : 0x7c00);
  if (ax >= 0x477ff000u) return sign | 0x7c00;  // rounds to >= 65520 -> inf
  if (ax < 0x38800000u) {                        // below the smallest normal half: subnormal or zero
    // Adding 0.5 (as float) aligns the mantissa so hardware rounding gives RNE on the half grid.
    float v = bits_f32(ax) + 0.5f;
    return sign | (uint16_t)(f32_bits(v) - 0x3f000000u);
  }
  uint32_t mant_odd = (ax >> 13) & 1;
  ax += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return sign | (uint16_t)(ax >> 13);
}

EMBER_INLINE float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }
EMBER_INLINE uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

// The type arithmetic happens in: float for halves, the type itself otherwise.
template <typename T> struct Acc { using type = T; };
template <> struct Acc<f16> { using type = float; };
template <> struct Acc<bf16> { using type = float; };

template <typename T> EMBER_INLINE typename Acc<T>::type load(const T& v) { return v; }
template <> EMBER_INLINE float load<f16>(const f16& v) { return f16_to_f32(v.bits); }
template <> EMBER_INLINE float load<bf16>(const bf16& v) { return bf16_to_f32(v.bits); }

template <typename T> EMBER_INLINE T store(typename Acc<T>::type v) { return v; }
template <> EMBER_INLINE f16 store<f16>(float v) { return f16{f32_to_f16(v)}; }
template <> EMBER_INLINE bf16 store<bf16>(float v) { return bf16{f32_to_bf16(v)}; }

// double -> f32 rounded *to odd*: the sticky bit survives, so rounding the result once more to a
// format at least two bits narrower (f16, bf16) gives the double's single, correct rounding.
EMBER_INLINE float f64_to_f32_odd(double d) {
  float f = (float)d;
  if ((double)f != d && d == d) {
    uint32_t b = f32_bits(f);
    if (std::fabs((double)f) > std::fabs(d)) b -= 1;  // step the magnitude back toward zero: truncation
    f = bits_f32(b | 1u);
  }
  return f;
}
EMBER_INLINE uint16_t f64_to_f16(double d) { return f32_to_f16(f64_to_f32_odd(d)); }
EMBER_INLINE uint16_t f64_to_bf16(double d) { return f32_to_bf16(f64_to_f32_odd(d)); }

// Generic value conversion used by casts (through the wider type's arithmetic).
template <typename To, typename From> EMBER_INLINE To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return load<From>(v) != 0;  // NaN != 0: NaN casts to true, as in numpy and torch
  } else if constexpr (std::is_same_v<To, f16> && std::is_same_v<From, double>) {
    return f16{f64_to_f16(v)};
  } else if constexpr (std::is_same_v<To, bf16> && std::is_same_v<From, double>) {
    return bf16{f64_to_bf16(v)};
  } else if constexpr (std::is_integral_v<To> && !std::is_integral_v<From>) {
    // float -> int truncates toward zero and wraps into To like numpy on x86; NaN and values beyond
    // 64 bits give 0 instead of undefined behaviour
    const double d = (double)load<From>(v);
    if (!(d == d) || d <= -9.3e18 || d >= 1.8e19) return To(0);
    return d >= 9.2e18 ? (To)(uint64_t)d : (To)(int64_t)d;
  } else {
    return store<To>(static_cast<typename Acc<To>::type>(load<From>(v)));
  }
}

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<f16> { static constexpr DType value = DType::F16; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::BF16; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::U32; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };

}  // namespace ember

// EMBER_DISPATCH(dt, T, body): runs body with T bound to the C++ type of dt.
#define EMBER_DISPATCH_CASE(E, CT, ...) \
  case ::ember::DType::E: {             \
    using T = CT;                       \
    __VA_ARGS__;                        \
    break;                              \
  }
#define EMBER_DISPATCH_FLOAT_CASES(...)                      \
  EMBER_DISPATCH_CASE(F32, float, __VA_ARGS__)               \
  EMBER_DISPATCH_CASE(F16, ::ember::f16, __VA_ARGS__)        \
  EMBER_DISPATCH_CASE(BF16, ::ember::bf16, __VA_ARGS__)      \
  EMBER_DISPATCH_CASE(F64, double, __VA_ARGS__)
// Every dtype, with Bool bound to BoolT.
#define EMBER_DISPATCH_BOOL_AS(dt, BoolT, ...)               \
  switch (dt) {                                              \
    EMBER_DISPATCH_FLOAT_CASES(__VA_ARGS__)                  \
    EMBER_DISPATCH_CASE(I64, int64_t, __VA_ARGS__)           \
    EMBER_DISPATCH_CASE(U32, uint32_t, __VA_ARGS__)          \
    EMBER_DISPATCH_CASE(U8, uint8_t, __VA_ARGS__)            \
    EMBER_DISPATCH_CASE(I32, int32_t, __VA_ARGS__)           \
    EMBER_DISPATCH_CASE(Bool, BoolT, __VA_ARGS__)            \
  }
#define EMBER_DISPATCH(dt, ...) EMBER_DISPATCH_BOOL_AS(dt, bool, __VA_ARGS__)
// Like EMBER_DISPATCH, with bool's 0/1 bytes bound as uint8_t: for kernels that only move, compare or
// order values (sort, top-k, max/min, gather/scatter), whose results then stay 0/1.
#define EMBER_DISPATCH_BOOL_AS_U8(dt, ...) EMBER_DISPATCH_BOOL_AS(dt, uint8_t, __VA_ARGS__)
#define EMBER_DISPATCH_FLOAT(dt, ...)                        \
  switch (dt) {                                              \
    EMBER_DISPATCH_FLOAT_CASES(__VA_ARGS__)                  \
    default: break;                                          \
  }
