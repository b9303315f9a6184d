// Reductions (sum, max, min, argmax, argmin, the int64 sum of integers) over any set of dims of a strided
// input. Two kernels: `reduce_rows` gives each output a row of threads (32 wide: one simdgroup, several
// outputs per threadgroup; wider: one looped threadgroup per output), for reduced elements that lie close
// together; `reduce_cols` gives each output one thread column (adjacent outputs, adjacent threads), for
// reducing dims other than the innermost. Both read the reduced and kept dims as shape/stride arrays.
// f32/f16/bf16 accumulate in float; integer sums in 64 bits (stored back, they wrap like the dtype, as on
// the CPU); integer max/min compare in the type itself.
#include <metal_stdlib>
using namespace metal;

// meta, a constant long array shared by both kernels:
//   [0] kept ndim K, [1] reduced ndim R, [2] element offset, [3] reduced count, [4] output count,
//   [5..5+K) kept shape, [5+K..5+2K) kept strides, then R reduced sizes and R reduced strides.
constant constexpr int kMetaHead = 5;

template <typename T> struct Acc { typedef T type; };
template <> struct Acc<half> { typedef float type; };
template <> struct Acc<bfloat> { typedef float type; };
template <typename T> struct SumAcc { typedef ulong type; };  // integers: two's complement, wraps
template <> struct SumAcc<float> { typedef float type; };
template <> struct SumAcc<half> { typedef float type; };
template <> struct SumAcc<bfloat> { typedef float type; };

// The identities of max and min (-inf/+inf for floats, so a row of infinities keeps its value).
template <typename S> struct Lim {
  static S lo() { return S(0); }
  static S hi() { return S(0); }
};
template <> struct Lim<float> {
  static float lo() { return -numeric_limits<float>::infinity(); }
  static float hi() { return numeric_limits<float>::infinity(); }
};
template <> struct Lim<long> {
  static long lo() { return -9223372036854775807L - 1; }
  static long hi() { return 9223372036854775807L; }
};
template <> struct Lim<uint> {
  static uint lo() { return 0u; }
  static uint hi() { return 0xffffffffu; }
};
template <> struct Lim<uchar> {
  static uchar lo() { return uchar(0); }
  static uchar hi() { return uchar(255); }
};
template <> struct Lim<int> {
  static int lo() { return -2147483647 - 1; }
  static int hi() { return 2147483647; }
};
template <> struct Lim<bool> {
  static bool lo() { return false; }
  static bool hi() { return true; }
};

inline bool is_nan(float v) { return v != v; }
inline bool is_nan(long) { return false; }
inline bool is_nan(uint) { return false; }
inline bool is_nan(uchar) { return false; }
inline bool is_nan(int) { return false; }
inline bool is_nan(bool) { return false; }

// simd_shuffle_xor for every accumulator type (64-bit values travel as two 32-bit halves).
inline float shfl(float v, ushort m) { return simd_shuffle_xor(v, m); }
inline uint shfl(uint v, ushort m) { return simd_shuffle_xor(v, m); }
inline uchar shfl(uchar v, ushort m) { return uchar(simd_shuffle_xor(uint(v), m)); }
inline int shfl(int v, ushort m) { return simd_shuffle_xor(v, m); }
inline bool shfl(bool v, ushort m) { return simd_shuffle_xor(uint(v), m) != 0u; }
inline ulong shfl(ulong v, ushort m) { return as_type<ulong>(simd_shuffle_xor(as_type<uint2>(v), m)); }
inline long shfl(long v, ushort m) { return as_type<long>(simd_shuffle_xor(as_type<uint2>(v), m)); }

// A thread's own running sum: compensated (Kahan) for floats, so a long row loses no small addends to
// a large partial sum (1e8 + a million 1s); integers wrap and need none. The kernels compile without
// fast math, which keeps the compensation.
inline void kahan_add(thread float& s, thread float& c, float x) {
  const float y = x - c;
  const float t = s + y;
  c = isfinite(t) ? (t - s) - y : 0.0f;  // past an infinity the plain sum is the answer (no inf - inf)
  s = t;
}
inline void kahan_add(thread ulong& s, thread ulong&, ulong x) { s += x; }
inline float kahan_done(float s, float c) { return s - c; }
inline ulong kahan_done(ulong s, ulong) { return s; }

template <typename T> struct SumOp {
  typedef typename SumAcc<T>::type S;
  static S init() { return S(0); }
  static S make(T x, long) { return S(x); }
  static S combine(S a, S b) { return a + b; }
  static void add(thread S& acc, thread S& comp, T x, long) { kahan_add(acc, comp, S(x)); }
  static S done(S acc, S comp) { return kahan_done(acc, comp); }
  static S shuffle(S s, ushort m) { return shfl(s, m); }
  template <typename O> static O result(S s) { return O(s); }
  // Partials in threadgroup memory: the value alone (the index array is unused).
  typedef S V;
  static void put(threadgroup V* pv, threadgroup long*, uint k, S s) { pv[k] = s; }
  static S get(threadgroup V* pv, threadgroup long*, uint k) { return pv[k]; }
  static void store(device V* pv, device long*, long k, S s) { pv[k] = s; }
  static S load(device const V* pv, device const long*, long k) { return pv[k]; }
};

// max/min propagate NaN, as numpy and the CPU kernels: a NaN operand wins.
template <typename T, bool kMax> struct ExtremeOp {
  typedef typename Acc<T>::type S;
  static S init() { return kMax ? Lim<S>::lo() : Lim<S>::hi(); }
  static S make(T x, long) { return S(x); }
  static S combine(S a, S b) { return (kMax ? b > a : b < a) || is_nan(b) ? b : a; }
  static void add(thread S& acc, thread S&, T x, long i) { acc = combine(acc, make(x, i)); }
  static S done(S acc, S) { return acc; }
  static S shuffle(S s, ushort m) { return shfl(s, m); }
  template <typename O> static O result(S s) { return O(s); }
  // Partials in threadgroup memory: the value alone (the index array is unused).
  typedef S V;
  static void put(threadgroup V* pv, threadgroup long*, uint k, S s) { pv[k] = s; }
  static S get(threadgroup V* pv, threadgroup long*, uint k) { return pv[k]; }
  static void store(device V* pv, device long*, long k, S s) { pv[k] = s; }
  static S load(device const V* pv, device const long*, long k) { return pv[k]; }
};

template <typename A> struct ArgState {
  A v;
  long i;
};
// argmax/argmin: the first index of the extreme value; a NaN beats every number (torch's rule), and the
// first NaN wins. The rule depends on the indices only, so any combination order gives the same answer.
template <typename T, bool kMax> struct ArgOp {
  typedef typename Acc<T>::type A;
  typedef ArgState<A> S;
  static S init() {
    S s;
    s.v = kMax ? Lim<A>::lo() : Lim<A>::hi();
    s.i = Lim<long>::hi();
    return s;
  }
  static S make(T x, long i) {
    S s;
    s.v = A(x);
    s.i = i;
    return s;
  }
  static S combine(S a, S b) {
    const bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an || bn) return (an && bn) ? (b.i < a.i ? b : a) : (an ? a : b);
    if (kMax ? b.v > a.v : b.v < a.v) return b;
    if (kMax ? a.v > b.v : a.v < b.v) return a;
    return b.i < a.i ? b : a;
  }
  static void add(thread S& acc, thread S&, T x, long i) { acc = combine(acc, make(x, i)); }
  static S done(S acc, S) { return acc; }
  static S shuffle(S s, ushort m) {
    S r;
    r.v = shfl(s.v, m);
    r.i = shfl(s.i, m);
    return r;
  }
  template <typename O> static O result(S s) { return O(s.i); }
  // Partials in threadgroup memory: values and indices in two arrays (a struct cannot be copied across
  // address spaces in clang's C++, which the static check uses).
  typedef A V;
  static void put(threadgroup V* pv, threadgroup long* pi, uint k, S s) {
    pv[k] = s.v;
    pi[k] = s.i;
  }
  static S get(threadgroup V* pv, threadgroup long* pi, uint k) {
    S s;
    s.v = pv[k];
    s.i = pi[k];
    return s;
  }
  static void store(device V* pv, device long* pi, long k, S s) {
    pv[k] = s.v;
    pi[k] = s.i;
  }
  static S load(device const V* pv, device const long* pi, long k) {
    S s;
    s.v = pv[k];
    s.i = pi[k];
    return s;
  }
};

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

// Each output gets a row of tpg.x threads (a multiple of 32): grid (tpg.x, outputs). A 32-wide row is one
// simdgroup; a wider one combines its simdgroups' partials in threadgroup memory.
template <typename Op, typename T, typename O>
kernel void reduce_rows(device const T* in [[buffer(0)]], device O* out [[buffer(1)]],
                        constant long* meta [[buffer(2)]], uint2 gid [[thread_position_in_grid]],
                        uint2 tpos [[thread_position_in_threadgroup]], uint2 tpg [[threads_per_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]]) {
  typedef typename Op::S S;
  typedef typename Op::V V;
  threadgroup V pv[32];
  threadgroup long pi[32];
  const int kn = int(meta[0]), rn = int(meta[1]);
  const long nred = meta[3];
  constant long* ksh = meta + kMetaHead;
  constant long* rsh = ksh + 2 * kn;
  const long row = long(gid.y);
  device const T* p = in + (meta[2] + nd_offset(row, kn, ksh, ksh + kn));
  S acc = Op::init(), comp = Op::init();
  if (rn == 1 && rsh[1] == 1) {  // one contiguous run: 4 consecutive elements per thread and step
    const long step = long(tpg.x) * 4;
    long i = long(gid.x) * 4;
    for (; i + 4 <= nred; i += step) {
      for (int k = 0; k < 4; ++k) Op::add(acc, comp, p[i + k], i + k);
    }
    for (; i < nred; ++i) Op::add(acc, comp, p[i], i);  // the run's last, partial step
  } else if (rn == 1) {
    const long st = rsh[1];
    for (long i = gid.x; i < nred; i += tpg.x) Op::add(acc, comp, p[i * st], i);
  } else {
    for (long i = gid.x; i < nred; i += tpg.x) Op::add(acc, comp, p[nd_offset(i, rn, rsh, rsh + rn)], i);
  }
  acc = Op::done(acc, comp);
  for (ushort o = 16; o > 0; o /= 2) acc = Op::combine(acc, Op::shuffle(acc, o));
  if (tpg.x > 32) {
    const uint per_row = tpg.x / 32;
    if (lane == 0) Op::put(pv, pi, sg, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tpos.x < 32) {
      acc = lane < per_row ? Op::get(pv, pi, tpos.y * per_row + lane) : Op::init();
      for (ushort o = 16; o > 0; o /= 2) acc = Op::combine(acc, Op::shuffle(acc, o));
    }
  }
  if (tpos.x == 0) out[row] = Op::template result<O>(acc);
}

// Each output gets a column of tpg.y threads: grid (outputs, tpg.y). Thread y takes reduced elements
// y, y + tpg.y, ...; the column's partials are then combined in order by its first thread.
template <typename Op, typename T, typename O>
kernel void reduce_cols(device const T* in [[buffer(0)]], device O* out [[buffer(1)]],
                        constant long* meta [[buffer(2)]], uint2 gid [[thread_position_in_grid]],
                        uint2 tpos [[thread_position_in_threadgroup]], uint2 tpg [[threads_per_threadgroup]]) {
  typedef typename Op::S S;
  typedef typename Op::V V;
  threadgroup V pv[1024];
  threadgroup long pi[1024];
  const int kn = int(meta[0]), rn = int(meta[1]);
  const long nred = meta[3];
  constant long* ksh = meta + kMetaHead;
  constant long* rsh = ksh + 2 * kn;
  const long col = long(gid.x);
  device const T* p = in + (meta[2] + nd_offset(col, kn, ksh, ksh + kn));
  S acc = Op::init(), comp = Op::init();
  if (rn == 1) {
    const long st = rsh[1];
    for (long i = gid.y; i < nred; i += tpg.y) Op::add(acc, comp, p[i * st], i);
  } else {
    for (long i = gid.y; i < nred; i += tpg.y) Op::add(acc, comp, p[nd_offset(i, rn, rsh, rsh + rn)], i);
  }
  acc = Op::done(acc, comp);
  if (tpg.y > 1) {
    Op::put(pv, pi, tpos.y * tpg.x + tpos.x, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tpos.y == 0) {
      for (uint y = 1; y < tpg.y; ++y) acc = Op::combine(acc, Op::get(pv, pi, y * tpg.x + tpos.x));
    }
  }
  if (tpos.y == 0) out[col] = Op::template result<O>(acc);
}

// Few, long rows: pass 1 (reduce_parts) splits each row into `parts` pieces, grid (tpg.x, outputs * parts),
// and stores each piece's state (the accumulator's value, and the index for arg*) in pv/pi; pass 2
// (reduce_finish), one simdgroup per output, grid (32, outputs), combines an output's states. meta as
// above plus, after the reduced strides, the number of parts.
template <typename Op, typename T, typename V>
kernel void reduce_parts(device const T* in [[buffer(0)]], device V* out_v [[buffer(1)]],
                         device long* out_i [[buffer(2)]], constant long* meta [[buffer(3)]],
                         uint2 gid [[thread_position_in_grid]], uint2 tpos [[thread_position_in_threadgroup]],
                         uint2 tpg [[threads_per_threadgroup]], uint lane [[thread_index_in_simdgroup]],
                         uint sg [[simdgroup_index_in_threadgroup]]) {
  typedef typename Op::S S;
  threadgroup V pv[32];
  threadgroup long pi[32];
  const int kn = int(meta[0]), rn = int(meta[1]);
  const long nred = meta[3];
  constant long* ksh = meta + kMetaHead;
  constant long* rsh = ksh + 2 * kn;
  const long parts = rsh[2 * rn];
  const long row = long(gid.y) / parts, q = long(gid.y) % parts;
  const long lo = nred * q / parts, hi = nred * (q + 1) / parts;
  device const T* p = in + (meta[2] + nd_offset(row, kn, ksh, ksh + kn));
  S acc = Op::init(), comp = Op::init();
  if (rn == 1) {
    const long st = rsh[1];
    for (long i = lo + gid.x; i < hi; i += tpg.x) Op::add(acc, comp, p[i * st], i);
  } else {
    for (long i = lo + gid.x; i < hi; i += tpg.x) Op::add(acc, comp, p[nd_offset(i, rn, rsh, rsh + rn)], i);
  }
  acc = Op::done(acc, comp);
  for (ushort o = 16; o > 0; o /= 2) acc = Op::combine(acc, Op::shuffle(acc, o));
  if (tpg.x > 32) {
    const uint per_row = tpg.x / 32;
    if (lane == 0) Op::put(pv, pi, sg, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tpos.x < 32) {
      acc = lane < per_row ? Op::get(pv, pi, tpos.y * per_row + lane) : Op::init();
      for (ushort o = 16; o > 0; o /= 2) acc = Op::combine(acc, Op::shuffle(acc, o));
    }
  }
  if (tpos.x == 0) Op::store(out_v, out_i, long(gid.y), acc);
}

// meta: [0] parts, [1] outputs.
template <typename Op, typename V, typename O>
kernel void reduce_finish(device const V* pv [[buffer(0)]], device const long* pi [[buffer(1)]],
                          device O* out [[buffer(2)]], constant long* meta [[buffer(3)]],
                          uint2 gid [[thread_position_in_grid]]) {
  typedef typename Op::S S;
  const long parts = meta[0], row = long(gid.y);
  S acc = Op::init();
  for (long q = gid.x; q < parts; q += 32) acc = Op::combine(acc, Op::load(pv, pi, row * parts + q));
  for (ushort o = 16; o > 0; o /= 2) acc = Op::combine(acc, Op::shuffle(acc, o));
  if (gid.x == 0) out[row] = Op::template result<O>(acc);
}

#define instantiate_reduce_one(name, Op, tname, T, O, V)                                                      \
  template [[host_name("reduce_rows_" #name "_" #tname)]] [[kernel]] void reduce_rows<Op, T, O>(               \
      device const T* in [[buffer(0)]], device O* out [[buffer(1)]], constant long* meta [[buffer(2)]],        \
      uint2 gid [[thread_position_in_grid]], uint2 tpos [[thread_position_in_threadgroup]],                    \
      uint2 tpg [[threads_per_threadgroup]], uint lane [[thread_index_in_simdgroup]],                         \
      uint sg [[simdgroup_index_in_threadgroup]]);                                                            \
  template [[host_name("reduce_cols_" #name "_" #tname)]] [[kernel]] void reduce_cols<Op, T, O>(               \
      device const T* in [[buffer(0)]], device O* out [[buffer(1)]], constant long* meta [[buffer(2)]],        \
      uint2 gid [[thread_position_in_grid]], uint2 tpos [[thread_position_in_threadgroup]],                    \
      uint2 tpg [[threads_per_threadgroup]]);                                                                  \
  template [[host_name("reduce_parts_" #name "_" #tname)]] [[kernel]] void reduce_parts<Op, T, V>(             \
      device const T* in [[buffer(0)]], device V* out_v [[buffer(1)]], device long* out_i [[buffer(2)]],        \
      constant long* meta [[buffer(3)]], uint2 gid [[thread_position_in_grid]],                                \
      uint2 tpos [[thread_position_in_threadgroup]], uint2 tpg [[threads_per_threadgroup]],                    \
      uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]]);                    \
  template [[host_name("reduce_finish_" #name "_" #tname)]] [[kernel]] void reduce_finish<Op, V, O>(           \
      device const V* pv [[buffer(0)]], device const long* pi [[buffer(1)]], device O* out [[buffer(2)]],      \
      constant long* meta [[buffer(3)]], uint2 gid [[thread_position_in_grid]]);

#define instantiate_reduce_type(tname, T, A, SA)                                 \
  instantiate_reduce_one(sum, SumOp<T>, tname, T, T, SA)                        \
  instantiate_reduce_one(max, ExtremeOp<T MSL_COMMA true>, tname, T, T, A)      \
  instantiate_reduce_one(min, ExtremeOp<T MSL_COMMA false>, tname, T, T, A)     \
  instantiate_reduce_one(argmax, ArgOp<T MSL_COMMA true>, tname, T, long, A)    \
  instantiate_reduce_one(argmin, ArgOp<T MSL_COMMA false>, tname, T, long, A)
#define MSL_COMMA ,

// (tname, T, the max/min accumulator, the sum accumulator): the V of each op's partial states
instantiate_reduce_type(float32, float, float, float)
instantiate_reduce_type(float16, half, float, float)
instantiate_reduce_type(bfloat16, bfloat, float, float)
instantiate_reduce_type(int64, long, long, ulong)
instantiate_reduce_type(uint32, uint, uint, ulong)
instantiate_reduce_type(uint8, uchar, uchar, ulong)
instantiate_reduce_type(int32, int, int, ulong)
// bool: max/min are any/all, argmax/argmin the first true/false; its sums go through sum_i64
instantiate_reduce_one(max, ExtremeOp<bool MSL_COMMA true>, bool, bool, bool, bool)
instantiate_reduce_one(min, ExtremeOp<bool MSL_COMMA false>, bool, bool, bool, bool)
instantiate_reduce_one(argmax, ArgOp<bool MSL_COMMA true>, bool, bool, long, bool)
instantiate_reduce_one(argmin, ArgOp<bool MSL_COMMA false>, bool, bool, long, bool)

// The int64 sum of integers narrower than 64 bits and bool (a mask's count must not wrap at 256); an int32
// element widens with its sign (ulong(int) is modular).
template <typename T> struct SumI64Op : SumOp<T> {};
instantiate_reduce_one(sum_i64, SumI64Op<uint>, uint32, uint, long, ulong)
instantiate_reduce_one(sum_i64, SumI64Op<uchar>, uint8, uchar, long, ulong)
instantiate_reduce_one(sum_i64, SumI64Op<int>, int32, int, long, ulong)
instantiate_reduce_one(sum_i64, SumI64Op<bool>, bool, bool, long, ulong)
