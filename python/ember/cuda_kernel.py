"""em.cuda.Kernel: CUDA C++ kernels from Python (for a custom op's ``cuda_fwd``), compiled once per device at first
use and run by ember's CUDA backend, or by its CUDA emulator on any machine; ``ptx()`` through NVRTC."""
from __future__ import annotations

import numbers
import pathlib
import sys

import numpy as np

from . import _C
from .errors import EmberTypeError, EmberValueError

__all__ = ["Kernel", "cache_info", "nvrtc_library", "cublas_library"]

_OPTION_PREFIXES = ("-D", "-U")
_NVRTC_PACKAGES = ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12")
_CUBLAS_PACKAGES = ("nvidia-cublas", "nvidia-cublas-cu12")
_found = {}


def _find_library(packages, prefix):
    """The absolute path of the shared library named ``prefix``* among the installed files of the first of
    ``packages`` found on sys.path (its wheel's RECORD lists them), or None."""
    for base in map(pathlib.Path, sys.path):
        for pkg in packages:
            for record in sorted(base.glob(pkg.replace("-", "_") + "-*.dist-info/RECORD")):
                libs = sorted(base / row.split(",")[0] for row in record.read_text().splitlines()
                              if pathlib.PurePosixPath(row.split(",")[0]).name.startswith(prefix)
                              and "builtins" not in row)
                if libs and libs[0].is_file():
                    return str(libs[0].resolve())
    return None


def nvrtc_library():
    """The NVRTC shared library of the installed ``nvidia-cuda-nvrtc`` package (13.x), or its ``-cu12`` variant.

    Found among the package's installed files (its wheel's RECORD), never at a hard-coded path.

    Returns:
        str: the library's absolute path.

    Raises:
        EmberValueError: neither package is installed (the message names the one to install).
    """
    return _installed("nvrtc")


def cublas_library():
    """The cuBLAS shared library of the installed ``nvidia-cublas`` package (13.x), or its ``-cu12`` variant.

    matmul on an NVIDIA GPU runs through it (ember's own kernel runs under the emulator). Found among the
    package's installed files, never at a hard-coded path.

    Returns:
        str: the library's absolute path.

    Raises:
        EmberValueError: neither package is installed (the message names the one to install).
    """
    return _installed("cublas")


# key: (the packages to look in, the library's file-name prefix, what the error names)
_LIBRARIES = {"nvrtc": (_NVRTC_PACKAGES, "libnvrtc.so", "NVRTC", "nvidia-cuda-nvrtc"),
              "cublas": (_CUBLAS_PACKAGES, "libcublas.so", "cuBLAS", "nvidia-cublas")}


def _installed(key):
    """The path of library `key` (found once), or EmberValueError naming the package to install."""
    if _found.get(key) is None:
        packages, prefix, what, pip_name = _LIBRARIES[key]
        _found[key] = _find_library(packages, prefix)
        if _found[key] is None:
            raise EmberValueError(f"[cuda] {what} is not installed: pip install {pip_name} "
                                  "(or pip install 'ember[cuda]')")
    return _found[key]


def _register_libraries():
    """Tells the core where NVRTC and cuBLAS are (when installed), for ember's own kernels on a GPU."""
    for find, setter in ((nvrtc_library, _C._cuda_set_nvrtc_library), (cublas_library, _C._cuda_set_cublas_library)):
        try:
            setter(find())
        except EmberValueError:
            pass  # the first use on a GPU raises, naming the package


def _dims(v, what, least):
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        v = (v,)
    try:
        dims = tuple(v)
    except TypeError:
        raise EmberTypeError(f"[cuda.Kernel] {what} must be 1 to 3 ints, got {type(v).__name__}") from None
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool)
                                          for d in dims):
        raise EmberTypeError(f"[cuda.Kernel] {what} must be 1 to 3 ints, got {v!r}")
    if any(d < least or d > 0xFFFFFFFF for d in dims):
        raise EmberValueError(f"[cuda.Kernel] {what} {dims} must be ints in [{least}, 2^32)")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


def _storages(v, what):
    if isinstance(v, (_C.Storage, np.ndarray)):
        raise EmberTypeError(f"[cuda.Kernel] {what} must be a list of CudaStorages, got one {type(v).__name__}")
    out = list(v)
    for i, s in enumerate(out):
        if not isinstance(s, _C.Storage):
            raise EmberTypeError(f"[cuda.Kernel] {what}[{i}] must be a CudaStorage, got {type(s).__name__} "
                                 "(move data with em.tensor(..., device='cuda') or em.CudaStorage.empty)")
    return out


def _scalar(v, i):
    if not isinstance(v, np.generic) or isinstance(v, (np.str_, np.bytes_, np.void, np.object_)):
        raise EmberTypeError(f"[cuda.Kernel] scalars[{i}] must be a numpy scalar whose dtype is the parameter's C "
                             f"type (np.int32(n) for an int, np.float32(x) for a float), got {type(v).__name__}")
    return (np.asarray(v).tobytes(), np.asarray(v).dtype.name)


class Kernel:
    """A CUDA kernel written in CUDA C++, callable on CudaStorages.

    Nothing is compiled when the object is made (the source is only scanned for the kernel's parameters):
    the first call on a device compiles ``source`` there (NVRTC on a GPU; the system C++ compiler under
    the CUDA emulator) and caches the module by (device, SHA-256 of the source, options, arch), never by
    name, so two kernels sharing a name but not a source never share a module. The call's arguments
    are passed in the parameters' order: the inputs' and outputs' device pointers, then the scalars by
    value.

    Args:
        source: the CUDA C++ text (``__global__ void name(...)``; ``#include <cuda_fp16.h>`` and the
            other CUDA headers are accepted).
        name: the ``__global__`` function to launch (a plain function, not a template).
        options: None or a list of NVRTC options; ``-DNAME[=VALUE]`` and ``-UNAME`` (part of the cache key).

    Raises:
        EmberTypeError: ``source`` or ``name`` is not a str, or options are malformed.
        EmberValueError: the source defines no such kernel, it is a template, or an option is not
            supported (``[cuda]``).
    """

    def __init__(self, source: str, name: str, options: list | None = None):
        if not isinstance(source, str) or not isinstance(name, str):
            raise EmberTypeError("[cuda.Kernel] source and name must be str")
        if not name:
            raise EmberValueError("[cuda.Kernel] name must not be empty")
        options = [] if options is None else options
        if not isinstance(options, (list, tuple)) or not all(isinstance(o, str) for o in options):
            raise EmberTypeError(f"[cuda.Kernel] options must be None or a list of str, got {options!r}")
        for o in options:
            if not o.startswith(_OPTION_PREFIXES) or len(o) < 3:
                raise EmberValueError(f"[cuda.Kernel] option {o!r} is not supported: ember passes -DNAME[=VALUE] "
                                      "and -UNAME")
        self.source, self.name, self.options = source, name, list(options)
        self._k = _C._cuda_kernel_new(source, name, f"{name}.cu", self.options)

    def __repr__(self):
        return f"em.cuda.Kernel({self.name!r}, source {self._k.source_hash[:12]})"

    def __call__(self, inputs=(), outputs=(), scalars=(), grid=(1, 1, 1), block=(1, 1, 1), shared_mem=0):
        """Launches the kernel on the storages' device.

        Args:
            inputs: CudaStorages the kernel reads (its first pointer parameters, in order).
            outputs: CudaStorages it writes (the pointer parameters after the inputs); their versions
                move, so autograd sees the write.
            scalars: numpy scalars, the remaining parameters by value; each dtype must be the
                parameter's C type (np.int32 for ``int``, np.float32 for ``float``, np.uint64 for ``size_t``).
            grid: blocks per grid (1 to 3 ints), as ``<<<grid, block>>>``.
            block: threads per block (1 to 3 ints; at most 1024 in all, z at most 64).
            shared_mem: bytes of dynamic shared memory (``extern __shared__``); static plus dynamic at
                most 48 KiB.

        Returns:
            None. Under the emulator the kernel has run when the call returns; on a GPU reading the
            outputs (``numpy()``, a Tensor) synchronizes.

        Raises:
            EmberTypeError: a storage that is not a CudaStorage, a scalar that is not a numpy scalar,
                or arguments that do not match the kernel's parameters in number or kind.
            DTypeError: a storage's dtype is not its pointer's element type, or a scalar's dtype is not
                its parameter's type.
            DeviceError: the storages are on different devices.
            EmberValueError: a bad grid, block or shared_mem, a compile error (the compiler's log with
                the source's line numbers), or a fault of the kernel under the emulator (barrier
                divergence, shared memory over the limit, ...).
            IndexOutOfRange: an out-of-bounds access under the emulator (naming kernel, argument, offset).
        """
        ins, outs = _storages(inputs, "inputs"), _storages(outputs, "outputs")
        sc = [_scalar(v, i) for i, v in enumerate(scalars)]
        g, b = _dims(grid, "grid", 0), _dims(block, "block", 1)
        if not isinstance(shared_mem, numbers.Integral) or isinstance(shared_mem, bool) or \
                not 0 <= shared_mem < 2**32:
            raise EmberValueError(f"[cuda.Kernel] shared_mem must be an int in [0, 2^32), got {shared_mem!r}")
        if _C._cuda_backend_kind() == "nvidia":
            _C._cuda_set_nvrtc_library(nvrtc_library())
        _C._cuda_kernel_call(self._k, ins, outs, sc, g, b, int(shared_mem))

    def ptx(self, arch: str = "sm_90") -> str:
        """The PTX NVRTC makes of the source for ``arch``, on any machine where NVRTC is installed (no GPU needed).

        Args:
            arch: the target, ``"sm_80"``, ``"sm_90"``, ... (``compute_XX`` too).

        Returns:
            str: the PTX text (``.target`` names ``arch``; the kernel is an ``.entry``).

        Raises:
            EmberValueError: NVRTC is not installed (the message names ``nvidia-cuda-nvrtc``), or the
                source does not compile (NVRTC's log with the source's line numbers).
        """
        if not isinstance(arch, str) or not arch.startswith(("sm_", "compute_")):
            raise EmberValueError(f"[cuda.Kernel] arch must be like 'sm_90', got {arch!r}")
        return _C._cuda_nvrtc_ptx(nvrtc_library(), self.source, f"{self.name}.cu", self.options, arch)


def cache_info() -> dict:
    """The Kernel module cache, per CUDA device.

    Returns:
        dict: ``{"cuda:<index>": {"compiles": n, "hits": m}}``: the calls that compiled a module on that
        device, and those that found theirs compiled.
    """
    return {f"cuda:{i}": dict(v) for i, v in _C._cuda_kernel_cache_info().items()}
