// Indexing kernels: index_select, gather, index_add, scatter_add and index_copy (t[ids] = v), through any
// strides. Indices (int64, int32, uint32 or uint8, any layout) first pass `index_prepare`, which writes them as
// int64 in [0, limit) (negative ones count from the end) and records the first bad position, so the host
// raises before any kernel writes a tensor. index_add and scatter_add give each destination line one
// thread that adds in index order (deterministic and equal to the CPU's sums, for every dtype, with no
// atomics); index_copy writes in parallel, keeping the last of repeated indices through `index_last`.
// scatter_reduce (scatter, sum, prod, mean, amax, amin) gives each line along dim of the indices one
// thread too: no float atomics (their order would change sums run to run), the CPU's results bit for bit;
// uint32 sum/amax/amin, which Metal's 32-bit atomics combine exactly in any order, take one thread per
// element (scatter_atomic_u32).
#include <metal_stdlib>
using namespace metal;

// The offset of flat (row-major) index r over n dims of sizes sh and strides st.
inline long nd_offset(long r, int n, constant long* sh, constant long* st) {
  long off = 0;
  for (int d = n - 1; d >= 0; --d) {
    const long s = sh[d];
    off += (r % s) * st[d];
    r /= s;
  }
  return off;
}

// The offsets, through strides st1 and st2, of flat index r over the dims of sh except `skip`.
inline void nd_offset2_skip(long r, int n, int skip, constant long* sh, constant long* st1, constant long* st2,
                            thread long& o1, thread long& o2) {
  o1 = 0;
  o2 = 0;
  for (int d = n - 1; d >= 0; --d) {
    if (d == skip) continue;
    const long s = sh[d];
    const long i = r % s;
    r /= s;
    o1 += i * st1[d];
    o2 += i * st2[d];
  }
}

// Adds as the CPU does: floats through float with one rounding per add, integers wrapping.
inline float add_elem(float a, float b) { return a + b; }
inline half add_elem(half a, half b) { return half(float(a) + float(b)); }
inline bfloat add_elem(bfloat a, bfloat b) { return bfloat(float(a) + float(b)); }
inline long add_elem(long a, long b) { return as_type<long>(as_type<ulong>(a) + as_type<ulong>(b)); }
inline uint add_elem(uint a, uint b) { return a + b; }
inline uchar add_elem(uchar a, uchar b) { return uchar(uint(a) + uint(b)); }
inline int add_elem(int a, int b) { return as_type<int>(as_type<uint>(a) + as_type<uint>(b)); }
inline bool add_elem(bool a, bool b) { return a || b; }  // torch: a bool sum is or

// meta: [0] count, [1] ndim, [2] offset, [3] limit, then ndim sizes and ndim strides. `bad` starts at
// 0xffffffff and ends at the first bad position; a bad entry keeps its raw value for the error message.
template <typename I>
kernel void index_prepare(device const I* ids [[buffer(0)]], device long* out [[buffer(1)]],
                          device atomic_uint* bad [[buffer(2)]], constant long* meta [[buffer(3)]],
                          uint gid [[thread_position_in_grid]]) {
  if (long(gid) >= meta[0]) return;
  const int nd = int(meta[1]);
  const long limit = meta[3];
  const long raw = long(ids[meta[2] + nd_offset(gid, nd, meta + 4, meta + 4 + nd)]);
  const long v = raw < 0 ? raw + limit : raw;
  if (v < 0 || v >= limit) {
    atomic_fetch_min_explicit(bad, gid, memory_order_relaxed);
    out[gid] = raw;
  } else {
    out[gid] = v;
  }
}

// out (contiguous, the input's shape with dim `dim` of size nids) = in[..., ids[j], ...].
// meta: [0] ndim, [1] dim, [2] offset, [3] nids, [4] total, then ndim input sizes and ndim input strides.
template <typename E>
kernel void index_select(device const E* in [[buffer(0)]], device E* out [[buffer(1)]],
                         device const long* ids [[buffer(2)]], constant long* meta [[buffer(3)]],
                         uint gid [[thread_position_in_grid]], uint grid [[threads_per_grid]]) {
  const int nd = int(meta[0]), dim = int(meta[1]);
  const long nids = meta[3], total = meta[4];
  constant long* sh = meta + 5;
  constant long* st = sh + nd;
  for (long e = gid; e < total; e += grid) {
    long r = e, off = meta[2];
    for (int d = nd - 1; d >= 0; --d) {
      const long s = d == dim ? nids : sh[d];
      const long i = r % s;
      r /= s;
      off += (d == dim ? ids[i] : i) * st[d];
    }
    out[e] = in[off];
  }
}

// out (contiguous, the indices' shape) = in[coords with coords[dim] = ids[e]].
// meta: [0] ndim, [1] dim, [2] offset, [3] total, then ndim index sizes and ndim input strides.
template <typename E>
kernel void gather(device const E* in [[buffer(0)]], device E* out [[buffer(1)]], device const long* ids [[buffer(2)]],
                   constant long* meta [[buffer(3)]], uint gid [[thread_position_in_grid]],
                   uint grid [[threads_per_grid]]) {
  const int nd = int(meta[0]), dim = int(meta[1]);
  const long total = meta[3];
  constant long* sh = meta + 4;
  constant long* st = sh + nd;
  for (long e = gid; e < total; e += grid) {
    long r = e, off = meta[2];
    for (int d = nd - 1; d >= 0; --d) {
      const long i = r % sh[d];
      r /= sh[d];
      if (d != dim) off += i * st[d];
    }
    out[e] = in[off + ids[e] * st[dim]];
  }
}

// dst[..., ids[j], ...] += src[..., j, ...]: one thread per line along dim (all other coordinates fixed),
// walking j in order. meta: [0] ndim, [1] dim, [2] dst offset, [3] src offset, [4] nids, [5] lines,
// then ndim dst sizes, ndim dst strides, ndim src strides.
template <typename T>
kernel void index_add(device T* dst [[buffer(0)]], device const T* src [[buffer(1)]],
                      device const long* ids [[buffer(2)]], constant long* meta [[buffer(3)]],
                      uint gid [[thread_position_in_grid]], uint grid [[threads_per_grid]]) {
  const int nd = int(meta[0]), dim = int(meta[1]);
  const long nids = meta[4], lines = meta[5];
  constant long* sh = meta + 6;
  constant long* dst_st = sh + nd;
  constant long* src_st = dst_st + nd;
  for (long c = gid; c < lines; c += grid) {
    long dbase, sbase;
    nd_offset2_skip(c, nd, dim, sh, dst_st, src_st, dbase, sbase);
    dbase += meta[2];
    sbase += meta[3];
    for (long j = 0; j < nids; ++j) {
      const long di = dbase + ids[j] * dst_st[dim];
      dst[di] = add_elem(dst[di], src[sbase + j * src_st[dim]]);
    }
  }
}

// dst[coords with coords[dim] = ids[e]] += src[e] over the index shape: one thread per line of the index
// tensor along dim, walking it in order. meta: [0] ndim, [1] dim, [2] dst offset, [3] src offset, [4] lines,
// then ndim index sizes, ndim dst strides, ndim src strides. ids are contiguous in the index shape.
template <typename T>
kernel void scatter_add(device T* dst [[buffer(0)]], device const T* src [[buffer(1)]],
                        device const long* ids [[buffer(2)]], constant long* meta [[buffer(3)]],
                        uint gid [[thread_position_in_grid]], uint grid [[threads_per_grid]]) {
  const int nd = int(meta[0]), dim = int(meta[1]);
  const long lines = meta[4];
  constant long* sh = meta + 5;
  constant long* dst_st = sh + nd;
  constant long* src_st = dst_st + nd;
  long inner = 1;  // the contiguous stride of dim in the index shape
  for (int d = nd - 1; d > dim; --d) inner *= sh[d];
  const long len = sh[dim];
  for (long c = gid; c < lines; c += grid) {
    long dbase, sbase;
    nd_offset2_skip(c, nd, dim, sh, dst_st, src_st, dbase, sbase);
    dbase += meta[2];
    sbase += meta[3];
    const long ibase = (c / inner) * len * inner + c % inner;  // line c's first index, contiguous order
    for (long i = 0; i < len; ++i) {
      const long di = dbase + ids[ibase + i * inner] * dst_st[dim];
      dst[di] = add_elem(dst[di], src[sbase + i * src_st[dim]]);
    }
  }
}

// win[ids[j]] = the last j + 1 that names it (win starts at zeros): index_copy's repeated indices keep
// the last slice, as on the CPU. meta: [0] nids.
kernel void index_last(device const long* ids [[buffer(0)]], device atomic_uint* win [[buffer(1)]],
                       constant long* meta [[buffer(2)]], uint gid [[thread_position_in_grid]]) {
  if (long(gid) >= meta[0]) return;
  atomic_fetch_max_explicit(win + ids[gid], gid + 1, memory_order_relaxed);
}

// dst[..., ids[j], ...] = src[..., j, ...] for the winning j of each index; adjacent threads take adjacent
// lines. meta: as index_add's.
template <typename E>
kernel void index_copy(device E* dst [[buffer(0)]], device const E* src [[buffer(1)]],
                       device const long* ids [[buffer(2)]], device const uint* win [[buffer(3)]],
                       constant long* meta [[buffer(4)]], uint gid [[thread_position_in_grid]],
                       uint grid [[threads_per_grid]]) {
  const int nd = int(meta[0]), dim = int(meta[1]);
  const long nids = meta[4], lines = meta[5];
  constant long* sh = meta + 6;
  constant long* dst_st = sh + nd;
  constant long* src_st = dst_st + nd;
  const long total = nids * lines;
  for (long e = gid; e < total; e += grid) {
    const long j = e / lines, c = e % lines;
    const long id = ids[j];
    if (long(win[id]) != j + 1) continue;
    long dbase, sbase;
    nd_offset2_skip(c, nd, dim, sh, dst_st, src_st, dbase, sbase);
    dst[meta[2] + dbase + id * dst_st[dim]] = src[meta[3] + sbase + j * src_st[dim]];
  }
}


// ---- scatter_reduce. OP: 0 scatter (set), 1 sum, 2 prod, 3 mean, 4 amax, 5 amin (ScatterOp's order).
// Halves combine in float with one rounding per step; integers wrap; amax/amin propagate NaN (torch's rule).
template <typename T> struct sr_acc { typedef T type; };
template <> struct sr_acc<half> { typedef float type; };
template <> struct sr_acc<bfloat> { typedef float type; };
inline float sr_mul(float a, float b) { return a * b; }
inline long sr_mul(long a, long b) { return as_type<long>(as_type<ulong>(a) * as_type<ulong>(b)); }
inline uint sr_mul(uint a, uint b) { return a * b; }
inline uchar sr_mul(uchar a, uchar b) { return uchar(uint(a) * uint(b)); }
inline int sr_mul(int a, int b) { return as_type<int>(as_type<uint>(a) * as_type<uint>(b)); }
inline bool sr_mul(bool a, bool b) { return a && b; }
inline float sr_low(float) { return -numeric_limits<float>::infinity(); }
inline long sr_low(long) { return as_type<long>(0x8000000000000000ul); }
inline uint sr_low(uint) { return 0u; }
inline uchar sr_low(uchar) { return uchar(0); }
inline int sr_low(int) { return -2147483647 - 1; }
inline bool sr_low(bool) { return false; }
inline float sr_high(float) { return numeric_limits<float>::infinity(); }
inline long sr_high(long) { return as_type<long>(0x7ffffffffffffffful); }
inline uint sr_high(uint) { return 0xffffffffu; }
inline uchar sr_high(uchar) { return uchar(255); }
inline int sr_high(int) { return 2147483647; }
inline bool sr_high(bool) { return true; }
inline float sr_div(float a, uint n) { return a / float(n); }
inline long sr_div(long a, uint n) {  // floor division, torch's rounding for integer means
  const long q = a / long(n);
  return (q * long(n) != a && a < 0) ? q - 1 : q;
}
inline int sr_div(int a, uint n) {
  const int q = a / int(n);
  return (q * int(n) != a && a < 0) ? q - 1 : q;
}
inline uint sr_div(uint a, uint n) { return a / n; }
inline uchar sr_div(uchar a, uint n) { return uchar(uint(a) / n); }

template <int OP, typename A> inline A sr_combine(A a, A b) {
  if (OP == 0) return b;
  if (OP == 1 || OP == 3) return add_elem(a, b);
  if (OP == 2) return sr_mul(a, b);
  if (OP == 4) return (b != b || a < b) ? b : a;
  return (b != b || b < a) ? b : a;
}
template <int OP, typename A> inline A sr_identity() {
  if (OP == 2) return A(1);
  if (OP == 4) return sr_low(A(0));
  if (OP == 5) return sr_high(A(0));
  return A(0);
}

// dst[coords with coords[dim] = ids[e]] combined with src[e] over the index shape: one thread per line
// along dim, walking it in order (without include_self, its targets first take the op's identity; mean
// divides each target once, by the count in `cnt`, which it then clears). meta: [0] ndim, [1] dim,
// [2] dst offset, [3] src offset, [4] lines, [5] include_self, then ndim index sizes, ndim dst strides,
// ndim src strides. ids are contiguous in the index shape; cnt (mean only) holds a zero per dst element.
template <typename T, int OP>
kernel void scatter_reduce(device T* dst [[buffer(0)]], device const T* src [[buffer(1)]],
                           device const long* ids [[buffer(2)]], device uint* cnt [[buffer(3)]],
                           constant long* meta [[buffer(4)]], uint gid [[thread_position_in_grid]],
                           uint grid [[threads_per_grid]]) {
  typedef typename sr_acc<T>::type A;
  const int nd = int(meta[0]), dim = int(meta[1]);
  const long lines = meta[4];
  const bool self = meta[5] != 0;
  constant long* sh = meta + 6;
  constant long* dst_st = sh + nd;
  constant long* src_st = dst_st + nd;
  long inner = 1;
  for (int d = nd - 1; d > dim; --d) inner *= sh[d];
  const long len = sh[dim];
  for (long c = gid; c < lines; c += grid) {
    long dbase, sbase;
    nd_offset2_skip(c, nd, dim, sh, dst_st, src_st, dbase, sbase);
    dbase += meta[2];
    sbase += meta[3];
    const long ibase = (c / inner) * len * inner + c % inner;
    if (!self && OP != 0)
      for (long i = 0; i < len; ++i) dst[dbase + ids[ibase + i * inner] * dst_st[dim]] = T(sr_identity<OP, A>());
    for (long i = 0; i < len; ++i) {
      const long di = dbase + ids[ibase + i * inner] * dst_st[dim];
      dst[di] = T(sr_combine<OP, A>(A(dst[di]), A(src[sbase + i * src_st[dim]])));
      if (OP == 3) cnt[di - meta[2]] += 1u;
    }
    if (OP == 3)
      for (long i = 0; i < len; ++i) {
        const long di = dbase + ids[ibase + i * inner] * dst_st[dim];
        const uint n = cnt[di - meta[2]];
        if (n != 0u) {
          dst[di] = T(sr_div(A(dst[di]), n + (self ? 1u : 0u)));
          cnt[di - meta[2]] = 0u;
        }
      }
  }
}

// uint32 sum (1), amax (4), amin (5) through atomics: one thread per index element; with FILL, the pass
// before (include_self=False) that sets every indexed element to the op's identity. meta: as
// scatter_reduce's, with [4] the number of index elements.
template <int OP, bool FILL>
kernel void scatter_atomic_u32(device atomic_uint* dst [[buffer(0)]], device const uint* src [[buffer(1)]],
                               device const long* ids [[buffer(2)]], constant long* meta [[buffer(3)]],
                               uint gid [[thread_position_in_grid]], uint grid [[threads_per_grid]]) {
  const int nd = int(meta[0]), dim = int(meta[1]);
  const long total = meta[4];
  constant long* sh = meta + 6;
  constant long* dst_st = sh + nd;
  constant long* src_st = dst_st + nd;
  for (long e = gid; e < total; e += grid) {
    long r = e, doff = meta[2], soff = meta[3];
    for (int d = nd - 1; d >= 0; --d) {
      const long i = r % sh[d];
      r /= sh[d];
      doff += (d == dim ? ids[e] : i) * dst_st[d];
      soff += i * src_st[d];
    }
    if (FILL) {
      atomic_store_explicit(dst + doff, OP == 5 ? 0xffffffffu : 0u, memory_order_relaxed);
    } else if (OP == 1) {
      atomic_fetch_add_explicit(dst + doff, src[soff], memory_order_relaxed);
    } else if (OP == 4) {
      atomic_fetch_max_explicit(dst + doff, src[soff], memory_order_relaxed);
    } else {
      atomic_fetch_min_explicit(dst + doff, src[soff], memory_order_relaxed);
    }
  }
}

#define instantiate_prepare(tname, I)                                                                        \
  template [[host_name("index_prepare_" #tname)]] [[kernel]] void index_prepare<I>(                           \
      device const I* ids [[buffer(0)]], device long* out [[buffer(1)]], device atomic_uint* bad [[buffer(2)]], \
      constant long* meta [[buffer(3)]], uint gid [[thread_position_in_grid]]);
instantiate_prepare(int64, long)
instantiate_prepare(uint32, uint)
instantiate_prepare(uint8, uchar)
instantiate_prepare(int32, int)

// Data movement depends on the element's size alone: one instantiation per width in bytes.
#define instantiate_move(bytes, E)                                                                           \
  template [[host_name("index_select_" #bytes)]] [[kernel]] void index_select<E>(                             \
      device const E* in [[buffer(0)]], device E* out [[buffer(1)]], device const long* ids [[buffer(2)]],    \
      constant long* meta [[buffer(3)]], uint gid [[thread_position_in_grid]], uint grid [[threads_per_grid]]); \
  template [[host_name("gather_" #bytes)]] [[kernel]] void gather<E>(                                         \
      device const E* in [[buffer(0)]], device E* out [[buffer(1)]], device const long* ids [[buffer(2)]],    \
      constant long* meta [[buffer(3)]], uint gid [[thread_position_in_grid]], uint grid [[threads_per_grid]]); \
  template [[host_name("index_copy_" #bytes)]] [[kernel]] void index_copy<E>(                                 \
      device E* dst [[buffer(0)]], device const E* src [[buffer(1)]], device const long* ids [[buffer(2)]],   \
      device const uint* win [[buffer(3)]], constant long* meta [[buffer(4)]],                               \
      uint gid [[thread_position_in_grid]], uint grid [[threads_per_grid]]);
instantiate_move(1, uchar)
instantiate_move(2, ushort)
instantiate_move(4, uint)
instantiate_move(8, ulong)

#define instantiate_add(tname, T)                                                                            \
  template [[host_name("index_add_" #tname)]] [[kernel]] void index_add<T>(                                   \
      device T* dst [[buffer(0)]], device const T* src [[buffer(1)]], device const long* ids [[buffer(2)]],   \
      constant long* meta [[buffer(3)]], uint gid [[thread_position_in_grid]], uint grid [[threads_per_grid]]); \
  template [[host_name("scatter_add_" #tname)]] [[kernel]] void scatter_add<T>(                               \
      device T* dst [[buffer(0)]], device const T* src [[buffer(1)]], device const long* ids [[buffer(2)]],   \
      constant long* meta [[buffer(3)]], uint gid [[thread_position_in_grid]], uint grid [[threads_per_grid]]);
instantiate_add(float32, float)
instantiate_add(float16, half)
instantiate_add(bfloat16, bfloat)
instantiate_add(int64, long)
instantiate_add(uint32, uint)
instantiate_add(uint8, uchar)
instantiate_add(int32, int)
instantiate_add(bool, bool)

#define instantiate_scatter_op(tname, T, oname, OP)                                                          \
  template [[host_name("scatter_reduce_" #oname "_" #tname)]] [[kernel]] void scatter_reduce<T, OP>(          \
      device T* dst [[buffer(0)]], device const T* src [[buffer(1)]], device const long* ids [[buffer(2)]],   \
      device uint* cnt [[buffer(3)]], constant long* meta [[buffer(4)]], uint gid [[thread_position_in_grid]], \
      uint grid [[threads_per_grid]]);
#define instantiate_scatter(tname, T)           \
  instantiate_scatter_op(tname, T, scatter, 0)  \
  instantiate_scatter_op(tname, T, sum, 1)      \
  instantiate_scatter_op(tname, T, prod, 2)     \
  instantiate_scatter_op(tname, T, mean, 3)     \
  instantiate_scatter_op(tname, T, amax, 4)     \
  instantiate_scatter_op(tname, T, amin, 5)
instantiate_scatter(float32, float)
instantiate_scatter(float16, half)
instantiate_scatter(bfloat16, bfloat)
instantiate_scatter(int64, long)
instantiate_scatter(uint32, uint)
instantiate_scatter(uint8, uchar)
instantiate_scatter(int32, int)
// bool as torch: sum and amax are or, prod and amin are and; mean is refused (index.cpp)
instantiate_scatter_op(bool, bool, scatter, 0)
instantiate_scatter_op(bool, bool, sum, 1)
instantiate_scatter_op(bool, bool, prod, 2)
instantiate_scatter_op(bool, bool, amax, 4)
instantiate_scatter_op(bool, bool, amin, 5)

#define instantiate_atomic_u32(oname, OP, fill, FILL)                                                       \
  template [[host_name("scatter_atomic_u32_" #oname #fill)]] [[kernel]] void scatter_atomic_u32<OP, FILL>(   \
      device atomic_uint* dst [[buffer(0)]], device const uint* src [[buffer(1)]],                          \
      device const long* ids [[buffer(2)]], constant long* meta [[buffer(3)]],                              \
      uint gid [[thread_position_in_grid]], uint grid [[threads_per_grid]]);
instantiate_atomic_u32(sum, 1, , false)
instantiate_atomic_u32(amax, 4, , false)
instantiate_atomic_u32(amin, 5, , false)
instantiate_atomic_u32(sum, 1, _fill, true)
instantiate_atomic_u32(amax, 4, _fill, true)
instantiate_atomic_u32(amin, 5, _fill, true)
