// Data movement: contiguous and strided copies, fills, casts between every pair of Metal dtypes, where
// (with a bool or integer condition).
// Copies, fills and where move bit patterns, so they are instantiated per element width (8/16/32/64);
// casts per (from, to) pair with the CPU backend's rounding and saturation rules.
#include <metal_stdlib>
using namespace metal;

constant constexpr uint kPerThread = 4;  // elements per thread in the contiguous kernels

// The element offset of flat index i of a (shape, strides) view, innermost dim last. The index math is
// 32-bit (every dim and index is below 2^32: the launchers check the element count), as a 64-bit
// division costs a GPU many instructions; only the offsets are 64-bit.
inline long strided_at(uint i, uint ndim, constant long* shape, constant long* strides) {
  long at = 0;
  for (int d = int(ndim) - 1; d >= 0; --d) {
    const uint n = uint(shape[d]);
    at += long(i % n) * strides[d];
    i /= n;
  }
  return at;
}

// ---------------------------------------------------------------------------------------- copy
template <typename T>
kernel void copy_contig(device const T* in [[buffer(0)]], device T* out [[buffer(1)]],
                        constant uint& n [[buffer(2)]], uint gid [[thread_position_in_grid]]) {
  const ulong base = ulong(gid) * kPerThread;
  if (base + kPerThread <= n) {
    for (uint k = 0; k < kPerThread; ++k) out[base + k] = in[base + k];
  } else {
    for (ulong i = base; i < n; ++i) out[i] = in[i];
  }
}

// out (through out_strides from out_offset) = in (through in_strides from in_offset), one shape.
template <typename T>
kernel void copy_strided(device const T* in [[buffer(0)]], device T* out [[buffer(1)]],
                         constant uint& n [[buffer(2)]], constant uint& ndim [[buffer(3)]],
                         constant long* shape [[buffer(4)]], constant long* in_strides [[buffer(5)]],
                         constant long* out_strides [[buffer(6)]], constant long& in_offset [[buffer(7)]],
                         constant long& out_offset [[buffer(8)]], uint gid [[thread_position_in_grid]]) {
  if (gid >= n) return;
  long ai = in_offset, ao = out_offset;
  uint rem = gid;
  for (int d = int(ndim) - 1; d >= 0; --d) {
    const uint s = uint(shape[d]);
    const long k = long(rem % s);
    rem /= s;
    ai += k * in_strides[d];
    ao += k * out_strides[d];
  }
  out[ao] = in[ai];
}

// ---------------------------------------------------------------------------------------- fill
// `value` is the element's bit pattern, converted on the host exactly as the CPU converts it.
template <typename T>
kernel void fill_contig(device T* out [[buffer(0)]], constant T& value [[buffer(1)]],
                        constant uint& n [[buffer(2)]], uint gid [[thread_position_in_grid]]) {
  const ulong base = ulong(gid) * kPerThread;
  const T v = value;
  if (base + kPerThread <= n) {
    for (uint k = 0; k < kPerThread; ++k) out[base + k] = v;
  } else {
    for (ulong i = base; i < n; ++i) out[i] = v;
  }
}

template <typename T>
kernel void fill_strided(device T* out [[buffer(0)]], constant T& value [[buffer(1)]],
                         constant uint& n [[buffer(2)]], constant uint& ndim [[buffer(3)]],
                         constant long* shape [[buffer(4)]], constant long* strides [[buffer(5)]],
                         constant long& offset [[buffer(6)]], uint gid [[thread_position_in_grid]]) {
  if (gid >= n) return;
  out[offset + strided_at(gid, ndim, shape, strides)] = value;
}

// ---------------------------------------------------------------------------------------- casts
// float -> integer, the CPU's two rules. In range means inside (-9.3e18, 1.8e19) (as floats, the
// nearest floats inside); NaN and values outside give 0. x86 converts what int64 cannot hold to
// INT64_MIN, and the CPU inherits that; these kernels write it out.
constant constexpr float kIntLo = -9.299999201e18f;  // the least float > -9.3e18
constant constexpr float kIntHi = 1.799999931e19f;   // the greatest float < 1.8e19
constant constexpr float kTwo63 = 9223372036854775808.0f;

#if defined(EMBER_CUDA_F64)
inline bool int_range(float v) { return v > -9.3e18f && v < 1.8e19f; }  // float is double here: the CPU's bounds
#else
inline bool int_range(float v) { return v >= kIntLo && v <= kIntHi; }
#endif
inline long to_long_x86(float v) { return (v >= kTwo63 || v < -kTwo63) ? as_type<long>(0x8000000000000000ul) : long(v); }

// From float32 (the CPU's to_dtype loop): negative values give 0 for unsigned targets.
template <typename To> struct F32ToInt;
template <> struct F32ToInt<long> {
  long operator()(float v) const { return int_range(v) ? to_long_x86(v) : 0; }
};
template <> struct F32ToInt<int> {  // truncated to int64 as above, then wrapped into 32 bits
  int operator()(float v) const { return int_range(v) ? as_type<int>(uint(as_type<ulong>(to_long_x86(v)))) : 0; }
};
template <> struct F32ToInt<uint> {
  uint operator()(float v) const { return int_range(v) && v >= 0.0f ? uint(ulong(v)) : 0u; }
};
template <> struct F32ToInt<uchar> {
  uchar operator()(float v) const { return int_range(v) && v >= 0.0f ? uchar(ulong(v)) : uchar(0); }
};

// From float16 / bfloat16 (the CPU's generic convert): truncates and wraps, negatives included.
template <typename To> struct HalfToInt {
  To operator()(float v) const {
    if (!int_range(v)) return To(0);
    if (v >= kTwo63) return To(ulong(v));
    return To(to_long_x86(v));
  }
};

template <typename From, typename To> struct Cast {
  To operator()(From v) const { return To(v); }  // integer -> integer: wraps, as C++ (to bool: v != 0)
};
#define CAST_VIA_FLOAT(From, To) \
  template <> struct Cast<From, To> { To operator()(From v) const { return To(float(v)); } };
// Every float target is reached through float, as the CPU's Acc<T> arithmetic does.
#define CAST_TO_FLOATS(From) CAST_VIA_FLOAT(From, float) CAST_VIA_FLOAT(From, half) CAST_VIA_FLOAT(From, bfloat)
CAST_TO_FLOATS(float)
CAST_TO_FLOATS(half)
CAST_TO_FLOATS(bfloat)
CAST_TO_FLOATS(long)
CAST_TO_FLOATS(uint)
CAST_TO_FLOATS(uchar)
CAST_TO_FLOATS(int)
CAST_TO_FLOATS(bool)
#define CAST_FLOAT_TO_INT(From, To, Rule) \
  template <> struct Cast<From, To> { To operator()(From v) const { return Rule<To>()(float(v)); } };
// To bool: v != 0, so NaN gives true (numpy and torch).
#define CAST_FLOAT_TO_BOOL(From) \
  template <> struct Cast<From, bool> { bool operator()(From v) const { return float(v) != 0.0f; } };
#define CAST_FLOAT_TO_INTS(From, Rule) \
  CAST_FLOAT_TO_INT(From, long, Rule) CAST_FLOAT_TO_INT(From, uint, Rule) CAST_FLOAT_TO_INT(From, uchar, Rule) \
  CAST_FLOAT_TO_INT(From, int, Rule) CAST_FLOAT_TO_BOOL(From)
CAST_FLOAT_TO_INTS(float, F32ToInt)
CAST_FLOAT_TO_INTS(half, HalfToInt)
CAST_FLOAT_TO_INTS(bfloat, HalfToInt)

template <typename From, typename To>
kernel void cast_contig(device const From* in [[buffer(0)]], device To* out [[buffer(1)]],
                        constant uint& n [[buffer(2)]], uint gid [[thread_position_in_grid]]) {
  const ulong base = ulong(gid) * kPerThread;
  const Cast<From, To> cast;
  if (base + kPerThread <= n) {
    for (uint k = 0; k < kPerThread; ++k) out[base + k] = cast(in[base + k]);
  } else {
    for (ulong i = base; i < n; ++i) out[i] = cast(in[i]);
  }
}

template <typename From, typename To>
kernel void cast_strided(device const From* in [[buffer(0)]], device To* out [[buffer(1)]],
                         constant uint& n [[buffer(2)]], constant uint& ndim [[buffer(3)]],
                         constant long* shape [[buffer(4)]], constant long* strides [[buffer(5)]],
                         constant long& offset [[buffer(6)]], uint gid [[thread_position_in_grid]]) {
  if (gid >= n) return;
  out[gid] = Cast<From, To>()(in[offset + strided_at(gid, ndim, shape, strides)]);
}

// ---------------------------------------------------------------------------------------- where
// out = c != 0 ? a : b, all three through broadcast strides of the output's (collapsed) shape.
template <typename C, typename T>
kernel void where_strided(device const C* c [[buffer(0)]], device const T* a [[buffer(1)]],
                          device const T* b [[buffer(2)]], device T* out [[buffer(3)]],
                          constant uint& n [[buffer(4)]], constant uint& ndim [[buffer(5)]],
                          constant long* shape [[buffer(6)]], constant long* c_strides [[buffer(7)]],
                          constant long* a_strides [[buffer(8)]], constant long* b_strides [[buffer(9)]],
                          constant long* offsets [[buffer(10)]], uint gid [[thread_position_in_grid]]) {
  if (gid >= n) return;
  long ac = offsets[0], aa = offsets[1], ab = offsets[2];
  uint rem = gid;
  for (int d = int(ndim) - 1; d >= 0; --d) {
    const uint s = uint(shape[d]);
    const long k = long(rem % s);
    rem /= s;
    ac += k * c_strides[d];
    aa += k * a_strides[d];
    ab += k * b_strides[d];
  }
  const T va = a[aa], vb = b[ab];
  out[gid] = c[ac] != C(0) ? va : vb;
}

template <typename C, typename T>
kernel void where_contig(device const C* c [[buffer(0)]], device const T* a [[buffer(1)]],
                         device const T* b [[buffer(2)]], device T* out [[buffer(3)]],
                         constant uint& n [[buffer(4)]], uint gid [[thread_position_in_grid]]) {
  const ulong base = ulong(gid) * kPerThread;
  if (base + kPerThread <= n) {
    for (uint k = 0; k < kPerThread; ++k) out[base + k] = c[base + k] != C(0) ? a[base + k] : b[base + k];
  } else {
    for (ulong i = base; i < n; ++i) out[i] = c[i] != C(0) ? a[i] : b[i];
  }
}

// ---------------------------------------------------------------------------------------- instances
#define instantiate_width(w, T)                                                                       \
  template [[host_name("copy_contig_" #w)]] [[kernel]] decltype(copy_contig<T>) copy_contig<T>;       \
  template [[host_name("copy_strided_" #w)]] [[kernel]] decltype(copy_strided<T>) copy_strided<T>;    \
  template [[host_name("fill_contig_" #w)]] [[kernel]] decltype(fill_contig<T>) fill_contig<T>;       \
  template [[host_name("fill_strided_" #w)]] [[kernel]] decltype(fill_strided<T>) fill_strided<T>;

instantiate_width(8, uchar)
instantiate_width(16, ushort)
instantiate_width(32, uint)
instantiate_width(64, ulong)

#define instantiate_cast(fname, From, tname, To)                                                      \
  template [[host_name("cast_contig_" #fname "_" #tname)]] [[kernel]] decltype(cast_contig<From, To>) \
      cast_contig<From, To>;                                                                          \
  template [[host_name("cast_strided_" #fname "_" #tname)]] [[kernel]] decltype(cast_strided<From, To>) \
      cast_strided<From, To>;

#define instantiate_casts_from(fname, From)        \
  instantiate_cast(fname, From, float32, float)    \
  instantiate_cast(fname, From, float16, half)     \
  instantiate_cast(fname, From, bfloat16, bfloat)  \
  instantiate_cast(fname, From, int64, long)       \
  instantiate_cast(fname, From, uint32, uint)      \
  instantiate_cast(fname, From, uint8, uchar)     \
  instantiate_cast(fname, From, int32, int)       \
  instantiate_cast(fname, From, bool, bool)

instantiate_casts_from(float32, float)
#if defined(EMBER_CUDA_TRANSLATE) && !defined(EMBER_CUDA_F64)
// CUDA's float64 (Metal has no double): float32 <-> float64 here; every other float64 cast is in the float64
// variant of this file (float32's casts retyped, cpp/cuda/kernels.h).
instantiate_cast(float32, float, float64, em_double)
instantiate_cast(float64, em_double, float32, float)
#endif
instantiate_casts_from(float16, half)
instantiate_casts_from(bfloat16, bfloat)
instantiate_casts_from(int64, long)
instantiate_casts_from(uint32, uint)
instantiate_casts_from(uint8, uchar)
instantiate_casts_from(int32, int)
instantiate_casts_from(bool, bool)

#define instantiate_where(cname, C, w, T)                                                              \
  template [[host_name("where_strided_" #cname "_" #w)]] [[kernel]] decltype(where_strided<C, T>)      \
      where_strided<C, T>;                                                                             \
  template [[host_name("where_contig_" #cname "_" #w)]] [[kernel]] decltype(where_contig<C, T>)        \
      where_contig<C, T>;

#define instantiate_where_cond(cname, C) \
  instantiate_where(cname, C, 8, uchar)  \
  instantiate_where(cname, C, 16, ushort) \
  instantiate_where(cname, C, 32, uint)  \
  instantiate_where(cname, C, 64, ulong)

instantiate_where_cond(int64, long)
instantiate_where_cond(uint32, uint)
instantiate_where_cond(uint8, uchar)
instantiate_where_cond(int32, int)
instantiate_where_cond(bool, bool)
