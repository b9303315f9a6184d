// Convolution windows: im2col (an (n, c, h, w) input through any strides -> columns (n, c*kh*kw, oh*ow),
// zeros where a window reaches into the padding) and col2im, its adjoint: each input pixel gathers the
// column entries that read it, in (ki, kj) order, so no two threads write one place (no atomics) and the
// sums equal the CPU's. f16/bf16 sum in float and round once; integers wrap like the dtype.
#include <metal_stdlib>
using namespace metal;

// g, a constant long array (cpp/backend.h's ConvGeom, then the input's layout):
//   [0] n, [1] c, [2] h, [3] w, [4] kh, [5] kw, [6] sh, [7] sw, [8] ph, [9] pw, [10] dh, [11] dw, [12] oh,
//   [13] ow, [14] offset, [15..19) the input's strides (n, c, h, w).

// grid: (oh*ow positions, n*c*kh*kw column rows); one thread per column entry.
template <typename E>
kernel void im2col(device const E* x [[buffer(0)]], device E* col [[buffer(1)]], constant long* g [[buffer(2)]],
                   uint2 gid [[thread_position_in_grid]]) {
  const long kh = g[4], kw = g[5], ow = g[13];
  const long row = gid.y, pos = gid.x;
  const long kj = row % kw, ki = (row / kw) % kh, ci = (row / (kw * kh)) % g[1], ni = row / (kw * kh * g[1]);
  const long oy = pos / ow, ox = pos % ow;
  const long y = oy * g[6] - g[8] + ki * g[10], xx = ox * g[7] - g[9] + kj * g[11];
  const bool inside = y >= 0 && y < g[2] && xx >= 0 && xx < g[3];
  col[row * g[12] * ow + pos] = inside ? x[g[14] + ni * g[15] + ci * g[16] + y * g[17] + xx * g[18]] : E(0);
}

template <typename T> struct Acc { typedef ulong type; };  // integers: wrap once stored back
template <> struct Acc<float> { typedef float type; };
template <> struct Acc<half> { typedef float type; };
template <> struct Acc<bfloat> { typedef float type; };

// grid: (h*w pixels, n*c planes); the columns are contiguous. out (n, c, h, w) contiguous.
template <typename T>
kernel void col2im(device const T* col [[buffer(0)]], device T* out [[buffer(1)]], constant long* g [[buffer(2)]],
                   uint2 gid [[thread_position_in_grid]]) {
  typedef typename Acc<T>::type A;
  const long w = g[3], kh = g[4], kw = g[5], sh = g[6], sw = g[7], oh = g[12], ow = g[13];
  const long plane = gid.y, y = long(gid.x) / w, xx = long(gid.x) % w;
  device const T* pc = col + plane * kh * kw * oh * ow;
  A acc = A(0);
  for (long ki = 0; ki < kh; ++ki) {
    const long ty = y + g[8] - ki * g[10];  // oy * sh for the windows whose row ki reads row y
    if (ty < 0 || ty % sh != 0 || ty / sh >= oh) continue;
    for (long kj = 0; kj < kw; ++kj) {
      const long tx = xx + g[9] - kj * g[11];
      if (tx < 0 || tx % sw != 0 || tx / sw >= ow) continue;
      acc += A(pc[(ki * kw + kj) * oh * ow + (ty / sh) * ow + tx / sw]);
    }
  }
  out[plane * g[2] * w + gid.x] = T(acc);
}

#define instantiate_im2col(bytes, E)                                                                          \
  template [[host_name("im2col_" #bytes)]] [[kernel]] void im2col<E>(                                         \
      device const E* x [[buffer(0)]], device E* col [[buffer(1)]], constant long* g [[buffer(2)]],            \
      uint2 gid [[thread_position_in_grid]]);
instantiate_im2col(1, uchar)
instantiate_im2col(2, ushort)
instantiate_im2col(4, uint)
instantiate_im2col(8, ulong)

#define instantiate_col2im(tname, T)                                                                          \
  template [[host_name("col2im_" #tname)]] [[kernel]] void col2im<T>(                                          \
      device const T* col [[buffer(0)]], device T* out [[buffer(1)]], constant long* g [[buffer(2)]],          \
      uint2 gid [[thread_position_in_grid]]);
instantiate_col2im(float32, float)
instantiate_col2im(float16, half)
instantiate_col2im(bfloat16, bfloat)
instantiate_col2im(int64, long)
instantiate_col2im(uint32, uint)
instantiate_col2im(uint8, uchar)
instantiate_col2im(int32, int)
