// Scans along one dim (cumsum, cumprod, cummax, cummin; exclusive and reverse forms): one simdgroup per
// line, looping over the line in chunks of 32 with a carry. Float sums and products use the simdgroup
// prefix builtins; integer sums/products (64-bit, wrapping) and max/min (value + index) a shuffle-up scan.
#include <metal_stdlib>
using namespace metal;

// meta, a constant long array: [0] K (line dims, >= 1), [1] element offset, [2] n, [3] input stride along
// the dim, [4] output stride along it, [5] exclusive, [6] reverse, then K line sizes, K input strides,
// K output strides.
constant constexpr int kHead = 7;

inline long line_offset(long r, int k, constant long* shape, constant long* strides) {
  long o = 0;
  for (int d = k - 1; d >= 0; --d) {
    o += (r % shape[d]) * strides[d];
    r /= shape[d];
  }
  return o;
}

inline float shfl_up(float v, ushort d) { return simd_shuffle_up(v, d); }
inline uint shfl_up(uint v, ushort d) { return simd_shuffle_up(v, d); }
inline uchar shfl_up(uchar v, ushort d) { return uchar(simd_shuffle_up(uint(v), d)); }
inline ulong shfl_up(ulong v, ushort d) { return as_type<ulong>(simd_shuffle_up(as_type<uint2>(v), d)); }
inline long shfl_up(long v, ushort d) { return as_type<long>(simd_shuffle_up(as_type<uint2>(v), d)); }
inline int shfl_up(int v, ushort d) { return simd_shuffle_up(v, d); }
inline bool shfl_up(bool v, ushort d) { return simd_shuffle_up(uint(v), d) != 0u; }
inline float bcast(float v, ushort l) { return simd_broadcast(v, l); }
inline uint bcast(uint v, ushort l) { return simd_broadcast(v, l); }
inline uchar bcast(uchar v, ushort l) { return uchar(simd_broadcast(uint(v), l)); }
inline ulong bcast(ulong v, ushort l) { return as_type<ulong>(simd_broadcast(as_type<uint2>(v), l)); }
inline long bcast(long v, ushort l) { return as_type<long>(simd_broadcast(as_type<uint2>(v), l)); }
inline int bcast(int v, ushort l) { return simd_broadcast(v, l); }
inline bool bcast(bool v, ushort l) { return simd_broadcast(uint(v), l) != 0u; }

inline bool is_nan(float v) { return v != v; }
inline bool is_nan(long) { return false; }
inline bool is_nan(uint) { return false; }
inline bool is_nan(uchar) { return false; }
inline bool is_nan(int) { return false; }
inline bool is_nan(bool) { return false; }

// The running state; `i` is used by max/min only.
template <typename A> struct St {
  A v;
  long i;
};
template <typename A> inline St<A> st_up(St<A> s, ushort d) { return St<A>{shfl_up(s.v, d), shfl_up(s.i, d)}; }
template <typename A> inline St<A> st_bcast(St<A> s, ushort l) { return St<A>{bcast(s.v, l), bcast(s.i, l)}; }

// Float sum / product: the prefix builtins.
struct SumF {
  static bool has_index() { return false; }
  typedef float A;
  static St<A> ident() { return St<A>{0.0f, 0}; }
  static St<A> combine(St<A> a, St<A> b) { return St<A>{a.v + b.v, 0}; }
  static St<A> scan(St<A> s, uint) { return St<A>{simd_prefix_inclusive_sum(s.v), 0}; }
};
struct ProdF {
  static bool has_index() { return false; }
  typedef float A;
  static St<A> ident() { return St<A>{1.0f, 0}; }
  static St<A> combine(St<A> a, St<A> b) { return St<A>{a.v * b.v, 0}; }
  static St<A> scan(St<A> s, uint) { return St<A>{simd_prefix_inclusive_product(s.v), 0}; }
};
// Hillis-Steele over the simdgroup for any associative combine (a is the earlier operand).
template <typename Op> inline St<typename Op::A> hs_scan(St<typename Op::A> s, uint lane) {
  for (ushort o = 1; o < 32; o <<= 1) {
    const St<typename Op::A> t = st_up(s, o);
    if (lane >= o) s = Op::combine(t, s);
  }
  return s;
}
struct SumI {
  static bool has_index() { return false; }
  typedef ulong A;
  static St<A> ident() { return St<A>{0ul, 0}; }
  static St<A> combine(St<A> a, St<A> b) { return St<A>{a.v + b.v, 0}; }
  static St<A> scan(St<A> s, uint lane) { return hs_scan<SumI>(s, lane); }
};
struct ProdI {
  static bool has_index() { return false; }
  typedef ulong A;
  static St<A> ident() { return St<A>{1ul, 0}; }
  static St<A> combine(St<A> a, St<A> b) { return St<A>{a.v * b.v, 0}; }
  static St<A> scan(St<A> s, uint lane) { return hs_scan<ProdI>(s, lane); }
};
// Max / min: the later element wins a tie and a NaN wins (and stays): torch's rule, an associative max
// over (value with NaN on top, scan position).
template <typename AT, bool kMax> struct Ext {
  static bool has_index() { return true; }
  typedef AT A;
  static St<A> ident() { return St<A>{A(0), -1}; }  // i = -1: no element yet
  static St<A> combine(St<A> a, St<A> b) {
    if (b.i < 0) return a;
    if (a.i < 0) return b;
    const bool take = is_nan(b.v) || (!is_nan(a.v) && (kMax ? b.v >= a.v : b.v <= a.v));
    return take ? b : a;
  }
  static St<A> scan(St<A> s, uint lane) { return hs_scan<Ext>(s, lane); }
};

// grid (32, lines), threadgroups (32, lines per group): simdgroup = line.
template <typename T, typename O, typename Op>
kernel void scan_lines(device const T* in [[buffer(0)]], device O* out [[buffer(1)]], device long* ids [[buffer(2)]],
                       constant long* meta [[buffer(3)]], constant uint& lines [[buffer(4)]],
                       uint2 gid [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  typedef typename Op::A A;
  const int kd = int(meta[0]);
  const long n = meta[2], is = meta[3], os = meta[4];
  const bool exclusive = meta[5] != 0, reverse = meta[6] != 0;
  constant long* shape = meta + kHead;
  const long r = long(gid.y);
  if (r >= long(lines)) return;
  device const T* src = in + (meta[1] + line_offset(r, kd, shape, shape + kd));
  const long o0 = line_offset(r, kd, shape, shape + 2 * kd);
  St<A> carry = Op::ident();
  for (long base = 0; base < n; base += 32) {
    const long k = base + long(lane);
    const bool valid = k < n;
    const long p = reverse ? n - 1 - k : k;
    St<A> s = valid ? St<A>{A(src[p * is]), p} : Op::ident();
    s = Op::combine(carry, Op::scan(s, lane));
    const St<A> prev = st_up(s, 1);
    const St<A> w = exclusive ? (lane == 0 ? carry : prev) : s;
    if (valid) {
      out[o0 + p * os] = O(w.v);
      if (Op::has_index()) ids[o0 + p * os] = w.i;
    }
    carry = st_bcast(s, 31);
  }
}

#define instantiate_scan(name, tname, T, O, Op)                                                             \
  template [[host_name("scan_" #name "_" #tname)]] [[kernel]] void scan_lines<T, O, Op>(                    \
      device const T* in [[buffer(0)]], device O* out [[buffer(1)]], device long* ids [[buffer(2)]],        \
      constant long* meta [[buffer(3)]], constant uint& lines [[buffer(4)]],                                 \
      uint2 gid [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]);
#define MSL_COMMA ,
#define instantiate_scan_float(tname, T)                            \
  instantiate_scan(cumsum, tname, T, T, SumF)                       \
  instantiate_scan(cumprod, tname, T, T, ProdF)                     \
  instantiate_scan(cummax, tname, T, T, Ext<float MSL_COMMA true>)  \
  instantiate_scan(cummin, tname, T, T, Ext<float MSL_COMMA false>)
#define instantiate_scan_int(tname, T)                           \
  instantiate_scan(cumsum, tname, T, long, SumI)                 \
  instantiate_scan(cumprod, tname, T, long, ProdI)               \
  instantiate_scan(cummax, tname, T, T, Ext<T MSL_COMMA true>)   \
  instantiate_scan(cummin, tname, T, T, Ext<T MSL_COMMA false>)

instantiate_scan_float(float32, float)
instantiate_scan_float(float16, half)
instantiate_scan_float(bfloat16, bfloat)
instantiate_scan_int(int64, long)
instantiate_scan_int(uint32, uint)
instantiate_scan_int(uint8, uchar)
instantiate_scan_int(int32, int)  // an int32 element widens with its sign into the 64-bit sum/product
instantiate_scan_int(bool, bool)  // cumsum/cumprod of bool count in int64 (torch)
