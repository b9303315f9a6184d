"""Python conveniences on _C storages for custom-op authors: .dtype/.device, CpuStorage.from_numpy/empty."""
from __future__ import annotations

import numpy as np

from . import _C
from . import dtypes as _dt
from .errors import DTypeError, EmberValueError

_BY_CODE = _dt.BY_CODE
_KIND_NAMES = {v: k for k, v in _dt.Device._KINDS.items()}

# numpy dtype -> ember dtype for the dtypes a storage holds exactly (bfloat16 is found through
# from_numpy_dtype, which imports ml_dtypes only when such an array shows up).
_EXACT = {np.dtype(_dt.numpy_dtype(d)): d for d in _dt.ALL_DTYPES if d is not _dt.bfloat16}


def _storage_dtype(self) -> _dt.DType:
    return _BY_CODE[self.dtype_code]


def _storage_device(self) -> _dt.Device:
    kind = self.device_kind
    if kind == 0:
        return _dt.cpu  # the shared singleton: no allocation on the hot path
    return _dt.Device(_KIND_NAMES[kind], self.device_index)


def _from_numpy(arr, dtype=None):
    """A new CpuStorage holding a copy of ``arr`` (flattened in C order), in ember's aligned memory.

    The dtype follows the array's (int32/int16/bool are widened like ``em.tensor`` does); pass
    ``dtype=`` to convert (``dtype=em.bfloat16`` rounds float data to bfloat16).
    """
    if type(arr) is not np.ndarray:
        arr = np.asarray(arr)
    if dtype is None:
        dt = _EXACT.get(arr.dtype)
        if dt is None:
            if not arr.dtype.isnative:  # big-endian data: same values in native order
                arr = arr.astype(arr.dtype.newbyteorder("="))
            try:
                dt = _EXACT.get(arr.dtype) or _dt.from_numpy_dtype(arr.dtype)
            except DTypeError:
                raise DTypeError(f"[from_numpy] numpy dtype {arr.dtype} is not supported") from None
            arr = arr.astype(_dt.numpy_dtype(dt), copy=False)
    else:
        dt = _dt.to_dtype(dtype)
        npt = _dt.numpy_dtype(dt)
        if arr.dtype != npt:
            arr = arr.astype(npt)
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return _C.CpuStorage._from_numpy_code(arr, dt.code)


def _empty(n, dtype):
    """A new CpuStorage of ``n`` uninitialised elements of ``dtype`` (an em.DType, name or numpy dtype)."""
    n = int(n)
    if not 0 <= n < 2**63:  # past int64 the binding would raise a bare TypeError
        raise EmberValueError(f"[empty] element count must be in [0, 2**63), got {n}")
    return _C.CpuStorage._empty_code(n, _dt.to_dtype(dtype).code)


_C.Storage.dtype = property(_storage_dtype, doc="The element type, an em.DType.")
_C.Storage.device = property(_storage_device, doc="The device holding the buffer, an em.Device.")
_C.CpuStorage.from_numpy = staticmethod(_from_numpy)
_C.CpuStorage.empty = staticmethod(_empty)
