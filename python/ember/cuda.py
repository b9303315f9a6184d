"""ember's CUDA layer as seen from Python: which backend runs CUDA code, device count, synchronize, CudaStorage.empty, Kernel."""
from __future__ import annotations

from . import _C
from . import dtypes as _dt
from .cuda_kernel import Kernel, _register_libraries, cache_info, cublas_library, nvrtc_library
from .errors import DeviceError, EmberValueError

__all__ = ["backend", "device_count", "synchronize", "describe", "Kernel", "cache_info", "nvrtc_library",
           "cublas_library"]


def backend():
    """Names the implementation behind ``Device("cuda")``.

    ``EMBER_CUDA=emulate`` in the environment selects ember's CUDA emulator, which compiles CUDA C++ as C++
    and runs it on the CPU on any machine (docs/cuda.md). Otherwise the NVIDIA driver (``libcuda.so.1``,
    loaded at first use) when it reports a device. Read at every call.

    Returns:
        ``"nvidia"``, ``"emulator"`` or ``None`` when this process has no CUDA device.
    """
    return _C._cuda_backend_kind()


def device_count() -> int:
    """The number of CUDA devices (1 under the emulator, 0 without a backend).

    Returns:
        int: the count.
    """
    return _C._cuda_device_count()


def _index(device) -> int:
    if device is None:
        return 0
    d = _dt.to_device(device)
    if d.type != "cuda":
        raise DeviceError(f"[cuda] expected a CUDA device, got {d}")
    return d.index


def synchronize(device=None) -> None:
    """Waits until the work launched on the CUDA device has run.

    Under the emulator every launch has already run when it returns; on a GPU a kernel's fault is
    reported here (or at the next read of its outputs).

    Args:
        device: the CUDA device (an em.Device or ``"cuda:0"``); None means cuda:0.

    Raises:
        DeviceError: no such CUDA device is available, or a kernel failed on the GPU.
    """
    _C._cuda_synchronize(_index(device))


def describe(device=None) -> str:
    """A line naming the CUDA device and its backend, e.g. ``"cuda:0 (emulator, ember CUDA emulator (CPU), emulated)"``.

    Args:
        device: the CUDA device; None means cuda:0.

    Returns:
        str: the description.

    Raises:
        DeviceError: no such CUDA device is available.
    """
    return _C._cuda_describe(_index(device))


def _empty(n, dtype, device=None):
    """A new CudaStorage of ``n`` elements of ``dtype`` on the device (contents unspecified).

    Args:
        n: the element count, an int in [0, 2**63).
        dtype: an em.DType, its name or a numpy dtype.
        device: the CUDA device; None means cuda:0.

    Returns:
        The CudaStorage.

    Raises:
        EmberValueError: ``n`` is out of range.
        DTypeError: ``dtype`` is unknown.
        DeviceError: no such CUDA device is available.
    """
    n = int(n)
    if not 0 <= n < 2**63:
        raise EmberValueError(f"[empty] element count must be in [0, 2**63), got {n}")
    return _C.CudaStorage._empty_code(n, _dt.to_dtype(dtype).code, _index(device))


_C.CudaStorage.empty = staticmethod(_empty)
_register_libraries()
