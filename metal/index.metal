// Indexing kernels: index_select, gather, index_add, scatter_add and index_copy (t[ids] = v), through any
// strides. Indices (int64, uint32 or uint8, any layout) first pass `index_prepare`, which writes them as
// int64 in [0, limit) (negative ones count from the end) and records the first bad position, so the host
// raises before any kernel writes a tensor. index_add and scatter_add give each destination line one
// thread that adds in index order (deterministic and equal to the CPU's sums, for every dtype, with no
// atomics); index_copy writes in parallel, keeping the last of repeated indices through `index_last`.
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

#define instantiate_prepare(tname, I)                                                                        \
  template [[host_name("index_prepare_" #tname)]] [[kernel]] void index_prepare<I>(                           \
      device const I* ids [[buffer(0)]], device long* out [[buffer(1)]], device atomic_uint* bad [[buffer(2)]], \
      constant long* meta [[buffer(3)]], uint gid [[thread_position_in_grid]]);
instantiate_prepare(int64, long)
instantiate_prepare(uint32, uint)
instantiate_prepare(uint8, uchar)

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
