"""ember: a tensor library with a C++ core whose centre is custom operators."""
# ruff: noqa: I001  (the import order is deliberate: BLAS is preloaded, then _C, then the modules that patch Tensor)
import sys as _sys

if _sys.platform != "darwin":
    # _C links libscipy_openblas by name; load it from the scipy-openblas32 package first so the
    # extension finds it wherever ember is installed (the rpath covers only the site-packages case).
    import ctypes as _ctypes
    import os as _os

    import scipy_openblas32 as _openblas

    _ctypes.CDLL(_os.path.join(_openblas.get_lib_dir(), "libscipy_openblas.so"), mode=_ctypes.RTLD_GLOBAL)

from . import _C  # noqa: E402
from .args import int_arg as _int_arg  # noqa: E402
from .backprop import GradStore, is_grad_enabled, no_grad
from .dtypes import (
    ALL_DTYPES,
    Device,
    DType,
    bfloat16,
    cpu,
    float16,
    float32,
    float64,
    int64,
    metal_is_available,
    uint8,
    uint32,
)
from .errors import (
    BackwardNotSupported,
    DeviceError,
    DTypeError,
    EmberError,
    EmberIOError,
    EmberValueError,
    IndexOutOfRange,
    InplaceModifiedError,
    OutOfMemory,
    ShapeError,
    UnsupportedOp,
)
from .tensor import (
    Tensor,
    Var,
    arange,
    cat,
    from_numpy,
    full,
    full_like,
    manual_seed,
    maximum,
    minimum,
    ones,
    ones_like,
    rand,
    randn,
    stack,
    tensor,
    where,
    zeros,
    zeros_like,
)

from .interop import from_dlpack  # noqa: E402  (also attaches Tensor.__dlpack__)
from .io import load_safetensors, save_safetensors  # noqa: E402
from .memory import empty_cache, memory_stats, reset_peak_memory_stats, set_cache_limit  # noqa: E402
from . import metal, nn, optim  # noqa: E402
from . import testing  # noqa: E402

Layout = _C.Layout
Storage = _C.Storage
CpuStorage = _C.CpuStorage

from .custom_op import (  # noqa: E402  (also attaches apply_op*/inplace_op* to Tensor)
    CustomOp1,
    CustomOp2,
    CustomOp3,
    InplaceOp1,
    InplaceOp2,
    InplaceOp3,
    MetalStorage,
)
from . import tensor_docs as _tensor_docs  # noqa: E402

_tensor_docs.apply(Tensor, Var)


def set_num_threads(n: int) -> None:
    """Sets the number of threads of ember's pool, which also runs BLAS (``EMBER_NUM_THREADS`` at start).

    Args:
        n: the thread count, clamped to [1, 1024]. Results are bit-identical for any ``n``.
    """
    n = _int_arg(n, "set_num_threads", "n")  # int() would truncate 1.5 and raise bare errors on "a" or nan
    _C.set_num_threads(max(0, min(n, 2**31 - 1)))  # the core clamps to [1, 1024]; no int overflow


def get_num_threads() -> int:
    """The number of threads of ember's pool."""
    return _C.get_num_threads()


__version__ = "0.1.0"

__all__ = [
    "ALL_DTYPES", "BackwardNotSupported", "CpuStorage", "CustomOp1", "CustomOp2", "CustomOp3", "DType",
    "DTypeError", "Device", "DeviceError", "EmberError", "EmberIOError", "EmberValueError", "GradStore", "IndexOutOfRange",
    "InplaceModifiedError", "InplaceOp1", "InplaceOp2", "InplaceOp3", "Layout", "MetalStorage", "OutOfMemory",
    "ShapeError", "Storage", "Tensor", "UnsupportedOp", "Var", "arange", "bfloat16", "cat", "cpu", "empty_cache",
    "float16", "float32", "float64", "from_dlpack", "from_numpy", "full", "full_like", "get_num_threads", "int64",
    "is_grad_enabled", "load_safetensors", "manual_seed", "maximum", "memory_stats", "metal", "metal_is_available",
    "minimum", "nn", "no_grad", "ones", "ones_like", "optim", "rand", "randn", "reset_peak_memory_stats",
    "save_safetensors", "set_cache_limit", "set_num_threads", "stack",
    "tensor", "testing", "uint8", "uint32", "where", "zeros", "zeros_like",
]
