// Resampling (n, c, h, w) planes: nearest, nearest-exact and (bi)linear with torch's source-index rules,
// one thread per output; the gradient one thread per input pixel, gathering from the outputs that read
// it (their source index is monotonic in the output index, so a binary search bounds them): no atomics,
// the same sums on every run. Computed in float.
#include <metal_stdlib>
using namespace metal;

// g, a constant long array: [0] c, [1] h, [2] w, [3] oh, [4] ow, [5] mode (0 nearest, 1 nearest-exact,
// 2 linear), [6] align_corners, [7] element offset, [8..12) strides (n, c, h, w) of the input (forward)
// or the gradient (backward). scale: each axis's source scale (h, w) as torch computes it, in float (the
// host's UpsampleGeom: 1 / the user's scale factor, in / out, or align_corners' (in - 1) / (out - 1)).
struct Axis {
  long in, out, mode;
  bool align;
  float scale;
};

inline Axis make_axis(long in, long out, long mode, bool align, float scale) {
  Axis a;
  a.in = in, a.out = out, a.mode = mode, a.align = align, a.scale = scale;
  return a;
}

// Output o's first source index and its weight (the second source is i0 + 1, or i0 at the edge).
inline long src0(Axis a, long o, thread float& lam) {
  lam = 0.0f;
  if (a.mode == 1) return min(long(floor((float(o) + 0.5f) * a.scale)), a.in - 1);
  if (a.mode == 0) {
    if (a.out == a.in) return o;
    if (a.out == 2 * a.in) return o >> 1;
    return min(long(floor(float(o) * a.scale)), a.in - 1);
  }
  if (a.out == a.in) return o;  // torch copies an axis whose size does not change
  const float real = a.align ? a.scale * float(o) : max(a.scale * (float(o) + 0.5f) - 0.5f, 0.0f);
  const long i = min(long(floor(real)), a.in - 1);
  lam = min(max(real - float(i), 0.0f), 1.0f);
  return i;
}

// The first output whose first source index is >= v (a.out when none).
inline long first_at_least(Axis a, long v) {
  long lo = 0, hi = a.out;
  while (lo < hi) {
    const long mid = (lo + hi) / 2;
    float lam;
    if (src0(a, mid, lam) >= v) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

inline long base_of(constant long* g, long plane) { return g[7] + (plane / g[0]) * g[8] + (plane % g[0]) * g[9]; }

// grid (oh*ow, planes); out contiguous.
template <typename T>
kernel void upsample_fwd(device const T* x [[buffer(0)]], device T* out [[buffer(1)]], constant long* g [[buffer(2)]],
                         constant float2& scale [[buffer(3)]], uint2 gid [[thread_position_in_grid]]) {
  const long mode = g[5], ow = g[4];
  const Axis ay = make_axis(g[1], g[3], mode, g[6] != 0, scale.x), ax = make_axis(g[2], ow, mode, g[6] != 0, scale.y);
  const long oy = long(gid.x) / ow, ox = long(gid.x) % ow;
  device const T* p = x + base_of(g, gid.y);
  const long sy = g[10], sx = g[11];
  float ly, lx;
  const long y0 = src0(ay, oy, ly), x0 = src0(ax, ox, lx);
  float v;
  if (mode != 2) {
    v = float(p[y0 * sy + x0 * sx]);
  } else {
    const long y1 = y0 + (y0 < ay.in - 1 ? 1 : 0), x1 = x0 + (x0 < ax.in - 1 ? 1 : 0);
    const float r0 = (1.0f - lx) * float(p[y0 * sy + x0 * sx]) + lx * float(p[y0 * sy + x1 * sx]);
    const float r1 = (1.0f - lx) * float(p[y1 * sy + x0 * sx]) + lx * float(p[y1 * sy + x1 * sx]);
    // one source row (1-D, an unchanged h) is read as it is, as the CPU's: 0 * inf would make its inf NaN
    v = (y1 == y0 && ly == 0.0f) ? r0 : (1.0f - ly) * r0 + ly * r1;
  }
  out[long(gid.y) * g[3] * ow + long(gid.x)] = T(v);
}

// The weight with which output o reads input i along one axis (0 when it does not).
inline float weight(Axis a, long o, long i) {
  float lam;
  const long i0 = src0(a, o, lam);
  const long i1 = i0 + (a.mode == 2 && i0 < a.in - 1 ? 1 : 0);
  return (i0 == i ? 1.0f - lam : 0.0f) + (i1 == i ? lam : 0.0f);
}

// grid (h*w, planes); dy read through g's layout; dx contiguous.
template <typename T>
kernel void upsample_bwd(device const T* dy [[buffer(0)]], device T* dx [[buffer(1)]], constant long* g [[buffer(2)]],
                         constant float2& scale [[buffer(3)]], uint2 gid [[thread_position_in_grid]]) {
  const long mode = g[5], w = g[2];
  const Axis ay = make_axis(g[1], g[3], mode, g[6] != 0, scale.x), ax = make_axis(w, g[4], mode, g[6] != 0, scale.y);
  const long y = long(gid.x) / w, xx = long(gid.x) % w;
  device const T* p = dy + base_of(g, gid.y);
  const long sy = g[10], sx = g[11];
  // linear: the outputs whose first source is y - 1 or y; nearest: those whose source is y
  const long back = mode == 2 ? 1 : 0;
  const long ylo = first_at_least(ay, y - back), yhi = first_at_least(ay, y + 1);
  const long xlo = first_at_least(ax, xx - back), xhi = first_at_least(ax, xx + 1);
  float acc = 0.0f;
  for (long oy = ylo; oy < yhi; ++oy) {
    const float wy = weight(ay, oy, y);
    if (wy == 0.0f) continue;
    float row = 0.0f;
    for (long ox = xlo; ox < xhi; ++ox) row += weight(ax, ox, xx) * float(p[oy * sy + ox * sx]);
    acc += wy * row;
  }
  dx[long(gid.y) * g[1] * w + long(gid.x)] = T(acc);
}

#define instantiate_upsample(tname, T)                                                                        \
  template [[host_name("upsample_fwd_" #tname)]] [[kernel]] void upsample_fwd<T>(                             \
      device const T* x [[buffer(0)]], device T* out [[buffer(1)]], constant long* g [[buffer(2)]],            \
      constant float2& scale [[buffer(3)]], uint2 gid [[thread_position_in_grid]]);                               \
  template [[host_name("upsample_bwd_" #tname)]] [[kernel]] void upsample_bwd<T>(                             \
      device const T* dy [[buffer(0)]], device T* dx [[buffer(1)]], constant long* g [[buffer(2)]],            \
      constant float2& scale [[buffer(3)]], uint2 gid [[thread_position_in_grid]]);
instantiate_upsample(float32, float)
instantiate_upsample(float16, half)
instantiate_upsample(bfloat16, bfloat)
