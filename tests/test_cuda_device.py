"""The cuda device under EMBER_CUDA=emulate: availability, em.cuda's functions, tensors moving to and from the
device, copy_into / fill / to_dtype on device storages (ember's translated kernels through the GPU layer),
CudaStorage.empty, trait ops and registry families running, the pool's memory
stats, and a CustomOp's cuda_fwd."""

import numpy as np
import pytest

import ember as em


def test_availability_follows_ember_cuda(monkeypatch):
    monkeypatch.setenv("EMBER_CUDA", "emulate")
    assert em.cuda_is_available() and em.cuda.backend() == "emulator" and em.cuda.device_count() == 1
    assert em.cuda.describe().startswith("cuda:0 (emulator")
    em.cuda.synchronize()
    monkeypatch.setenv("EMBER_CUDA", "off")
    assert not em.cuda_is_available() and em.cuda.backend() is None and em.cuda.device_count() == 0
    with pytest.raises(em.DeviceError, match=r"device cuda:0 is not available"):
        em.zeros(2, device="cuda")
    monkeypatch.setenv("EMBER_CUDA", "emulate")
    with pytest.raises(em.DeviceError, match=r"device cuda:1 is not available"):
        em.zeros(2, device="cuda:1")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int64", "int32", "uint32", "uint8",
                                   "bool"])
def test_round_trip_and_to(cuda, rng, dtype):
    x = (rng.standard_normal((3, 5)) * 10).astype(np.float32)
    t = em.tensor(x, device="cpu").to(dtype=dtype)  # the default device may be metal
    c = t.to(cuda)
    assert c.device == cuda and c.dtype == t.dtype
    np.testing.assert_array_equal(c.numpy(), t.numpy())
    np.testing.assert_array_equal(c.to("cpu").numpy(), t.numpy())
    # a strided view on the device: copy_into through the host
    np.testing.assert_array_equal(c.T.contiguous().numpy(), t.numpy().T)
    np.testing.assert_array_equal(c[1:, ::2].numpy(), t.numpy()[1:, ::2])


def test_to_dtype_fill_and_creation(cuda, rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    c = em.tensor(x, device=cuda)
    np.testing.assert_array_equal(c.to(dtype="float16").numpy(), x.astype(np.float16))
    np.testing.assert_array_equal(c.T.to(dtype="int32").numpy(), x.T.astype(np.int32))
    np.testing.assert_array_equal(em.zeros((2, 3), device=cuda).numpy(), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(em.full((2, 3), 7.5, device=cuda).numpy(), np.full((2, 3), 7.5, np.float32))
    np.testing.assert_array_equal(em.arange(5, device=cuda).numpy(), np.arange(5))
    em.manual_seed(3)
    a = em.rand(100, device=cuda).numpy()
    em.manual_seed(3)
    np.testing.assert_array_equal(a, em.rand(100, device="cpu").numpy())  # the CPU's values, bit for bit
    s = em.CudaStorage.empty(10, "int32", device=cuda)
    assert s.nbytes == 40 and s.dtype == em.int32 and s.device == cuda


def test_trait_ops_and_registry_families_run(cuda, rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5)).astype(np.float32)
    x, y = em.tensor(a, device=cuda), em.tensor(b, device=cuda)
    np.testing.assert_allclose((x + y).numpy(), a + b, rtol=1e-6)
    np.testing.assert_allclose(x.exp().numpy(), np.exp(a), rtol=1e-5)
    np.testing.assert_allclose(x.sum().numpy(), a.sum(), rtol=1e-5)
    np.testing.assert_allclose((x @ y.T).numpy(), a @ b.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(em.where(x > 0, x, y).numpy(), np.where(a > 0, a, b))
    np.testing.assert_array_equal(x.sort(-1)[0].numpy(), np.sort(a, -1))


def test_memory_stats_come_from_the_pool(cuda):
    em.cuda.synchronize()
    before = em.memory_stats(cuda)["allocated_bytes"]
    x = em.ones(1000, device=cuda)
    assert em.memory_stats(cuda)["allocated_bytes"] >= before + 4000
    del x
    assert em.memory_stats(cuda)["allocated_bytes"] == before
    assert em.memory_stats(cuda)["cached_bytes"] >= 4000  # kept for reuse, as Metal's pool does
    em.empty_cache(cuda)
    assert em.memory_stats(cuda)["cached_bytes"] == 0


def test_mixed_devices_raise_device_error(cuda):
    with pytest.raises(em.DeviceError):
        em.ones(2, device=cuda) + em.ones(2, device="cpu")  # the default device may be cuda


SCALE = r"""
__global__ void scale(const float* x, float* y, float a, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}
"""


class Scale(em.CustomOp1):
    name = "scale3"
    kernel = None

    def cpu_fwd(self, storage, layout):
        return em.CpuStorage.from_numpy(storage.as_numpy(layout) * np.float32(3)), layout.shape

    def cuda_fwd(self, storage, layout):
        if Scale.kernel is None:
            Scale.kernel = em.cuda.Kernel(SCALE, "scale")
        n = layout.numel()
        if not layout.is_contiguous() or layout.start_offset != 0:
            raise em.EmberValueError("[scale3] expects a dense input")
        out = em.CudaStorage.empty(n, storage.dtype, device=storage.device)
        Scale.kernel(inputs=[storage], outputs=[out], scalars=[np.float32(3), np.int64(n)],
                     grid=(n + 127) // 128, block=128)
        return out, layout.shape

    def bwd(self, x, y, g):
        return g * 3


def test_custom_op_cuda_fwd(cuda, rng):
    x = rng.standard_normal((4, 33)).astype(np.float32)
    t = em.tensor(x, device=cuda)
    y = t.apply_op1(Scale())
    assert y.device == cuda
    np.testing.assert_array_equal(y.numpy(), x * np.float32(3))
    np.testing.assert_array_equal(em.tensor(x, device="cpu").apply_op1(Scale()).numpy(), x * np.float32(3))
