// Pooling over (n, c, h, w) planes: max (values and torch's flat indices: the first maximum in row-major
// order, the last NaN), average (count_include_pad, divisor_override) and adaptive average, one thread per
// output; and their gradients, one thread per input pixel gathering from the outputs whose window holds
// it (no atomics, the same sums on every run). f16/bf16 compute in float.
#include <metal_stdlib>
using namespace metal;

// g, a constant long array (cpp/backend.h's PoolGeom, then the layout read):
//   [0] c, [1] h, [2] w, [3] kh, [4] kw, [5] sh, [6] sw, [7] ph, [8] pw, [9] dh, [10] dw, [11] oh, [12] ow,
//   [13] divisor (0: none), [14] count_include_pad, [15] kind (0 max, 1 avg, 2 adaptive avg),
//   [16] element offset, [17..21) strides (n, c, h, w) of the input (forward) or the gradient (backward).
constant constexpr int kOff = 16;

inline long plane_base(constant long* g, long plane) {
  return g[kOff] + (plane / g[0]) * g[kOff + 1] + (plane % g[0]) * g[kOff + 2];
}

// One axis's window of output o: taps [lo, hi) (max: stepping by the dilation from the first inside),
// and its factor of the average's divisor.
struct Win {
  long lo, hi, size;
};
inline Win window(constant long* g, long kind, long n, long o, long out, long k, long s, long p, long d) {
  Win r;
  if (kind == 2) {  // torch's adaptive windows [floor(o n / out), ceil((o + 1) n / out))
    r.lo = o * n / out;
    r.hi = ((o + 1) * n + out - 1) / out;
    r.size = r.hi - r.lo;
  } else if (kind == 0) {
    const long st = o * s - p;
    r.lo = st < 0 ? st + (-st + d - 1) / d * d : st;
    r.hi = min(st + (k - 1) * d + 1, n);
    r.size = 1;
  } else {
    const long st = o * s - p, en = min(st + k, n + p);
    r.lo = max(st, 0l);
    r.hi = min(en, n);
    r.size = g[14] != 0 ? en - st : r.hi - r.lo;
  }
  return r;
}

// grid (oh*ow, planes). ids is written when with_ids (else a one-element stand-in).
template <typename T>
kernel void pool_fwd(device const T* x [[buffer(0)]], device T* out [[buffer(1)]], device long* ids [[buffer(2)]],
                     constant long* g [[buffer(3)]], constant uint& with_ids [[buffer(4)]],
                     uint2 gid [[thread_position_in_grid]]) {
  const long kind = g[15], w = g[2], oh = g[11], ow = g[12];
  const long plane = gid.y, oy = long(gid.x) / ow, ox = long(gid.x) % ow;
  const Win wy = window(g, kind, g[1], oy, oh, g[3], g[5], g[7], g[9]);
  const Win wx = window(g, kind, w, ox, ow, g[4], g[6], g[8], g[10]);
  device const T* p = x + plane_base(g, plane);
  const long sy = g[kOff + 3], sx = g[kOff + 4];
  const long o = plane * oh * ow + long(gid.x);
  if (kind == 0) {
    const long dh = g[9], dw = g[10];
    float best = -numeric_limits<float>::infinity();
    long bi = wy.lo * w + wx.lo;
    for (long y = wy.lo; y < wy.hi; y += dh)
      for (long xx = wx.lo; xx < wx.hi; xx += dw) {
        const float v = float(p[y * sy + xx * sx]);
        if (v > best || isnan(v)) {
          best = v;
          bi = y * w + xx;
        }
      }
    out[o] = T(best);
    if (with_ids != 0) ids[o] = bi;
    return;
  }
  float s = 0.0f;
  for (long y = wy.lo; y < wy.hi; ++y)
    for (long xx = wx.lo; xx < wx.hi; ++xx) s += float(p[y * sy + xx * sx]);
  const float div = g[13] > 0 ? float(g[13]) : float(wy.size * wx.size);
  out[o] = T(s / div);
}

// The outputs o in [0, out) whose window may hold input index i: o * s in [i + p - span + 1, i + p].
inline void outputs_of(long i, long p, long span, long s, long out, thread long& lo, thread long& hi) {
  const long t = i + p - span + 1;
  lo = t <= 0 ? 0 : (t + s - 1) / s;
  hi = min(out, (i + p) / s + 1);
}

// grid (h*w, planes); dy read through g's layout, ids contiguous; dx (n, c, h, w) contiguous.
template <typename T>
kernel void pool_bwd(device const T* dy [[buffer(0)]], device const long* ids [[buffer(1)]], device T* dx [[buffer(2)]],
                     constant long* g [[buffer(3)]], uint2 gid [[thread_position_in_grid]]) {
  const long kind = g[15], h = g[1], w = g[2], oh = g[11], ow = g[12];
  const long plane = gid.y, y = long(gid.x) / w, xx = long(gid.x) % w;
  device const T* p = dy + plane_base(g, plane);
  const long sy = g[kOff + 3], sx = g[kOff + 4];
  long ylo, yhi, xlo, xhi;
  if (kind == 2) {  // the adaptive windows holding y: o in [floor(y out / n), ceil((y + 1) out / n))
    ylo = y * oh / h, yhi = min(oh, ((y + 1) * oh + h - 1) / h);
    xlo = xx * ow / w, xhi = min(ow, ((xx + 1) * ow + w - 1) / w);
  } else {
    outputs_of(y, g[7], g[9] * (g[3] - 1) + 1, g[5], oh, ylo, yhi);
    outputs_of(xx, g[8], g[10] * (g[4] - 1) + 1, g[6], ow, xlo, xhi);
  }
  float acc = 0.0f;
  if (kind == 0) {
    device const long* pi = ids + plane * oh * ow;
    const long me = y * w + xx;
    for (long oy = ylo; oy < yhi; ++oy)
      for (long ox = xlo; ox < xhi; ++ox)
        if (pi[oy * ow + ox] == me) acc += float(p[oy * sy + ox * sx]);
  } else {
    for (long oy = ylo; oy < yhi; ++oy) {
      const Win wy = window(g, kind, h, oy, oh, g[3], g[5], g[7], 1);
      if (y < wy.lo || y >= wy.hi) continue;
      for (long ox = xlo; ox < xhi; ++ox) {
        const Win wx = window(g, kind, w, ox, ow, g[4], g[6], g[8], 1);
        if (xx < wx.lo || xx >= wx.hi) continue;
        const float div = g[13] > 0 ? float(g[13]) : float(wy.size * wx.size);
        acc += float(p[oy * sy + ox * sx]) / div;
      }
    }
  }
  dx[plane * h * w + long(gid.x)] = T(acc);
}

#define instantiate_pool(tname, T)                                                                            \
  template [[host_name("pool_fwd_" #tname)]] [[kernel]] void pool_fwd<T>(                                     \
      device const T* x [[buffer(0)]], device T* out [[buffer(1)]], device long* ids [[buffer(2)]],            \
      constant long* g [[buffer(3)]], constant uint& with_ids [[buffer(4)]], uint2 gid [[thread_position_in_grid]]); \
  template [[host_name("pool_bwd_" #tname)]] [[kernel]] void pool_bwd<T>(                                     \
      device const T* dy [[buffer(0)]], device const long* ids [[buffer(1)]], device T* dx [[buffer(2)]],      \
      constant long* g [[buffer(3)]], uint2 gid [[thread_position_in_grid]]);
instantiate_pool(float32, float)
instantiate_pool(float16, half)
instantiate_pool(bfloat16, bfloat)
