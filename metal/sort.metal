// Sort along one dim, and topk's selection: every line is ordered as (key, index) pairs under a total order
// (NaN largest, ties by index, so the result is stable). Lines whose power-of-two padding fits a
// threadgroup's memory (at most 24 KiB) are bitonic-sorted there by `sort_block` (one threadgroup per line); longer lines go
// through device memory: `sort_init` pads them into scratch, one `sort_step` dispatch per bitonic (k, j)
// stage, `sort_write`. `topk_block` selects the k first of a line without sorting it.
#include <metal_stdlib>
using namespace metal;

// meta, a constant long array: [0] K (line dims, >= 1), [1] element offset, [2] n (line length),
// [3] input stride along the dim, [4] output stride along it, [5] P (power of two >= n),
// [6] descending, then K line sizes, K input strides, K output strides.
constant constexpr int kHead = 7;
constant constexpr uint kPad = 0xffffffffu;  // the index of a padding slot: after every real element

// The type keys compare in (halves through float; the round trip back is exact).
template <typename T> struct Key { typedef T type; };
template <> struct Key<half> { typedef float type; };
template <> struct Key<bfloat> { typedef float type; };

inline bool nan_key(float v) { return v != v; }
inline bool nan_key(long) { return false; }
inline bool nan_key(uint) { return false; }
inline bool nan_key(uchar) { return false; }
inline bool nan_key(int) { return false; }
inline bool nan_key(bool) { return false; }

// Whether (ka, ia) comes before (kb, ib): padding last; ascending puts NaN last and descending first
// (torch's rule); equal keys (NaN equal to NaN) in index order.
template <typename K> inline bool before(K ka, uint ia, K kb, uint ib, bool desc) {
  if (ia == kPad || ib == kPad) return ib == kPad && ia != kPad;
  const bool an = nan_key(ka), bn = nan_key(kb);
  if (an != bn) return desc ? an : bn;
  if (!an && ka != kb) return desc ? ka > kb : ka < kb;
  return ia < ib;
}

// The offsets of line r in the input and the output (row-major over the K line dims).
inline long line_offset(long r, int k, constant long* shape, constant long* strides) {
  long o = 0;
  for (int d = k - 1; d >= 0; --d) {
    o += (r % shape[d]) * strides[d];
    r /= shape[d];
  }
  return o;
}

// One threadgroup per line (grid (threads, lines)); B is the threadgroup capacity in elements.
template <typename T, uint B>
kernel void sort_block(device const T* in [[buffer(0)]], device T* vals [[buffer(1)]], device long* ids [[buffer(2)]],
                       constant long* meta [[buffer(3)]], uint2 tg [[threadgroup_position_in_grid]],
                       uint tid [[thread_index_in_threadgroup]], uint2 tpg [[threads_per_threadgroup]]) {
  typedef typename Key<T>::type K;
  threadgroup K keys[B];
  threadgroup uint idx[B];
  const int kd = int(meta[0]);
  const uint n = uint(meta[2]), P = uint(meta[5]);
  const long is = meta[3], os = meta[4];
  const bool desc = meta[6] != 0;
  constant long* shape = meta + kHead;
  const long r = long(tg.y);
  device const T* src = in + (meta[1] + line_offset(r, kd, shape, shape + kd));
  const long out0 = line_offset(r, kd, shape, shape + 2 * kd);
  for (uint i = tid; i < P; i += tpg.x) {
    keys[i] = i < n ? K(src[long(i) * is]) : K(0);
    idx[i] = i < n ? i : kPad;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint k = 2; k <= P; k <<= 1) {
    for (uint j = k >> 1; j > 0; j >>= 1) {
      for (uint t = tid; t < P / 2; t += tpg.x) {
        const uint a = 2 * t - (t & (j - 1)), b = a + j;
        const bool up = (a & k) == 0;
        const K ka = keys[a], kb = keys[b];
        const uint ia = idx[a], ib = idx[b];
        if (up ? before(kb, ib, ka, ia, desc) : before(ka, ia, kb, ib, desc)) {
          keys[a] = kb;
          keys[b] = ka;
          idx[a] = ib;
          idx[b] = ia;
        }
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
  }
  for (uint i = tid; i < n; i += tpg.x) {
    vals[out0 + long(i) * os] = T(keys[i]);
    ids[out0 + long(i) * os] = long(idx[i]);
  }
}

// Long lines, pass 1: grid (P, lines); line r's padded copy is sk/si[r * P ...].
template <typename T>
kernel void sort_init(device const T* in [[buffer(0)]], device T* sk [[buffer(1)]], device uint* si [[buffer(2)]],
                      constant long* meta [[buffer(3)]], uint2 gid [[thread_position_in_grid]]) {
  const int kd = int(meta[0]);
  const uint n = uint(meta[2]);
  const long P = meta[5];
  constant long* shape = meta + kHead;
  const long r = long(gid.y), i = long(gid.x);
  const long at = r * P + i;
  if (i < long(n)) {
    sk[at] = in[meta[1] + line_offset(r, kd, shape, shape + kd) + i * meta[3]];
    si[at] = uint(i);
  } else {
    sk[at] = T(0);
    si[at] = kPad;
  }
}

// One bitonic stage (k, j) over every line: grid (P / 2, lines).
template <typename T>
kernel void sort_step(device T* sk [[buffer(0)]], device uint* si [[buffer(1)]], constant long* meta [[buffer(2)]],
                      constant uint& k [[buffer(3)]], constant uint& j [[buffer(4)]],
                      uint2 gid [[thread_position_in_grid]]) {
  typedef typename Key<T>::type K;
  const bool desc = meta[6] != 0;
  const long base = long(gid.y) * meta[5];
  const uint t = gid.x, a = 2 * t - (t & (j - 1)), b = a + j;
  const bool up = (a & k) == 0;
  const K ka = K(sk[base + a]), kb = K(sk[base + b]);
  const uint ia = si[base + a], ib = si[base + b];
  if (up ? before(kb, ib, ka, ia, desc) : before(ka, ia, kb, ib, desc)) {
    const T ta = sk[base + a];
    sk[base + a] = sk[base + b];
    sk[base + b] = ta;
    si[base + a] = ib;
    si[base + b] = ia;
  }
}

// Long lines, last pass: grid (n, lines).
template <typename T>
kernel void sort_write(device const T* sk [[buffer(0)]], device const uint* si [[buffer(1)]],
                       device T* vals [[buffer(2)]], device long* ids [[buffer(3)]], constant long* meta [[buffer(4)]],
                       uint2 gid [[thread_position_in_grid]]) {
  const int kd = int(meta[0]);
  constant long* shape = meta + kHead;
  const long r = long(gid.y), i = long(gid.x);
  const long o = line_offset(r, kd, shape, shape + 2 * kd) + i * meta[4];
  vals[o] = sk[r * meta[5] + i];
  ids[o] = long(si[r * meta[5] + i]);
}

// topk's meta: sort's layout with [5] kp (a power of two >= k), [6] largest and [7] k, then K line sizes,
// K input strides, K output strides (of the output, whose dim has size k).
constant constexpr int kTopkHead = 8;

// topk without sorting the line: one threadgroup per line (grid (threads, lines)), threads a power of
// two with threads * kp <= B. Each thread keeps the k best of its elements (i = tid, tid + threads, ...)
// in order in its own kp slots, by insertion behind the worst kept; one bitonic sort of every thread's
// slots then puts the line's k best first.
template <typename T, uint B>
kernel void topk_block(device const T* in [[buffer(0)]], device T* vals [[buffer(1)]], device long* ids [[buffer(2)]],
                       constant long* meta [[buffer(3)]], uint2 tg [[threadgroup_position_in_grid]],
                       uint tid [[thread_index_in_threadgroup]], uint2 tpg [[threads_per_threadgroup]]) {
  typedef typename Key<T>::type K;
  threadgroup K keys[B];
  threadgroup uint idx[B];
  const int kd = int(meta[0]);
  const uint n = uint(meta[2]), kp = uint(meta[5]), k = uint(meta[7]);
  const long is = meta[3], os = meta[4];
  const bool desc = meta[6] != 0;
  constant long* shape = meta + kTopkHead;
  const long r = long(tg.y);
  device const T* src = in + (meta[1] + line_offset(r, kd, shape, shape + kd));
  const long out0 = line_offset(r, kd, shape, shape + 2 * kd);
  const uint nt = tpg.x, M = nt * kp;
  threadgroup K* mk = keys + tid * kp;
  threadgroup uint* mi = idx + tid * kp;
  for (uint j = 0; j < kp; ++j) {
    mk[j] = K(0);
    mi[j] = kPad;
  }
  uint c = 0;
  for (uint i = tid; i < n; i += nt) {
    const K x = K(src[long(i) * is]);
    if (c == k && !before(x, i, mk[k - 1], mi[k - 1], desc)) continue;
    uint p = c < k ? c++ : k - 1;  // the slot x takes, the worse ones moving down
    while (p > 0 && before(x, i, mk[p - 1], mi[p - 1], desc)) {
      mk[p] = mk[p - 1];
      mi[p] = mi[p - 1];
      --p;
    }
    mk[p] = x;
    mi[p] = i;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint kk = 2; kk <= M; kk <<= 1) {
    for (uint j = kk >> 1; j > 0; j >>= 1) {
      for (uint t = tid; t < M / 2; t += nt) {
        const uint a = 2 * t - (t & (j - 1)), b = a + j;
        const bool up = (a & kk) == 0;
        const K ka = keys[a], kb = keys[b];
        const uint ia = idx[a], ib = idx[b];
        if (up ? before(kb, ib, ka, ia, desc) : before(ka, ia, kb, ib, desc)) {
          keys[a] = kb;
          keys[b] = ka;
          idx[a] = ib;
          idx[b] = ia;
        }
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
    }
  }
  for (uint i = tid; i < k; i += nt) {
    vals[out0 + long(i) * os] = T(keys[i]);
    ids[out0 + long(i) * os] = long(idx[i]);
  }
}

#define instantiate_sort(tname, T, B)                                                                          \
  template [[host_name("sort_block_" #tname)]] [[kernel]] void sort_block<T, B>(                              \
      device const T* in [[buffer(0)]], device T* vals [[buffer(1)]], device long* ids [[buffer(2)]],          \
      constant long* meta [[buffer(3)]], uint2 tg [[threadgroup_position_in_grid]],                            \
      uint tid [[thread_index_in_threadgroup]], uint2 tpg [[threads_per_threadgroup]]);                        \
  template [[host_name("sort_init_" #tname)]] [[kernel]] void sort_init<T>(                                   \
      device const T* in [[buffer(0)]], device T* sk [[buffer(1)]], device uint* si [[buffer(2)]],             \
      constant long* meta [[buffer(3)]], uint2 gid [[thread_position_in_grid]]);                               \
  template [[host_name("sort_step_" #tname)]] [[kernel]] void sort_step<T>(                                   \
      device T* sk [[buffer(0)]], device uint* si [[buffer(1)]], constant long* meta [[buffer(2)]],            \
      constant uint& k [[buffer(3)]], constant uint& j [[buffer(4)]], uint2 gid [[thread_position_in_grid]]);  \
  template [[host_name("sort_write_" #tname)]] [[kernel]] void sort_write<T>(                                 \
      device const T* sk [[buffer(0)]], device const uint* si [[buffer(1)]], device T* vals [[buffer(2)]],     \
      device long* ids [[buffer(3)]], constant long* meta [[buffer(4)]], uint2 gid [[thread_position_in_grid]]); \
  template [[host_name("topk_block_" #tname)]] [[kernel]] void topk_block<T, B>(                              \
      device const T* in [[buffer(0)]], device T* vals [[buffer(1)]], device long* ids [[buffer(2)]],          \
      constant long* meta [[buffer(3)]], uint2 tg [[threadgroup_position_in_grid]],                            \
      uint tid [[thread_index_in_threadgroup]], uint2 tpg [[threads_per_threadgroup]]);

// B: a power of two of elements whose key and index fit 24 KiB of threadgroup memory, a margin under
// Metal's 32 KiB (a pipeline's own threadgroup use counts against it too)
instantiate_sort(float32, float, 2048)
instantiate_sort(float16, half, 2048)
instantiate_sort(bfloat16, bfloat, 2048)
instantiate_sort(int64, long, 2048)
instantiate_sort(uint32, uint, 2048)
instantiate_sort(uint8, uchar, 4096)
instantiate_sort(int32, int, 2048)
instantiate_sort(bool, bool, 4096)
