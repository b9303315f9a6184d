// Rotary position embedding (fused RoPE), forward and inverse (the backward: rotation by -theta), for
// f32/f16/bf16 computed in float. One thread per rotated pair or passed-through feature of a row; x is
// read through a RowLayout (any strides and offset), the output is dense.
#include <metal_stdlib>
using namespace metal;

constant constexpr int kRowDims = 8;  // outer dims of a row layout, after the host coalesced them

// Must match the host's copies in cpp/metal/ops/fused.cpp.
struct RowLayout {
  long offset;
  long cstride;
  long nd;
  long shape[kRowDims];
  long stride[kRowDims];
};
struct RopeArgs {
  RowLayout x;
  long D, L, rows, half;
  long per_batch;       // rows per batch of the offsets tensor (rows when there is one offset)
  long offset;          // the int offset, added to offsets[b] when that tensor is given
  long o_off, o_st;     // the offsets tensor's (offset, stride); o_st 0 for a single value
  long f_off, f_st;     // freqs' (offset, stride)
  float scale;
  float log2_base;      // inv_freq[i] = 2^(-2i / dims * log2(base)) without freqs
  uint traditional;
  uint inverse;
  uint has_offsets;
  uint has_freqs;        // 1: freqs given; 2: buffer 2 is a (cos | sin) table, row (r / per_batch, r % L);
                         // 3: buffer 2 holds inv_freq[j], computed by the host
};

inline long row_start(constant RowLayout& l, long r) {
  long o = l.offset;
  for (long d = l.nd - 1; d >= 0; --d) {
    o += (r % l.shape[d]) * l.stride[d];
    r /= l.shape[d];
  }
  return o;
}

// Grid (D - half, rows): thread j < half rotates pair j of row r; the others copy feature j + half.
template <typename T>
kernel void rope(device const T* x [[buffer(0)]], device const long* offsets [[buffer(1)]],
                 device const float* freqs [[buffer(2)]], device T* y [[buffer(3)]],
                 constant RopeArgs& a [[buffer(4)]], uint2 gid [[thread_position_in_grid]]) {
  const long j = gid.x, r = gid.y;
  if (j >= a.D - a.half || r >= a.rows) return;
  device const T* xr = x + row_start(a.x, r);
  device T* yr = y + r * a.D;
  const long cs = a.x.cstride;
  if (j >= a.half) {
    const long d = j + a.half;
    yr[d] = xr[d * cs];
    return;
  }
  float c, s;
  if (a.has_freqs == 2) {
    device const float* t = freqs + a.f_off + ((r / a.per_batch) * a.L + r % a.L) * 2 * a.half;
    c = t[j];
    s = a.inverse ? -t[a.half + j] : t[a.half + j];
  } else {
    long pos = a.offset + r % a.L;
    if (a.has_offsets) pos += offsets[a.o_off + (r / a.per_batch) * a.o_st];
    // has_freqs 3: the host's inv_freq table (computed in double: a GPU's exp2 is only within 1 ulp, and
    // at positions past 1e5 that ulp alone moves the angle by hundredths of a radian)
    const float inv_freq = a.has_freqs == 3 ? freqs[j]
                           : a.has_freqs   ? 1.0f / freqs[a.f_off + j * a.f_st]
                                           : exp2(-float(2 * j) / float(2 * a.half) * a.log2_base);
    const float theta = float(pos) * a.scale * inv_freq;
    c = precise::cos(theta);
    s = a.inverse ? -precise::sin(theta) : precise::sin(theta);
  }
  const long i1 = a.traditional ? 2 * j : j, i2 = a.traditional ? 2 * j + 1 : j + a.half;
  const float u = float(xr[i1 * cs]), v = float(xr[i2 * cs]);
  yr[i1] = T(u * c - v * s);
  yr[i2] = T(u * s + v * c);
}

#define instantiate_rope(tname, T) \
  template [[host_name("rope_" #tname)]] [[kernel]] decltype(rope<T>) rope<T>;

instantiate_rope(float32, float)
instantiate_rope(float16, half)
instantiate_rope(bfloat16, bfloat)
