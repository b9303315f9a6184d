// Random fills and multinomial's kernels on Metal: the CPU's counter-based generator (cpp/cpu/random.cpp) -
// value i is a splitmix64 hash of (seed, counter + i) - so one seed gives the same stream on every device.
#include <metal_stdlib>
using namespace metal;

inline ulong mix(ulong z) {
  z += 0x9e3779b97f4a7c15ul;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ul;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebul;
  return z ^ (z >> 31);
}

// A uniform in [0, 1) with `bits` random bits, the CPU's unit(): exact in float for bits <= 24, so
// the [0, 1) stream of float32 / float16 / bfloat16 is the CPU's bit for bit.
#if defined(EMBER_CUDA_F64)
// CUDA's float64 variant, where float is double (cpp/cuda/kernels.h): double's bits, 53 random bits as the CPU's.
#define EMBER_UNIT_BITS 53
inline float unit(ulong seed, ulong i, uint bits) {
  return float(mix(seed ^ mix(i)) >> (64 - bits)) * as_type<float>(ulong(1023u - bits) << 52);
}
inline float below(float v) {
  const ulong b = as_type<ulong>(v);
  if ((b & 0x7ffffffffffffffful) == 0) return as_type<float>(0x8000000000000001ul);
  return as_type<float>((b & 0x8000000000000000ul) ? b + 1 : b - 1);
}
#else
#define EMBER_UNIT_BITS 24
inline float unit(ulong seed, ulong i, uint bits) {
  // 2^-bits built from its bits: a GPU's exp2 need not be exact (1 ulp with fast math off, more with it)
  return float(mix(seed ^ mix(i)) >> (64 - bits)) * as_type<float>((127u - bits) << 23);
}

// The largest value of the type strictly below v (as the CPU's next_below), on the bit patterns.
inline float below(float v) {
  const uint b = as_type<uint>(v);
  if ((b & 0x7fffffffu) == 0) return as_type<float>(0x80000001u);
  return as_type<float>((b & 0x80000000u) ? b + 1 : b - 1);
}
#endif
inline half below(half v) {
  const ushort b = as_type<ushort>(v);
  if ((b & 0x7fff) == 0) return as_type<half>(ushort(0x8001));
  return as_type<half>(ushort((b & 0x8000) ? b + 1 : b - 1));
}
inline bfloat below(bfloat v) {
  const ushort b = as_type<ushort>(v);
  if ((b & 0x7fff) == 0) return as_type<bfloat>(ushort(0x8001));
  return as_type<bfloat>(ushort((b & 0x8000) ? b + 1 : b - 1));
}

// out[i] = lo + scale * u_i, kept strictly below `hi` after rounding (when hi > lo); `bits` is the
// type's mantissa width (24, 11, 8), so every u_i lies on the type's grid.
template <typename T>
kernel void rand_uniform(device T* out [[buffer(0)]], constant ulong& seed [[buffer(1)]],
                         constant ulong& base [[buffer(2)]], constant float& lo [[buffer(3)]],
                         constant float& scale [[buffer(4)]], constant float& hi [[buffer(5)]],
                         constant uint& bits [[buffer(6)]], constant uint& n [[buffer(7)]],
                         uint gid [[thread_position_in_grid]]) {
  if (gid >= n) return;
  T v = T(fma(scale, unit(seed, base + gid, bits), lo));
  if (scale > 0.0f && float(v) >= hi) v = below(v);
  out[gid] = v;
}

// Box-Muller on the pair of uniforms (2 * (base + i), 2 * (base + i) + 1), as the CPU draws them
// (which keeps 53 bits of each; 24 here, so values agree to float rounding, not bit for bit).
template <typename T>
kernel void rand_normal(device T* out [[buffer(0)]], constant ulong& seed [[buffer(1)]],
                        constant ulong& base [[buffer(2)]], constant float& mean [[buffer(3)]],
                        constant float& stdev [[buffer(4)]], constant uint& n [[buffer(5)]],
                        uint gid [[thread_position_in_grid]]) {
  if (gid >= n) return;
  const ulong k = 2 * (base + gid);
  const float u1 = 1.0f - unit(seed, k, EMBER_UNIT_BITS), u2 = unit(seed, k + 1, EMBER_UNIT_BITS);
  const float z = sqrt(-2.0f * log(u1)) * cos(6.283185307179586f * u2);
  out[gid] = T(fma(stdev, z, mean));
}

// multinomial's meta: [0] element offset, [1] row stride, [2] column stride, [3] n (categories),
// [4] S (draws per row).
// Without replacement: the exponential key w / E of every weight, E = -log(1 - u) for the uniform of
// counter + r * n + i (the CPU's stream), kept as log(w) - log(E): w / E overflows float for huge weights
// (3e38 / 0.5), and ties at +inf would favour low indices; grid (n, rows). A zero weight keys -inf: after
// every positive one.
template <typename T>
kernel void multinomial_keys(device const T* w [[buffer(0)]], device float* keys [[buffer(1)]],
                             constant long* meta [[buffer(2)]], constant ulong& seed [[buffer(3)]],
                             constant ulong& base [[buffer(4)]], uint2 gid [[thread_position_in_grid]]) {
  const long n = meta[3], i = long(gid.x), r = long(gid.y);
  if (i >= n) return;
  const float wi = float(w[meta[0] + r * meta[1] + i * meta[2]]);
  const float e = -log(1.0f - unit(seed, base + ulong(r * n + i), 24));  // 0 only for u = 0: key +inf
  keys[r * n + i] = wi > 0.0f ? log(wi) - log(e) : -numeric_limits<float>::infinity();
}

// With replacement: draw j of row r is the first category whose running sum (csum, contiguous rows)
// exceeds u * total, u the uniform of counter + r * S + j; grid (S, rows).
kernel void multinomial_search(device const float* csum [[buffer(0)]], device long* out [[buffer(1)]],
                               constant long* meta [[buffer(2)]], constant ulong& seed [[buffer(3)]],
                               constant ulong& base [[buffer(4)]], uint2 gid [[thread_position_in_grid]]) {
  const long n = meta[3], S = meta[4], j = long(gid.x), r = long(gid.y);
  if (j >= S) return;
  device const float* c = csum + r * n;
  const float target = unit(seed, base + ulong(r * S + j), 24) * c[n - 1];
  long lo = 0, hi = n;  // the first i with c[i] > target lies in [lo, hi]
  while (lo < hi) {
    const long mid = (lo + hi) / 2;
    if (c[mid] > target) hi = mid;
    else lo = mid + 1;
  }
  if (lo == n) {  // u * total rounded up to total: the last category with a positive weight
    lo = n - 1;
    while (lo > 0 && c[lo] == c[lo - 1]) --lo;
  }
  out[r * S + j] = lo;
}

// The weights' check, the CPU's in one pass before any draw: flags[0] becomes 1 for a NaN, infinite or
// negative weight, flags[1 + r] 1 when row r has a positive weight (flags start at 0); grid (n, rows).
template <typename T>
kernel void multinomial_check(device const T* w [[buffer(0)]], device atomic_uint* flags [[buffer(1)]],
                              constant long* meta [[buffer(2)]], uint2 gid [[thread_position_in_grid]]) {
  const long n = meta[3], i = long(gid.x), r = long(gid.y);
  if (i >= n) return;
  const float wi = float(w[meta[0] + r * meta[1] + i * meta[2]]);
  if (!(wi >= 0.0f) || isinf(wi)) atomic_fetch_or_explicit(flags, 1u, memory_order_relaxed);
  // a load first: most positive weights find the row already marked, without a write to contend on
  if (wi > 0.0f && atomic_load_explicit(flags + 1 + r, memory_order_relaxed) == 0u)
    atomic_store_explicit(flags + 1 + r, 1u, memory_order_relaxed);
}

#define instantiate_random(tname, T)                                                                   \
  template [[host_name("rand_uniform_" #tname)]] [[kernel]] decltype(rand_uniform<T>) rand_uniform<T>; \
  template [[host_name("rand_normal_" #tname)]] [[kernel]] decltype(rand_normal<T>) rand_normal<T>;     \
  template [[host_name("multinomial_keys_" #tname)]] [[kernel]] decltype(multinomial_keys<T>) multinomial_keys<T>; \
  template [[host_name("multinomial_check_" #tname)]] [[kernel]] decltype(multinomial_check<T>) multinomial_check<T>;

instantiate_random(float32, float)
instantiate_random(float16, half)
instantiate_random(bfloat16, bfloat)
