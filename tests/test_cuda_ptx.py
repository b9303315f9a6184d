"""em.cuda.Kernel.ptx through NVRTC (PyPI's nvidia-cuda-nvrtc, in the test extras on Linux): PTX for sm_80 and
sm_90 on a machine without a GPU, NVRTC's compile log with the source's line numbers, and the error that names
the package where NVRTC is not installed."""
import importlib.metadata as md

import pytest

import ember as em

SRC = r"""
__global__ void scale(const float* __restrict__ x, float* y, float a, int n) {
  __shared__ float s[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  float v = __shfl_down_sync(0xffffffffu, s[threadIdx.x], 1);
  if (i < n) y[i] = a * v + __expf(v);
}
"""


def _has_nvrtc():
    try:
        md.distribution("nvidia-cuda-nvrtc")
        return True
    except md.PackageNotFoundError:
        return False


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_for_each_arch_or_a_clear_error(arch):
    k = em.cuda.Kernel(SRC, "scale")
    if not _has_nvrtc():
        with pytest.raises(em.EmberValueError, match=r"pip install nvidia-cuda-nvrtc"):
            k.ptx(arch)
        return
    ptx = k.ptx(arch)
    assert f".target {arch}" in ptx
    assert ".entry" in ptx and "scale" in ptx
    assert "shfl.sync.down" in ptx and "bar.sync" in ptx


def test_ptx_compile_error_has_nvrtcs_log_with_line_numbers():
    k = em.cuda.Kernel("__global__ void bad(float* y) {\n  y[0] = 1.0f;\n  y[1] = nope;\n}\n", "bad")
    if not _has_nvrtc():
        with pytest.raises(em.EmberValueError, match=r"pip install nvidia-cuda-nvrtc"):
            k.ptx()
        return
    with pytest.raises(em.EmberValueError, match=r"(?s)^\[cuda\] compiling bad\.cu failed \(NVRTC, sm_90\):.*bad\.cu\(3\).*nope"):
        k.ptx()
    with pytest.raises(em.EmberValueError, match=r"arch must be like 'sm_90'"):
        k.ptx("hopper")
