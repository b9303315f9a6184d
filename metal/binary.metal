// Elementwise binary kernels, every BinaryOp: f32/f16/bf16 computed in float, int64/int32/uint32/uint8/bool
// in their own type; arithmetic gives the input dtype, comparisons bool. Kernels: both operands contiguous
// (4 elements per thread), one a single element (scalar rhs / lhs), and any broadcast strides.
#include <metal_stdlib>
using namespace metal;

// The CPU's functors (cpp/cpu/functors.h) restated per compute type: signed integers wrap (the
// arithmetic is done in ulong), x / 0, x // 0 and x % 0 are 0 for integers, INT64_MIN / -1 wraps;
// // and % follow Python (the quotient rounds toward -inf, the remainder takes the divisor's sign).
inline float add_w(float a, float b) { return a + b; }
inline long add_w(long a, long b) { return as_type<long>(as_type<ulong>(a) + as_type<ulong>(b)); }
inline int add_w(int a, int b) { return as_type<int>(as_type<uint>(a) + as_type<uint>(b)); }
inline bool add_w(bool a, bool b) { return a || b; }  // torch: bool + bool is or
template <typename T> inline T add_w(T a, T b) { return T(a + b); }
inline float sub_w(float a, float b) { return a - b; }
inline long sub_w(long a, long b) { return as_type<long>(as_type<ulong>(a) - as_type<ulong>(b)); }
inline int sub_w(int a, int b) { return as_type<int>(as_type<uint>(a) - as_type<uint>(b)); }
template <typename T> inline T sub_w(T a, T b) { return T(a - b); }
inline float mul_w(float a, float b) { return a * b; }
inline long mul_w(long a, long b) { return as_type<long>(as_type<ulong>(a) * as_type<ulong>(b)); }
inline int mul_w(int a, int b) { return as_type<int>(as_type<uint>(a) * as_type<uint>(b)); }
inline bool mul_w(bool a, bool b) { return a && b; }  // torch: bool * bool is and
template <typename T> inline T mul_w(T a, T b) { return T(ulong(a) * ulong(b)); }

inline float safe_div(float a, float b) { return a / b; }
inline long safe_div(long a, long b) {
  if (b == 0) return 0;
  if (b == -1) return as_type<long>(0ul - as_type<ulong>(a));
  return a / b;
}
inline int safe_div(int a, int b) {
  if (b == 0) return 0;
  if (b == -1) return as_type<int>(0u - as_type<uint>(a));
  return a / b;
}
template <typename T> inline T safe_div(T a, T b) { return b == T(0) ? T(0) : T(a / b); }

// Floats from m = fmod(a, b), as numpy: a == b * (a // b) + a % b, exactly.
inline float py_rem(float a, float b) {
  const float m = fmod(a, b);  // NaN for b == 0 or an infinite a, like numpy
  return m != 0.0f ? (((b < 0.0f) != (m < 0.0f)) ? m + b : m) : copysign(0.0f, b);
}
inline float py_floordiv(float a, float b) {
  if (b == 0.0f) return a / b;  // inf or NaN, like numpy
  const float m = fmod(a, b);
  float div = (a - m) / b;
  div = (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) ? div - 1.0f : div;
  float fl = floor(div);
  fl = div - fl > 0.5f ? fl + 1.0f : fl;
  return div == 0.0f ? copysign(0.0f, a / b) : fl;
}
inline long py_rem(long a, long b) {
  if (b == 0 || b == -1) return 0;  // x % -1 is 0; INT64_MIN % -1 would trap
  const long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
inline long py_floordiv(long a, long b) {
  if (b == 0) return 0;
  if (b == -1) return as_type<long>(0ul - as_type<ulong>(a));
  const long q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline int py_rem(int a, int b) {
  if (b == 0 || b == -1) return 0;  // INT32_MIN % -1 would trap
  const int r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
inline int py_floordiv(int a, int b) {
  if (b == 0) return 0;
  if (b == -1) return as_type<int>(0u - as_type<uint>(a));
  const int q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> inline T py_rem(T a, T b) { return b == T(0) ? T(0) : T(a % b); }
template <typename T> inline T py_floordiv(T a, T b) { return b == T(0) ? T(0) : T(a / b); }

#define EMBER_BINARY(NAME, EXPR) \
  struct NAME { template <typename C> static C f(C a, C b) { return EXPR; } };
EMBER_BINARY(Add, add_w(a, b))
EMBER_BINARY(Sub, sub_w(a, b))
EMBER_BINARY(Mul, mul_w(a, b))
EMBER_BINARY(Div, safe_div(a, b))
// a NaN operand wins (a's first), as the CPU and numpy
EMBER_BINARY(Maximum, (a != a ? a : (a > b || b != b ? (b != b ? b : a) : b)))
EMBER_BINARY(Minimum, (a != a ? a : (a < b || b != b ? (b != b ? b : a) : b)))
EMBER_BINARY(Pow, pow(a, b))
EMBER_BINARY(FloorDiv, py_floordiv(a, b))
EMBER_BINARY(Rem, py_rem(a, b))
// & | ^: integers and bool only (bitwise, which on bool is logical)
EMBER_BINARY(BitAnd, C(a & b))
EMBER_BINARY(BitOr, C(a | b))
EMBER_BINARY(BitXor, C(a ^ b))
#undef EMBER_BINARY
#define EMBER_CMP(NAME, EXPR) \
  struct NAME { template <typename C> static bool f(C a, C b) { return EXPR; } };
EMBER_CMP(Eq, a == b)
EMBER_CMP(Ne, a != b)
EMBER_CMP(Lt, a < b)
EMBER_CMP(Le, a <= b)
EMBER_CMP(Gt, a > b)
EMBER_CMP(Ge, a >= b)
#undef EMBER_CMP

// Floats compute in float; integers in their own type.
template <typename T> struct Compute { typedef float type; };
template <> struct Compute<long> { typedef long type; };
template <> struct Compute<uint> { typedef uint type; };
template <> struct Compute<uchar> { typedef uchar type; };
template <> struct Compute<int> { typedef int type; };
template <> struct Compute<bool> { typedef bool type; };

constant constexpr uint kReads = 4;  // elements per thread in the dense kernels

template <typename Op, typename T, typename U>
kernel void binary_contig(device const T* a [[buffer(0)]], device const T* b [[buffer(1)]],
                          device U* out [[buffer(2)]], constant uint& n [[buffer(3)]],
                          uint gid [[thread_position_in_grid]]) {
  typedef typename Compute<T>::type C;
  const uint base = gid * kReads;
  if (base + kReads <= n) {
    for (uint k = 0; k < kReads; ++k) out[base + k] = U(Op::f(C(a[base + k]), C(b[base + k])));
  } else {
    for (uint i = base; i < n; ++i) out[i] = U(Op::f(C(a[i]), C(b[i])));
  }
}

// b is one element (a scalar, or a broadcast of one): read once per thread.
template <typename Op, typename T, typename U>
kernel void binary_scalar_rhs(device const T* a [[buffer(0)]], device const T* b [[buffer(1)]],
                              device U* out [[buffer(2)]], constant uint& n [[buffer(3)]],
                              uint gid [[thread_position_in_grid]]) {
  typedef typename Compute<T>::type C;
  const uint base = gid * kReads;
  if (base >= n) return;
  const C bv = C(b[0]);
  const uint end = min(base + kReads, n);
  for (uint i = base; i < end; ++i) out[i] = U(Op::f(C(a[i]), bv));
}

template <typename Op, typename T, typename U>
kernel void binary_scalar_lhs(device const T* a [[buffer(0)]], device const T* b [[buffer(1)]],
                              device U* out [[buffer(2)]], constant uint& n [[buffer(3)]],
                              uint gid [[thread_position_in_grid]]) {
  typedef typename Compute<T>::type C;
  const uint base = gid * kReads;
  if (base >= n) return;
  const C av = C(a[0]);
  const uint end = min(base + kReads, n);
  for (uint i = base; i < end; ++i) out[i] = U(Op::f(av, C(b[i])));
}

// out (contiguous, n elements of `shape`) = op(a, b), each read through its own strides (0 where it is
// broadcast) from its own offset (offsets[0], offsets[1]), all in elements.
template <typename Op, typename T, typename U>
kernel void binary_strided(device const T* a [[buffer(0)]], device const T* b [[buffer(1)]],
                           device U* out [[buffer(2)]], constant uint& n [[buffer(3)]],
                           constant uint& ndim [[buffer(4)]], constant uint* shape [[buffer(5)]],
                           constant long* a_strides [[buffer(6)]], constant long* b_strides [[buffer(7)]],
                           constant long* offsets [[buffer(8)]], uint gid [[thread_position_in_grid]]) {
  typedef typename Compute<T>::type C;
  if (gid >= n) return;
  uint rem = gid;
  long ia = offsets[0], ib = offsets[1];
  for (int d = int(ndim) - 1; d >= 0; --d) {
    const long i = long(rem % shape[d]);
    rem /= shape[d];
    ia += i * a_strides[d];
    ib += i * b_strides[d];
  }
  out[gid] = U(Op::f(C(a[ia]), C(b[ib])));
}

#define instantiate_binary_dense(kname, name, Op, tname, T, U)                                              \
  template [[host_name(#kname "_" #name "_" #tname)]] [[kernel]] void kname<Op, T, U>(                       \
      device const T* a [[buffer(0)]], device const T* b [[buffer(1)]], device U* out [[buffer(2)]],        \
      constant uint& n [[buffer(3)]], uint gid [[thread_position_in_grid]]);
#define instantiate_binary_one(name, Op, tname, T, U)                                                       \
  instantiate_binary_dense(binary_contig, name, Op, tname, T, U)                                            \
  instantiate_binary_dense(binary_scalar_rhs, name, Op, tname, T, U)                                        \
  instantiate_binary_dense(binary_scalar_lhs, name, Op, tname, T, U)                                        \
  template [[host_name("binary_strided_" #name "_" #tname)]] [[kernel]] void binary_strided<Op, T, U>(      \
      device const T* a [[buffer(0)]], device const T* b [[buffer(1)]], device U* out [[buffer(2)]],        \
      constant uint& n [[buffer(3)]], constant uint& ndim [[buffer(4)]], constant uint* shape [[buffer(5)]], \
      constant long* a_strides [[buffer(6)]], constant long* b_strides [[buffer(7)]],                       \
      constant long* offsets [[buffer(8)]], uint gid [[thread_position_in_grid]]);

#define instantiate_binary_float(name, Op)                     \
  instantiate_binary_one(name, Op, float32, float, float)      \
  instantiate_binary_one(name, Op, float16, half, half)        \
  instantiate_binary_one(name, Op, bfloat16, bfloat, bfloat)
#define instantiate_binary_ints(name, Op)                      \
  instantiate_binary_one(name, Op, int64, long, long)          \
  instantiate_binary_one(name, Op, uint32, uint, uint)         \
  instantiate_binary_one(name, Op, uint8, uchar, uchar)        \
  instantiate_binary_one(name, Op, int32, int, int)
#define instantiate_binary(name, Op)                           \
  instantiate_binary_float(name, Op)                           \
  instantiate_binary_ints(name, Op)
#define instantiate_binary_bool(name, Op) instantiate_binary_one(name, Op, bool, bool, bool)
#define instantiate_compare(name, Op)                          \
  instantiate_binary_one(name, Op, float32, float, bool)       \
  instantiate_binary_one(name, Op, float16, half, bool)        \
  instantiate_binary_one(name, Op, bfloat16, bfloat, bool)     \
  instantiate_binary_one(name, Op, int64, long, bool)          \
  instantiate_binary_one(name, Op, uint32, uint, bool)         \
  instantiate_binary_one(name, Op, uint8, uchar, bool)         \
  instantiate_binary_one(name, Op, int32, int, bool)           \
  instantiate_binary_one(name, Op, bool, bool, bool)

instantiate_binary(add, Add)
instantiate_binary(sub, Sub)
instantiate_binary(mul, Mul)
instantiate_binary(div, Div)
instantiate_binary(maximum, Maximum)
instantiate_binary(minimum, Minimum)
instantiate_binary_float(pow, Pow)  // floats only, as on the CPU
instantiate_binary(floor_divide, FloorDiv)
instantiate_binary(remainder, Rem)
instantiate_compare(eq, Eq)
instantiate_compare(ne, Ne)
instantiate_compare(lt, Lt)
instantiate_compare(le, Le)
instantiate_compare(gt, Gt)
instantiate_compare(ge, Ge)
// bool: + is or, * is and (torch); - and / are refused or promoted before they get here
instantiate_binary_bool(add, Add)
instantiate_binary_bool(mul, Mul)
instantiate_binary_bool(maximum, Maximum)
instantiate_binary_bool(minimum, Minimum)
#define instantiate_bitwise(name, Op) instantiate_binary_ints(name, Op) instantiate_binary_bool(name, Op)
instantiate_bitwise(bitwise_and, BitAnd)
instantiate_bitwise(bitwise_or, BitOr)
instantiate_bitwise(bitwise_xor, BitXor)
