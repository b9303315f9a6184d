// Batched matmul C = A @ B: a tiled GEMM of ours. Each threadgroup (16x16 threads) computes a 64x64 tile
// of C, staging 64x16 of A and 16x64 of B in threadgroup memory per step, each thread a 4x4 block held in
// registers. A and B are read through any strides (a transposed operand needs no copy) and per-batch
// offsets from their own batch strides (a broadcast batch dim has stride 0). f32/f16/bf16 multiply and
// accumulate in float, rounded once; integers in 64-bit two's complement, which wraps like the CPU's loop
// once stored back in the dtype. Matrix-vector shapes of floats take `matmul_dot`, a simdgroup per output.
#include <metal_stdlib>
using namespace metal;

constant constexpr int BM = 64;  // tile rows of C
constant constexpr int BN = 64;  // tile columns of C
constant constexpr int BK = 16;  // depth of one staged step
constant constexpr int TG = 16;  // threads per tile side; each thread computes (BM/TG) x (BN/TG)
constant constexpr int TM = BM / TG;
constant constexpr int TN = BN / TG;
constant constexpr int kTileA = BK * BM;  // elements of each staged tile
constant constexpr int kTileB = BK * BN;

// meta, a constant long array: [0] batch ndim NB, [1] m, [2] n, [3] k, [4] A offset, [5] B offset,
// [6] A row stride, [7] A column stride, [8] B row stride, [9] B column stride, then NB batch sizes,
// NB A batch strides, NB B batch strides.
constant constexpr int kMetaHead = 10;

template <typename T> struct Acc { typedef ulong type; };  // integers
template <> struct Acc<float> { typedef float type; };
template <> struct Acc<half> { typedef float type; };
template <> struct Acc<bfloat> { typedef float type; };

// grid: (ceil(n / BN) * TG, ceil(m / BM) * TG, batches), threadgroups of (TG, TG, 1), all full.
template <typename T>
kernel void matmul_tiled(device const T* a [[buffer(0)]], device const T* b [[buffer(1)]], device T* c [[buffer(2)]],
                         constant long* meta [[buffer(3)]], uint3 tg [[threadgroup_position_in_grid]],
                         uint3 tpos [[thread_position_in_threadgroup]],
                         uint tid [[thread_index_in_threadgroup]]) {
  typedef typename Acc<T>::type A;
  threadgroup A as[kTileA];  // as[p * BM + i]: the A tile, transposed so a thread's rows are adjacent
  threadgroup A bs[kTileB];  // bs[p * BN + j]
  const int nb = int(meta[0]);
  const long m = meta[1], n = meta[2], k = meta[3];
  const long ars = meta[6], acs = meta[7], brs = meta[8], bcs = meta[9];
  constant long* bsh = meta + kMetaHead;
  long aoff = meta[4], boff = meta[5];
  long rem = tg.z;
  for (int d = nb - 1; d >= 0; --d) {  // this batch's offsets into A and B
    const long i = rem % bsh[d];
    rem /= bsh[d];
    aoff += i * bsh[nb + d];
    boff += i * bsh[2 * nb + d];
  }
  const long row0 = long(tg.y) * BM, col0 = long(tg.x) * BN;
  A acc[TM][TN];
  for (int r = 0; r < TM; ++r)
    for (int q = 0; q < TN; ++q) acc[r][q] = A(0);
  for (long p0 = 0; p0 < k; p0 += BK) {
    // Stage the tiles: 4 elements of each per thread; zeros past the edges of A and B.
    for (int e = int(tid); e < BK * BM; e += TG * TG) {
      const int i = e / BK, p = e % BK;  // consecutive threads walk A's row (coalesced when row-major)
      const long gi = row0 + i, gp = p0 + p;
      as[p * BM + i] = (gi < m && gp < k) ? A(a[aoff + gi * ars + gp * acs]) : A(0);
    }
    for (int e = int(tid); e < BK * BN; e += TG * TG) {
      const int p = e / BN, j = e % BN;
      const long gp = p0 + p, gj = col0 + j;
      bs[p * BN + j] = (gp < k && gj < n) ? A(b[boff + gp * brs + gj * bcs]) : A(0);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int p = 0; p < BK; ++p) {
      A ar[TM], br[TN];
      for (int r = 0; r < TM; ++r) ar[r] = as[p * BM + int(tpos.y) + TG * r];
      for (int q = 0; q < TN; ++q) br[q] = bs[p * BN + int(tpos.x) + TG * q];
      for (int r = 0; r < TM; ++r)
        for (int q = 0; q < TN; ++q) acc[r][q] += ar[r] * br[q];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);  // before the next step overwrites the tiles
  }
  device T* cb = c + long(tg.z) * m * n;
  for (int r = 0; r < TM; ++r) {
    const long i = row0 + int(tpos.y) + TG * r;
    if (i >= m) continue;
    for (int q = 0; q < TN; ++q) {
      const long j = col0 + int(tpos.x) + TG * q;
      if (j < n) cb[i * n + j] = T(acc[r][q]);
    }
  }
}

// Matrix-vector shapes (m or n of 1, as a Linear layer's x @ W^T at batch 1): one simdgroup per output
// element, its lanes walking k (contiguous in both operands when the launcher picks this kernel) and
// adding up with simd_sum. Floats only. grid: (32, batches * m * n); meta as matmul_tiled's.
template <typename T>
kernel void matmul_dot(device const T* a [[buffer(0)]], device const T* b [[buffer(1)]], device T* c [[buffer(2)]],
                       constant long* meta [[buffer(3)]], uint2 gid [[thread_position_in_grid]]) {
  const int nb = int(meta[0]);
  const long m = meta[1], n = meta[2], k = meta[3];
  constant long* bsh = meta + kMetaHead;
  const long e = long(gid.y), j = e % n, i = (e / n) % m;
  long rem = e / (m * n), aoff = meta[4] + i * meta[6], boff = meta[5] + j * meta[9];
  for (int d = nb - 1; d >= 0; --d) {
    const long q = rem % bsh[d];
    rem /= bsh[d];
    aoff += q * bsh[nb + d];
    boff += q * bsh[2 * nb + d];
  }
  const long acs = meta[7], brs = meta[8];
  float acc = 0.0f;
  for (long p = gid.x; p < k; p += 32) acc += float(a[aoff + p * acs]) * float(b[boff + p * brs]);
  acc = simd_sum(acc);
  if (gid.x == 0) c[e] = T(acc);
}

#define instantiate_matmul_dot(tname, T)                                                                     \
  template [[host_name("matmul_dot_" #tname)]] [[kernel]] void matmul_dot<T>(                                 \
      device const T* a [[buffer(0)]], device const T* b [[buffer(1)]], device T* c [[buffer(2)]],           \
      constant long* meta [[buffer(3)]], uint2 gid [[thread_position_in_grid]]);
instantiate_matmul_dot(float32, float)
instantiate_matmul_dot(float16, half)
instantiate_matmul_dot(bfloat16, bfloat)

#define instantiate_matmul(tname, T)                                                                         \
  template [[host_name("matmul_tiled_" #tname)]] [[kernel]] void matmul_tiled<T>(                             \
      device const T* a [[buffer(0)]], device const T* b [[buffer(1)]], device T* c [[buffer(2)]],           \
      constant long* meta [[buffer(3)]], uint3 tg [[threadgroup_position_in_grid]],                          \
      uint3 tpos [[thread_position_in_threadgroup]], uint tid [[thread_index_in_threadgroup]]);

instantiate_matmul(float32, float)
instantiate_matmul(float16, half)
instantiate_matmul(bfloat16, bfloat)
instantiate_matmul(int64, long)
instantiate_matmul(uint32, uint)
instantiate_matmul(uint8, uchar)
instantiate_matmul(int32, int)
