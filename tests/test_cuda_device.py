"""The cuda device under EMBER_CUDA=emulate: availability, em.cuda's functions, tensors moving to and from the
device, copy_into / fill / to_dtype on device storages, CudaStorage.empty, the Unsupported error of every op
ember has no CUDA kernel for yet (the kernel registry's wording), and a CustomOp's cuda_fwd."""
import os

import numpy as np
import pytest

import ember as em


@pytest.fixture
def cuda(monkeypatch):
    # The emulator, unless the suite runs on a real GPU (scripts/cuda_smoke.sh: EMBER_TEST_DEVICE=cuda).
    if not (os.environ.get("EMBER_TEST_DEVICE", "").startswith("cuda") and em.cuda.backend() == "nvidia"):
        monkeypatch.setenv("EMBER_CUDA", "emulate")
    return em.Device("cuda")


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


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int64", "int32", "uint32",
                                   "uint8", "bool"])
def test_round_trip_and_to(cuda, rng, dtype):
    x = (rng.standard_normal((3, 5)) * 10).astype(np.float32)
    t = em.tensor(x, device="cpu").to(dtype=dtype)  # the default device may be metal (no float64)
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
    np.testing.assert_array_equal(c.T.to(dtype="float64").numpy(), x.T.astype(np.float64))
    np.testing.assert_array_equal(em.zeros((2, 3), device=cuda).numpy(), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(em.full((2, 3), 7.5, device=cuda).numpy(), np.full((2, 3), 7.5, np.float32))
    np.testing.assert_array_equal(em.arange(5, device=cuda).numpy(), np.arange(5))
    em.manual_seed(3)
    a = em.rand(100, device=cuda).numpy()
    em.manual_seed(3)
    np.testing.assert_array_equal(a, em.rand(100, device="cpu").numpy())  # the CPU's values, bit for bit
    s = em.CudaStorage.empty(10, "int32", device=cuda)
    assert s.nbytes == 40 and s.dtype == em.int32 and s.device == cuda


@pytest.mark.parametrize("op", [
    ("add", lambda a, b: a + b), ("exp", lambda a, b: a.exp()), ("sum", lambda a, b: a.sum()),
    ("matmul", lambda a, b: a @ b.T), ("where", lambda a, b: em.where(a > 0, a, b)),
])
def test_ops_without_a_cuda_kernel_raise_unsupported(cuda, op):
    name, f = op
    a, b = em.ones((2, 2), device=cuda), em.ones((2, 2), device=cuda)
    with pytest.raises(em.UnsupportedOp, match=r"is not implemented on device cuda:0"):
        f(a, b)


def test_a_registry_family_without_a_cuda_entry_raises_unsupported(cuda):
    # Families in the kernel registry (cpp/registry.h) have no CUDA entry yet: the registry's own error.
    x = em.ones((1, 4, 3, 3), device=cuda)
    with pytest.raises(em.UnsupportedOp, match=r"^\[group_norm\] is not implemented on device cuda:0$"):
        em._C.fused.group_norm_fwd(x._storage, x._layout, 2, None, None, None, None, 1e-5)
    for f, name in [(lambda: em.nn.functional.group_norm(x, 2), "group_norm"), (lambda: x.sort(-1), "sort"),
                    (lambda: x.cumsum(-1), "scan"), (lambda: em.nn.ops.softmax(x), "softmax"),
                    (lambda: em._C.fused.rms_norm_fwd(x._storage, x._layout, None, None, 1e-5), "rms_norm")]:
        with pytest.raises(em.UnsupportedOp, match=rf"^\[{name}\] is not implemented on device cuda:0$"):
            f()


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
