"""ember: a tensor library with a C++ core whose centre is custom operators."""
# ruff: noqa: I001  (the import order is deliberate: BLAS is preloaded, then _C, then Tensor and its methods)
import os as _env_os
import sys as _sys

if _sys.platform != "darwin":
    # _C links libscipy_openblas by name; load it from the scipy-openblas32 package first so the
    # extension finds it wherever ember is installed (the rpath covers only the site-packages case).
    import ctypes as _ctypes
    import os as _os

    import scipy_openblas32 as _openblas

    _ctypes.CDLL(_os.path.join(_openblas.get_lib_dir(), "libscipy_openblas.so"), mode=_ctypes.RTLD_GLOBAL)

from . import _C  # noqa: E402

if _env_os.environ.get("EMBER_ISA", "base") not in ("base", "avx2", "avx512"):
    # the core ignores a value it does not know; a typo must not pass for a choice
    import warnings as _warnings

    _warnings.warn(f"[EMBER_ISA] unknown value {_env_os.environ['EMBER_ISA']!r} (expected base, avx2 or "
                   f"avx512): ignored, running {_C.isa()}", RuntimeWarning, stacklevel=2)
if _env_os.environ.get("EMBER_CONV_GEMM", "blas") not in ("packed", "blas"):
    import warnings as _warnings

    _warnings.warn(f"[EMBER_CONV_GEMM] unknown value {_env_os.environ['EMBER_CONV_GEMM']!r} (expected packed or "
                   "blas): ignored, the CPU's default applies", RuntimeWarning, stacklevel=2)
if _env_os.environ.get("EMBER_MATMUL_GEMM", "packed") not in ("amx", "packed", "blas"):
    import warnings as _warnings

    _warnings.warn(f"[EMBER_MATMUL_GEMM] unknown value {_env_os.environ['EMBER_MATMUL_GEMM']!r} (expected amx, "
                   "packed or blas): ignored, the CPU's default applies", RuntimeWarning, stacklevel=2)
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
    get_default_device,
    int32,
    int64,
    metal_is_available,
    cuda_is_available,
    set_default_device,
    uint8,
    uint32,
)
from .errors import (
    BackwardNotSupported,
    DeviceError,
    DLPackCopyWarning,
    DTypeError,
    EmberError,
    EmberIOError,
    EmberTypeError,
    EmberValueError,
    GradientsInStore,
    IndexOutOfRange,
    InplaceModifiedError,
    NoGradientPath,
    OutOfMemory,
    ShapeError,
    UnsupportedOp,
)
from .tensor_type import Tensor
from .variable import Var
from . import tensor_methods as _tensor_methods  # noqa: F401  binds Tensor's methods (one table per op module)
from .creation import (
    arange,
    from_numpy,
    full,
    full_like,
    manual_seed,
    ones,
    ones_like,
    rand,
    randn,
    tensor,
    zeros,
    zeros_like,
)
from .multi import cat, maximum, minimum, stack, where

from .creation import eye, randint  # noqa: E402
from .composite import linspace  # noqa: E402
from .generator import Generator  # noqa: E402
from .promotion import promote_types, result_type  # noqa: E402
from .interop import from_dlpack  # noqa: E402
from .io import load_safetensors, save_safetensors  # noqa: E402
from .serialize import load, save  # noqa: E402
from .einsum import einsum  # noqa: E402
from .memory import empty_cache, memory_stats, reset_peak_memory_stats, set_cache_limit  # noqa: E402
from . import cuda, metal, nn, optim  # noqa: E402
from . import testing  # noqa: E402
from . import models  # noqa: E402

Layout = _C.Layout
Storage = _C.Storage
CpuStorage = _C.CpuStorage
CudaStorage = _C.CudaStorage

from .custom_op import (  # noqa: E402
    CustomOp,
    CustomOp1,
    CustomOp2,
    CustomOp3,
    InplaceOp1,
    InplaceOp2,
    InplaceOp3,
    MetalStorage,
)
from .custom_op_n import apply_op  # noqa: E402
from .checkpoint import checkpoint  # noqa: E402
from . import profiler  # noqa: E402


def set_num_threads(n: int) -> None:
    """Sets the number of threads of ember's pool, which also runs BLAS (``EMBER_NUM_THREADS`` at start).

    Args:
        n: the thread count, from 1 to 1024. Results are bit-identical for any ``n``.

    Raises:
        EmberValueError: ``[set_num_threads]`` for a count outside [1, 1024], or when the system refuses
            the threads; the pool then keeps its size.
    """
    n = _int_arg(n, "set_num_threads", "n")  # int() would truncate 1.5 and raise bare errors on "a" or nan
    if not 1 <= n <= 1024:  # checked here: a Python int may not fit the core's int
        raise EmberValueError(f"[set_num_threads] n must be between 1 and 1024, got {n}")
    _C.set_num_threads(n)


def get_num_threads() -> int:
    """The number of threads of ember's pool."""
    return _C.get_num_threads()


# the functional namespace (em.exp(x), em.sum(x, dim), ...); last, since em.sum / em.max / em.min /
# em.abs / em.round / em.pow / em.any / em.all shadow the builtins in this module from here on
from .functional import (  # noqa: E402
    acos, allclose, argmax, argmin, as_tensor, asin, atan, add, broadcast_to, ceil, chunk, clamp, cos, cosh,
    div, eq, erf, exp, expm1, flatten, flip, floor, floor_divide, gather, ge, gelu, gt, index_select, isclose,
    isfinite, isinf, isnan, le, log, log1p, log2, log10, log_softmax, logsumexp, lt, masked_fill, matmul, mean,
    mul, narrow, ne, neg, numel, permute, recip, relu, remainder, reshape, rsqrt, sigmoid, sign, silu, sin,
    sinh, softmax, split, sqr, sqrt, squeeze, std, sub, tan, tanh, tile, transpose, tril, triu, trunc, unbind,
    unsqueeze, var, square, reciprocal, affine, powf,
    bitwise_and, bitwise_not, bitwise_or, bitwise_xor, logical_and, logical_not, logical_or, logical_xor,
)
# em.sum / em.max / ... exist, but stay out of __all__: `from ember import *` keeps Python's builtins
from .functional import abs as abs, all as all, any as any, max as max, min as min  # noqa: E402
from .functional import pow as pow, round as round, sum as sum  # noqa: E402
from .sorting import argsort, cummax, cummin, cumprod, cumsum, sort, topk  # noqa: E402
from .sampling import multinomial  # noqa: E402
from .scatter import scatter, scatter_reduce  # noqa: E402
from .movement import meshgrid, pad, roll  # noqa: E402
# em.bool, as torch.bool; out of __all__ like em.sum, so that `from ember import *` keeps builtins.bool
from .dtypes import bool as bool  # noqa: E402


__version__ = "0.1.0"

__all__ = [
    "ALL_DTYPES", "BackwardNotSupported", "CpuStorage", "CustomOp", "CustomOp1", "CustomOp2", "CustomOp3", "DType",
    "DTypeError", "Device", "DeviceError", "EmberError", "EmberIOError", "EmberValueError", "GradStore", "IndexOutOfRange",
    "InplaceModifiedError", "InplaceOp1", "InplaceOp2", "InplaceOp3", "Layout", "MetalStorage", "CudaStorage", "OutOfMemory",
    "ShapeError", "Storage", "Tensor", "UnsupportedOp", "Var", "arange", "bfloat16", "cat", "cpu", "empty_cache",
    "float16", "float32", "float64", "from_dlpack", "from_numpy", "full", "full_like", "get_num_threads", "int32", "int64",
    "is_grad_enabled", "load_safetensors", "manual_seed", "maximum", "memory_stats", "metal", "metal_is_available",
    "cuda", "cuda_is_available",
    "minimum", "nn", "no_grad", "ones", "ones_like", "optim", "rand", "randn", "reset_peak_memory_stats",
    "save_safetensors", "set_cache_limit", "set_num_threads", "stack", "save", "load", "einsum",
    "tensor", "testing", "uint8", "uint32", "where", "zeros", "zeros_like",
    "DLPackCopyWarning", "EmberTypeError", "GradientsInStore", "NoGradientPath", "eye", "linspace", "promote_types", "result_type",
    # the functional namespace (sum, max, min, abs, round, pow, any, all are left out on purpose)
    "acos", "add", "allclose", "argmax", "argmin", "as_tensor", "asin", "atan", "broadcast_to", "ceil", "chunk",
    "clamp", "cos", "cosh", "div", "eq", "erf", "exp", "expm1", "flatten", "flip", "floor", "floor_divide",
    "gather", "ge", "gelu", "gt", "index_select", "isclose", "isfinite", "isinf", "isnan", "le", "log", "log1p",
    "log2", "log10", "log_softmax", "logsumexp", "lt", "masked_fill", "matmul", "mean", "mul", "narrow", "ne",
    "neg", "numel", "permute", "recip", "relu", "remainder", "reshape", "rsqrt", "sigmoid", "sign", "silu",
    "sin", "sinh", "softmax", "split", "sqr", "sqrt", "squeeze", "std", "sub", "tan", "tanh", "tile",
    "transpose", "tril", "triu", "trunc", "unbind", "unsqueeze", "var", "square", "reciprocal", "affine",
    "powf", "get_default_device", "set_default_device",
    "argsort", "cummax", "cummin", "cumprod", "cumsum", "sort", "topk",
    "multinomial", "Generator",
    "scatter", "scatter_reduce", "meshgrid", "pad", "roll",
    "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "logical_and", "logical_not", "logical_or",
    "logical_xor", "randint",
    "apply_op", "checkpoint", "profiler",
    "models",
]
