// Elementwise binary kernels, f32/f16/bf16 computed in float: arithmetic (same dtype out) and comparisons
// (uchar out); a contiguous kernel and one reading both operands through broadcast strides (0 = repeat).
#include <metal_stdlib>
using namespace metal;

// NaN-propagating maximum/minimum, as numpy and ember's CPU kernels.
struct Add { float operator()(float a, float b) const { return a + b; } };
struct Sub { float operator()(float a, float b) const { return a - b; } };
struct Mul { float operator()(float a, float b) const { return a * b; } };
struct Div { float operator()(float a, float b) const { return a / b; } };
struct Maximum { float operator()(float a, float b) const { return (a != a || b != b) ? a + b : (a > b ? a : b); } };
struct Minimum { float operator()(float a, float b) const { return (a != a || b != b) ? a + b : (a < b ? a : b); } };
struct Pow { float operator()(float a, float b) const { return pow(a, b); } };
struct Eq { bool operator()(float a, float b) const { return a == b; } };
struct Ne { bool operator()(float a, float b) const { return a != b; } };
struct Lt { bool operator()(float a, float b) const { return a < b; } };
struct Le { bool operator()(float a, float b) const { return a <= b; } };
struct Gt { bool operator()(float a, float b) const { return a > b; } };
struct Ge { bool operator()(float a, float b) const { return a >= b; } };

constant constexpr uint kReads = 4;  // elements per thread in the contiguous kernel

template <typename Op, typename T, typename U>
kernel void binary_contig(device const T* a [[buffer(0)]], device const T* b [[buffer(1)]],
                          device U* out [[buffer(2)]], constant uint& n [[buffer(3)]],
                          uint gid [[thread_position_in_grid]]) {
  const uint base = gid * kReads;
  const uint end = min(base + kReads, n);
  for (uint i = base; i < end; ++i) out[i] = U(Op()(float(a[i]), float(b[i])));
}

// out (contiguous, n elements of `shape`) = op(a, b), each read through its own strides and offset.
template <typename Op, typename T, typename U>
kernel void binary_strided(device const T* a [[buffer(0)]], device const T* b [[buffer(1)]],
                           device U* out [[buffer(2)]], constant uint& n [[buffer(3)]],
                           constant uint& ndim [[buffer(4)]], constant long* shape [[buffer(5)]],
                           constant long* a_strides [[buffer(6)]], constant long* b_strides [[buffer(7)]],
                           constant long* offsets [[buffer(8)]], uint gid [[thread_position_in_grid]]) {
  if (gid >= n) return;
  long rem = gid, ia = offsets[0], ib = offsets[1];
  for (int d = int(ndim) - 1; d >= 0; --d) {
    const long i = rem % shape[d];
    rem /= shape[d];
    ia += i * a_strides[d];
    ib += i * b_strides[d];
  }
  out[gid] = U(Op()(float(a[ia]), float(b[ib])));
}

#define instantiate_binary_one(name, Op, tname, T, U)                                                       \
  template [[host_name("binary_contig_" #name "_" #tname)]] [[kernel]] void binary_contig<Op, T, U>(        \
      device const T* a [[buffer(0)]], device const T* b [[buffer(1)]], device U* out [[buffer(2)]],        \
      constant uint& n [[buffer(3)]], uint gid [[thread_position_in_grid]]);                                \
  template [[host_name("binary_strided_" #name "_" #tname)]] [[kernel]] void binary_strided<Op, T, U>(      \
      device const T* a [[buffer(0)]], device const T* b [[buffer(1)]], device U* out [[buffer(2)]],        \
      constant uint& n [[buffer(3)]], constant uint& ndim [[buffer(4)]], constant long* shape [[buffer(5)]], \
      constant long* a_strides [[buffer(6)]], constant long* b_strides [[buffer(7)]],                       \
      constant long* offsets [[buffer(8)]], uint gid [[thread_position_in_grid]]);

#define instantiate_binary(name, Op)                           \
  instantiate_binary_one(name, Op, float32, float, float)      \
  instantiate_binary_one(name, Op, float16, half, half)        \
  instantiate_binary_one(name, Op, bfloat16, bfloat, bfloat)
#define instantiate_compare(name, Op)                          \
  instantiate_binary_one(name, Op, float32, float, uchar)      \
  instantiate_binary_one(name, Op, float16, half, uchar)       \
  instantiate_binary_one(name, Op, bfloat16, bfloat, uchar)

instantiate_binary(add, Add)
instantiate_binary(sub, Sub)
instantiate_binary(mul, Mul)
instantiate_binary(div, Div)
instantiate_binary(maximum, Maximum)
instantiate_binary(minimum, Minimum)
instantiate_binary(pow, Pow)
instantiate_compare(eq, Eq)
instantiate_compare(ne, Ne)
instantiate_compare(lt, Lt)
instantiate_compare(le, Le)
instantiate_compare(gt, Gt)
instantiate_compare(ge, Ge)
