// Row reductions (sum, max, min over the last dim of contiguous rows), f32/f16/bf16 accumulated in float:
// one simdgroup per row for short rows, and a looped threadgroup kernel (simdgroup, then threadgroup
// level) for long ones. Threadgroup sizes are multiples of 32, so every simdgroup is full.
#include <metal_stdlib>
using namespace metal;

// A butterfly over the simdgroup: every lane ends with the result (all 32 lanes are active).
template <typename Op> inline float simd_reduce(float v) {
  for (ushort o = 16; o > 0; o /= 2) v = Op::combine(v, simd_shuffle_xor(v, o));
  return v;
}

struct Sum {
  static float init() { return 0.0f; }
  static float combine(float a, float b) { return a + b; }
  static float simd(float v) { return simd_sum(v); }
};
// max/min propagate NaN, as numpy and ember's CPU kernels (a NaN operand makes a + b NaN).
struct Max {
  static float init() { return -numeric_limits<float>::infinity(); }
  static float combine(float a, float b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
  static float simd(float v) { return simd_reduce<Max>(v); }
};
struct Min {
  static float init() { return numeric_limits<float>::infinity(); }
  static float combine(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }
  static float simd(float v) { return simd_reduce<Min>(v); }
};

// Short rows: simdgroup k of the grid reduces row k (grid: 32 threads per row, rounded up to whole groups).
template <typename Op, typename T>
kernel void reduce_row_simd(device const T* in [[buffer(0)]], device T* out [[buffer(1)]],
                            constant uint& rows [[buffer(2)]], constant uint& cols [[buffer(3)]],
                            uint gid [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
  const uint row = gid / 32;
  float acc = Op::init();
  if (row < rows) {
    device const T* p = in + long(row) * cols;
    for (uint i = lane; i < cols; i += 32) acc = Op::combine(acc, float(p[i]));
  }
  acc = Op::simd(acc);  // every lane takes part, also those past the last row
  if (row < rows && lane == 0) out[row] = T(acc);
}

// Long rows: threadgroup k reduces row k, 4 consecutive elements per thread and step (wide loads),
// then each simdgroup, then simdgroup 0 over the per-simdgroup partials.
template <typename Op, typename T>
kernel void reduce_row_looped(device const T* in [[buffer(0)]], device T* out [[buffer(1)]],
                              constant uint& cols [[buffer(2)]], uint row [[threadgroup_position_in_grid]],
                              uint tid [[thread_index_in_threadgroup]], uint tpg [[threads_per_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],
                              uint nsg [[simdgroups_per_threadgroup]]) {
  threadgroup float partial[32];
  device const T* p = in + long(row) * cols;
  float acc = Op::init();
  uint i = tid * 4;
  for (; i + 4 <= cols; i += tpg * 4) {
    for (uint k = 0; k < 4; ++k) acc = Op::combine(acc, float(p[i + k]));
  }
  for (; i < cols; ++i) acc = Op::combine(acc, float(p[i]));  // the row's last, partial step
  acc = Op::simd(acc);
  if (lane == 0) partial[sg] = acc;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (sg == 0) {
    float v = lane < nsg ? partial[lane] : Op::init();
    v = Op::simd(v);
    if (lane == 0) out[row] = T(v);
  }
}

#define instantiate_reduce_one(name, Op, tname, T)                                                           \
  template [[host_name("reduce_row_simd_" #name "_" #tname)]] [[kernel]] void reduce_row_simd<Op, T>(         \
      device const T* in [[buffer(0)]], device T* out [[buffer(1)]], constant uint& rows [[buffer(2)]],       \
      constant uint& cols [[buffer(3)]], uint gid [[thread_position_in_grid]],                                \
      uint lane [[thread_index_in_simdgroup]]);                                                              \
  template [[host_name("reduce_row_looped_" #name "_" #tname)]] [[kernel]] void reduce_row_looped<Op, T>(     \
      device const T* in [[buffer(0)]], device T* out [[buffer(1)]], constant uint& cols [[buffer(2)]],       \
      uint row [[threadgroup_position_in_grid]], uint tid [[thread_index_in_threadgroup]],                    \
      uint tpg [[threads_per_threadgroup]], uint lane [[thread_index_in_simdgroup]],                          \
      uint sg [[simdgroup_index_in_threadgroup]], uint nsg [[simdgroups_per_threadgroup]]);

#define instantiate_reduce(name, Op)                   \
  instantiate_reduce_one(name, Op, float32, float)     \
  instantiate_reduce_one(name, Op, float16, half)      \
  instantiate_reduce_one(name, Op, bfloat16, bfloat)

instantiate_reduce(sum, Sum)
instantiate_reduce(max, Max)
instantiate_reduce(min, Min)
