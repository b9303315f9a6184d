// Random fills on Metal: the CPU's counter-based generator (cpp/cpu/random.cpp) - value i is a splitmix64
// hash of (seed, counter + i) - so one seed gives the same stream on every device.
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
inline float unit(ulong seed, ulong i, uint bits) {
  return float(mix(seed ^ mix(i)) >> (64 - bits)) * exp2(-float(bits));
}

// The largest value of the type strictly below v (as the CPU's next_below), on the bit patterns.
inline float below(float v) {
  const uint b = as_type<uint>(v);
  if ((b & 0x7fffffffu) == 0) return as_type<float>(0x80000001u);
  return as_type<float>((b & 0x80000000u) ? b + 1 : b - 1);
}
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
  const float u1 = 1.0f - unit(seed, k, 24), u2 = unit(seed, k + 1, 24);
  const float z = sqrt(-2.0f * log(u1)) * cos(6.283185307179586f * u2);
  out[gid] = T(fma(stdev, z, mean));
}

#define instantiate_random(tname, T)                                                                   \
  template [[host_name("rand_uniform_" #tname)]] [[kernel]] decltype(rand_uniform<T>) rand_uniform<T>; \
  template [[host_name("rand_normal_" #tname)]] [[kernel]] decltype(rand_normal<T>) rand_normal<T>;

instantiate_random(float32, float)
instantiate_random(float16, half)
instantiate_random(bfloat16, bfloat)
