"""em.cuda.Kernel on the CUDA emulator, against numpy: elementwise, a shared-memory block reduction, a warp-shuffle
reduction, atomics, dynamic shared memory, __half / __nv_bfloat16 conversions, warp votes, 2-D/3-D indices, and
the module cache (one compile per source hash and options, never keyed by name)."""

import ml_dtypes
import numpy as np
import pytest

import ember as em


def dev(arr, cuda):
    return em.tensor(arr, device=cuda)._storage


def empty(n, dtype, cuda):
    return em.CudaStorage.empty(n, dtype, device=cuda)


ELEMENTWISE = r"""
__global__ void saxpy(const float* __restrict__ x, const float* y, float* out, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i] + sinf(x[i]) * expf(-y[i]);
}
"""


@pytest.mark.parametrize("n,block", [(1, 1), (257, 64), (1000, 256), (4096, 1024)])
def test_elementwise_matches_numpy(cuda, rng, n, block):
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = empty(n, "float32", cuda)
    k = em.cuda.Kernel(ELEMENTWISE, "saxpy")
    k(inputs=[dev(x, cuda), dev(y, cuda)], outputs=[out], scalars=[np.float32(1.5), np.int32(n)],
      grid=((n + block - 1) // block,), block=(block,))
    ref = 1.5 * x + y + np.sin(x) * np.exp(-y)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)


REDUCE = r"""
#define BLOCK 128
__global__ void block_sum(const float* x, float* partial, int n) {
  __shared__ float s[BLOCK];
  int t = threadIdx.x, i = blockIdx.x * BLOCK * 2 + t;
  float v = 0.0f;
  if (i < n) v += x[i];
  if (i + BLOCK < n) v += x[i + BLOCK];
  s[t] = v;
  __syncthreads();
  for (int k = BLOCK / 2; k > 0; k >>= 1) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) partial[blockIdx.x] = s[0];
}
"""


@pytest.mark.parametrize("n", [1, 255, 256, 3001])
def test_shared_memory_reduction_matches_numpy(cuda, rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    blocks = (n + 255) // 256
    part = empty(blocks, "float32", cuda)
    em.cuda.Kernel(REDUCE, "block_sum")(inputs=[dev(x, cuda)], outputs=[part], scalars=[np.int32(n)],
                                         grid=blocks, block=128)
    ref = [x[b * 256:(b + 1) * 256].astype(np.float64).sum() for b in range(blocks)]
    np.testing.assert_allclose(part.numpy(), ref, rtol=1e-5, atol=1e-5)


WARP = r"""
__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
__global__ void row_sums(const float* x, float* out, int cols) {
  // one warp per row; lane 0 writes; then every lane checks the broadcast of lane 0's sum
  int row = blockIdx.x, lane = threadIdx.x;
  float v = 0.0f;
  for (int c = lane; c < cols; c += 32) v += x[row * cols + c];
  v = warp_sum(v);
  float all = __shfl_sync(0xffffffffu, v, 0);
  float up = __shfl_up_sync(0xffffffffu, (float)lane, 1);
  float sw = __shfl_xor_sync(0xffffffffu, (float)lane, 5);
  if (lane == 0) out[row * 3] = v;
  if (lane == 7) out[row * 3 + 1] = all - v + up;   // lane 7: v is its partial, up = 6
  if (lane == 9) out[row * 3 + 2] = sw;             // 9 ^ 5 = 12
}
"""


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 31), (5, 100)])
def test_warp_shuffle_reduction_matches_numpy(cuda, rng, rows, cols):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = empty(rows * 3, "float32", cuda)
    em.cuda.Kernel(WARP, "row_sums")(inputs=[dev(x, cuda)], outputs=[out], scalars=[np.int32(cols)],
                                      grid=rows, block=32)
    got = out.numpy().reshape(rows, 3)
    np.testing.assert_allclose(got[:, 0], x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    assert np.all(got[:, 2] == 12)
    # lane 7 saw the whole sum broadcast from lane 0, minus its own (undefined: partial) value, plus 6
    assert np.all(np.isfinite(got[:, 1]))


VOTES = r"""
__global__ void votes(const int* x, unsigned* out) {
  int lane = threadIdx.x;
  int p = x[lane];
  unsigned b = __ballot_sync(0xffffffffu, p > 0);
  int any = __any_sync(0xffffffffu, p > 5);
  int all = __all_sync(0xffffffffu, p >= 0);
  unsigned act = 0;
  if (lane % 2 == 0) act = __activemask();
  if (lane == 0) { out[0] = b; out[1] = any; out[2] = all; out[3] = act; }
}
"""


def test_warp_votes_and_active_mask(cuda, rng):
    x = rng.integers(-3, 8, size=32).astype(np.int32)
    out = empty(4, "uint32", cuda)
    em.cuda.Kernel(VOTES, "votes")(inputs=[dev(x, cuda)], outputs=[out], grid=1, block=32)
    got = out.numpy()
    assert got[0] == sum(1 << i for i in range(32) if x[i] > 0)
    assert got[1] == int((x > 5).any()) and got[2] == int((x >= 0).all())
    assert got[3] == 0x55555555  # the even lanes reached __activemask together


ATOMICS = r"""
__global__ void hist(const int* x, int* bins, unsigned* mx, int* mn, unsigned long long* cnt, float* fsum,
                     int* cas, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicAdd(&bins[x[i]], 1);
  atomicMax(mx, (unsigned)x[i]);
  atomicMin(mn + 0, -x[i]);
  atomicAdd(cnt, 1ull);
  atomicAdd(fsum, 0.5f);
  atomicCAS(cas, 0, i + 1);   // exactly one thread wins
  atomicExch(cas + 1, 7);
}
"""


def test_atomics_match_numpy(cuda, rng):
    n = 3000
    x = rng.integers(0, 16, size=n).astype(np.int32)
    bins = em.zeros(16, dtype="int32", device=cuda)._storage
    mx = em.zeros(1, dtype="uint32", device=cuda)._storage
    mn = em.tensor(np.array([0], np.int32), device=cuda)._storage
    cnt = em.zeros(1, dtype="int64", device=cuda)._storage
    fsum = em.zeros(1, dtype="float32", device=cuda)._storage
    cas = em.zeros(2, dtype="int32", device=cuda)._storage
    # unsigned long long* takes the int64 storage: its pointee is not one ember checks
    em.cuda.Kernel(ATOMICS, "hist")(inputs=[dev(x, cuda)], outputs=[bins, mx, mn, cnt, fsum, cas],
                                     scalars=[np.int32(n)], grid=(n + 255) // 256, block=256)
    np.testing.assert_array_equal(bins.numpy(), np.bincount(x, minlength=16))
    assert mx.numpy()[0] == x.max() and mn.numpy()[0] == -x.max()
    assert cnt.numpy()[0] == n and fsum.numpy()[0] == n * 0.5
    c = cas.numpy()
    assert 1 <= c[0] <= n and c[1] == 7


DYN = r"""
__global__ void reverse_tiles(const float* x, float* y, int n) {
  extern __shared__ float tile[];
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  tile[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  int j = blockIdx.x * blockDim.x + (blockDim.x - 1 - t);
  if (j < n) y[j] = tile[t] * 2.0f;
}
"""


@pytest.mark.parametrize("block", [32, 96, 256])
def test_dynamic_shared_memory(cuda, rng, block):
    n = block * 5
    x = rng.standard_normal(n).astype(np.float32)
    y = empty(n, "float32", cuda)
    em.cuda.Kernel(DYN, "reverse_tiles")(inputs=[dev(x, cuda)], outputs=[y], scalars=[np.int32(n)],
                                          grid=5, block=block, shared_mem=block * 4)
    np.testing.assert_array_equal(y.numpy(), (x.reshape(5, block)[:, ::-1] * 2).reshape(-1))


HALF = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__global__ void convert(const __half* h, const __nv_bfloat16* b, const float* f, __half* ho, __nv_bfloat16* bo,
                        float* fo, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  ho[i] = __float2half(f[i]);
  bo[i] = __float2bfloat16(f[i]);
  fo[2 * i] = __half2float(h[i]) * 2.0f;
  fo[2 * i + 1] = __bfloat162float(b[i]) + 1.0f;
}
"""


def test_half_and_bfloat16_conversions_match_numpy(cuda, rng):
    n = 777
    f = (rng.standard_normal(n) * 100).astype(np.float32)
    h = rng.standard_normal(n).astype(np.float16)
    b = rng.standard_normal(n).astype(ml_dtypes.bfloat16)
    ho, bo, fo = empty(n, "float16", cuda), empty(n, "bfloat16", cuda), empty(2 * n, "float32", cuda)
    em.cuda.Kernel(HALF, "convert")(inputs=[dev(h, cuda), dev(b, cuda), dev(f, cuda)], outputs=[ho, bo, fo],
                                     scalars=[np.int32(n)], grid=4, block=256)
    np.testing.assert_array_equal(ho.numpy(), f.astype(np.float16))
    np.testing.assert_array_equal(bo.numpy(), f.astype(ml_dtypes.bfloat16))
    got = fo.numpy().reshape(n, 2)
    np.testing.assert_array_equal(got[:, 0], h.astype(np.float32) * 2)
    np.testing.assert_array_equal(got[:, 1], b.astype(np.float32) + 1)


INDEX3 = r"""
__global__ void coords(int* out) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z * blockDim.z + threadIdx.z;
  int W = gridDim.x * blockDim.x, H = gridDim.y * blockDim.y;
  out[(z * H + y) * W + x] = x + 100 * y + 10000 * z + warpSize * 0;
}
"""


def test_three_dimensional_grid_and_block(cuda):
    grid, block = (3, 2, 2), (4, 3, 2)
    W, H, D = 12, 6, 4
    out = empty(W * H * D, "int32", cuda)
    em.cuda.Kernel(INDEX3, "coords")(outputs=[out], grid=grid, block=block)
    z, y, x = np.meshgrid(np.arange(D), np.arange(H), np.arange(W), indexing="ij")
    np.testing.assert_array_equal(out.numpy().reshape(D, H, W), x + 100 * y + 10000 * z)


def test_module_cache_is_keyed_by_source_and_options_never_by_name(cuda):
    src = "__global__ void same_name(float* y) { y[threadIdx.x] = VALUE; }\n"
    y = empty(4, "float32", cuda)
    before = em.cuda.cache_info().get("cuda:0", {"compiles": 0, "hits": 0})
    em.cuda.Kernel(src, "same_name", options=["-DVALUE=1.0f"])(outputs=[y], block=4)
    assert np.all(y.numpy() == 1)
    em.cuda.Kernel(src, "same_name", options=["-DVALUE=2.0f"])(outputs=[y], block=4)
    assert np.all(y.numpy() == 2)  # same name and source, other options: another module
    other = src.replace("VALUE", "VALUE + 1.0f")
    em.cuda.Kernel(other, "same_name", options=["-DVALUE=2.0f"])(outputs=[y], block=4)
    assert np.all(y.numpy() == 3)  # same name, other source: another module
    em.cuda.Kernel(src, "same_name", options=["-DVALUE=1.0f"])(outputs=[y], block=4)
    assert np.all(y.numpy() == 1)
    after = em.cuda.cache_info()["cuda:0"]
    assert after["compiles"] - before["compiles"] == 3 and after["hits"] - before["hits"] == 1


COUNT = r"""
__global__ void count(const int* x, int* out) {
  int p = x[threadIdx.x];
  int c = __syncthreads_count(p > 0);
  int a = __syncthreads_and(p > -100);
  int o = __syncthreads_or(p > 100);
  int c2 = __syncthreads_count(p > 1);
  if (threadIdx.x == 5) { out[0] = c; out[1] = a; out[2] = o; out[3] = c2; }
}
"""


def test_syncthreads_count_and_or(cuda, rng):
    x = rng.integers(-3, 4, size=200).astype(np.int32)
    out = em.zeros(4, dtype="int32", device=cuda)._storage
    em.cuda.Kernel(COUNT, "count")(inputs=[dev(x, cuda)], outputs=[out], block=200)
    np.testing.assert_array_equal(out.numpy(), [(x > 0).sum(), 1, 0, (x > 1).sum()])
