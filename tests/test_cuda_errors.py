"""Every error path of em.cuda.Kernel on the CUDA emulator: compile errors with the user's line numbers,
out-of-bounds accesses naming kernel, argument and offset, barrier divergence, a missing barrier, the
shared-memory limit, bad grids and blocks, wrong argument kinds and dtypes, device mismatch, warp masks."""
import numpy as np
import pytest

import ember as em


@pytest.fixture
def cuda(monkeypatch):
    monkeypatch.setenv("EMBER_CUDA", "emulate")
    return em.Device("cuda")


def empty(n, dtype, cuda):
    return em.CudaStorage.empty(n, dtype, device=cuda)


def test_compile_error_carries_the_log_with_the_sources_line_numbers(cuda):
    src = "// line 1\n__global__ void broken(float* y) {\n  y[0] = 1.0f;\n  y[1] = undefined_name;\n}\n"
    k = em.cuda.Kernel(src, "broken")
    with pytest.raises(em.EmberValueError, match=r"(?s)^\[cuda\] compiling broken\.cu failed:.*broken\.cu:4:.*undefined_name"):
        k(outputs=[empty(2, "float32", cuda)])


def test_unknown_and_template_kernels_are_refused_at_construction(cuda):
    with pytest.raises(em.EmberValueError, match=r"defines no __global__ function 'nope' \(it defines: a\)"):
        em.cuda.Kernel("__global__ void a(float* y) {}", "nope")
    with pytest.raises(em.EmberValueError, match=r"kernel 't' is a template"):
        em.cuda.Kernel("template <typename T>\n__global__ void t(T* y) {}", "t")
    with pytest.raises(em.EmberValueError, match=r"takes 'y' by reference"):
        em.cuda.Kernel("__global__ void r(float& y) {}", "r")
    with pytest.raises(em.EmberValueError, match=r"option '-O3' is not supported"):
        em.cuda.Kernel("__global__ void a(float* y) {}", "a", options=["-O3"])
    with pytest.raises(em.EmberTypeError):
        em.cuda.Kernel("__global__ void a(float* y) {}", "a", options="-DX")


OOB = r"""
__global__ void oob(const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = x[i + n];
}
"""


def test_out_of_bounds_names_kernel_argument_and_offset(cuda):
    x, out = em.zeros(8, device=cuda)._storage, empty(8, "float32", cuda)
    with pytest.raises(em.IndexOutOfRange, match=r"^\[cuda\] kernel 'oob' \(oob\.cu\) block \(0, 0, 0\) thread "
                       r"\(4, 0, 0\): out-of-bounds access to argument 0 \('x', const float\*\) at byte offset 32 "
                       r"\(4 bytes; the argument has 32\)"):
        em.cuda.Kernel(OOB, "oob")(inputs=[x], outputs=[out], scalars=[np.int32(4)], grid=1, block=8)


def test_out_of_bounds_shared_array_is_an_error(cuda):
    src = "__global__ void s(float* y) { __shared__ float t[8]; t[threadIdx.x] = 1.0f; y[0] = t[0]; }"
    with pytest.raises(em.IndexOutOfRange, match=r"__shared__ array at index 8 \(it has 8 elements\)"):
        em.cuda.Kernel(src, "s")(outputs=[empty(1, "float32", cuda)], block=9)


def test_barrier_divergence_is_reported(cuda):
    src = r"""
__global__ void diverge(float* y) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  y[threadIdx.x] = 1.0f;
}
__global__ void early(float* y) {
  if (threadIdx.x == 3) return;
  __syncthreads();
  y[threadIdx.x] = 1.0f;
}
"""
    y = empty(64, "float32", cuda)
    with pytest.raises(em.EmberValueError, match=r"^\[cuda\] kernel 'diverge'.*barrier divergence: this thread waits "
                       r"at the __syncthreads of line 6, thread 0 of its block at the one of line 4"):
        em.cuda.Kernel(src, "diverge")(outputs=[y], block=32)
    with pytest.raises(em.EmberValueError, match=r"^\[cuda\] kernel 'early'.*thread \(3, 0, 0\).*__syncthreads "
                       r"reached by 31 of the block's 32 threads"):
        em.cuda.Kernel(src, "early")(outputs=[y], block=32)


def test_a_missing_barrier_gives_a_wrong_result(cuda):
    # Each thread reads its neighbour's shared slot without __syncthreads: the emulator's thread order
    # between barriers makes the stale (0xff: NaN) value show up, as a race would on a GPU.
    src = r"""
__global__ void shift(const float* x, float* y) {
  __shared__ float s[128];
  int t = threadIdx.x;
  s[t] = x[t];
  SYNC
  y[t] = s[(t + 1) % 128];
}
"""
    x = em.tensor(np.arange(128, dtype=np.float32), device=cuda)._storage
    y = empty(128, "float32", cuda)
    em.cuda.Kernel(src, "shift", options=["-DSYNC=__syncthreads();"])(inputs=[x], outputs=[y], block=128)
    np.testing.assert_array_equal(y.numpy(), np.roll(np.arange(128, dtype=np.float32), -1))
    em.cuda.Kernel(src, "shift", options=["-DSYNC="])(inputs=[x], outputs=[y], block=128)
    assert not np.array_equal(y.numpy(), np.roll(np.arange(128, dtype=np.float32), -1))


def test_shared_memory_limit(cuda):
    src = "__global__ void big(float* y) { __shared__ float s[13000]; s[threadIdx.x] = 0; y[0] = s[0]; }"
    with pytest.raises(em.EmberValueError, match=r"^\[cuda\] kernel 'big'.*shared memory reaches 52000 bytes; "
                       r"CUDA allows 49152"):
        em.cuda.Kernel(src, "big")(outputs=[empty(1, "float32", cuda)], block=1)
    dyn = "__global__ void d(float* y) { extern __shared__ float s[]; y[0] = s[0]; }"
    with pytest.raises(em.EmberValueError, match=r"shared_mem=50000 bytes of dynamic shared memory; a block may have "
                       r"49152"):
        em.cuda.Kernel(dyn, "d")(outputs=[empty(1, "float32", cuda)], block=1, shared_mem=50000)
    with pytest.raises(em.EmberValueError, match=r"extern __shared__ memory; the launch gave shared_mem=0"):
        em.cuda.Kernel(dyn, "d")(outputs=[empty(1, "float32", cuda)], block=1)


@pytest.mark.parametrize("grid,block,msg", [
    ((1,), (1025,), r"block \(1025, 1, 1\) is not a CUDA block"),
    ((1,), (32, 32, 2), r"at most 1024 threads in all \(it has 2048\)"),
    ((1,), (1, 1, 65), r"block \(1, 1, 65\) is not a CUDA block"),
    ((1, 65536), (1,), r"grid \(1, 65536, 1\) exceeds CUDA's limits"),
])
def test_bad_grid_and_block(cuda, grid, block, msg):
    k = em.cuda.Kernel("__global__ void a(float* y) { y[0] = 1.0f; }", "a")
    with pytest.raises(em.EmberValueError, match=r"^\[cuda\] kernel 'a': .*" + msg):
        k(outputs=[empty(1, "float32", cuda)], grid=grid, block=block)


def test_bad_dims_from_python(cuda):
    k = em.cuda.Kernel("__global__ void a(float* y) { y[0] = 1.0f; }", "a")
    y = empty(1, "float32", cuda)
    with pytest.raises(em.EmberValueError, match=r"block \(0,\) must be ints in \[1, 2\^32\)"):
        k(outputs=[y], block=0)
    with pytest.raises(em.EmberTypeError, match="grid must be 1 to 3 ints"):
        k(outputs=[y], grid=(1, 1, 1, 1))
    with pytest.raises(em.EmberValueError, match="shared_mem"):
        k(outputs=[y], shared_mem=-1)


def test_wrong_argument_kinds_and_dtypes(cuda):
    src = "__global__ void f(const float* x, float* y, int n, float a) { if (threadIdx.x < n) y[0] = a * x[0]; }"
    k = em.cuda.Kernel(src, "f")
    x, y = em.zeros(2, device=cuda)._storage, empty(2, "float32", cuda)
    with pytest.raises(em.EmberTypeError, match=r"takes 4 arguments; the call gives 1 inputs, 1 outputs and 1 scalars"):
        k(inputs=[x], outputs=[y], scalars=[np.int32(1)])
    with pytest.raises(em.DTypeError, match=r"scalars\[0\] is numpy int64, but argument 2 \('n', int\) takes int32"):
        k(inputs=[x], outputs=[y], scalars=[np.int64(1), np.float32(2)])
    with pytest.raises(em.EmberTypeError, match=r"scalars\[0\] must be a numpy scalar"):
        k(inputs=[x], outputs=[y], scalars=[1, np.float32(2)])
    xi = em.zeros(2, dtype="int32", device=cuda)._storage
    with pytest.raises(em.DTypeError, match=r"inputs\[0\] holds int32, but argument 0 \('x', const float\*\) points "
                       r"to float32"):
        k(inputs=[xi], outputs=[y], scalars=[np.int32(1), np.float32(2)])
    with pytest.raises(em.EmberTypeError, match=r"scalars\[0\] is a value, but argument 1 \('y', float\*\) is a pointer"):
        k(inputs=[x], scalars=[np.int32(1), np.int32(1), np.float32(2)])
    with pytest.raises(em.EmberTypeError, match=r"inputs\[0\] must be a CudaStorage, got ndarray"):
        k(inputs=[np.zeros(2, np.float32)], outputs=[y], scalars=[np.int32(1), np.float32(2)])


def test_device_mismatch(cuda):
    k = em.cuda.Kernel("__global__ void f(const float* x, float* y) { y[0] = x[0]; }", "f")
    cpu = em.zeros(2, device="cpu")._storage
    with pytest.raises(em.DeviceError, match=r"inputs\[0\] is a storage on cpu; a CUDA kernel takes CudaStorages"):
        k(inputs=[cpu], outputs=[empty(2, "float32", cuda)])
    with pytest.raises(em.DeviceError, match=r"\[cuda\] expected a CUDA device, got cpu"):
        em.cuda.synchronize("cpu")


def test_warp_intrinsic_with_a_lane_missing_from_its_mask(cuda):
    src = r"""
__global__ void w(float* y) {
  float v = threadIdx.x;
  if (threadIdx.x < 16) v = __shfl_down_sync(0xffffffffu, v, 1);
  y[threadIdx.x] = v;
}
"""
    with pytest.raises(em.EmberValueError, match=r"__shfl_down_sync with mask 0xffffffff: lanes 0xffff0000 of the mask "
                       r"did not reach it"):
        em.cuda.Kernel(src, "w")(outputs=[empty(32, "float32", cuda)], block=32)


def test_a_kernels_fault_does_not_kill_the_process(cuda):
    src = "__global__ void z(int* y, int d) { y[0] = y[1] / d; }"
    with pytest.raises(em.EmberError, match=r"^\[cuda\] kernel 'z'"):
        em.cuda.Kernel(src, "z")(outputs=[empty(2, "int32", cuda)], scalars=[np.int32(0)])
