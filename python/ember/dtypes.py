"""DType and Device: value objects shared by the facade, with the numpy dtype mappings."""
from __future__ import annotations

import operator

import ml_dtypes as _ml_dtypes
import numpy as np

from .errors import DeviceError, DTypeError, EmberTypeError

# numpy has no bfloat16; ml_dtypes' is the one JAX and MLX use, so a bf16 tensor is such an array.
_NP_BF16 = np.dtype(_ml_dtypes.bfloat16)


class DType:
    """An element type: ``em.float32 float16 bfloat16 float64 int64 uint32 uint8``.

    Instances are singletons (compare with ``is`` or ``==``; they pickle to themselves). Attributes:
    ``name`` (``"float32"``), ``itemsize`` (bytes per element), ``is_float``, and ``code`` (the
    index the C++ core uses). Functions take a DType, its name or a numpy dtype wherever they take a
    dtype.
    """

    __slots__ = ("name", "itemsize", "is_float", "code")

    def __init__(self, name, itemsize, is_float, code):
        """Made once per dtype at import (use ``em.float32`` and friends): ``name``, ``itemsize`` in
        bytes, ``is_float``, and ``code``, the C++ core's index of the dtype."""
        self.name, self.itemsize, self.is_float, self.code = name, itemsize, is_float, code

    def __repr__(self):
        return f"ember.{self.name}"

    def __reduce__(self):
        return (_dtype_by_name, (self.name,))


float32 = DType("float32", 4, True, 0)
float16 = DType("float16", 2, True, 1)
bfloat16 = DType("bfloat16", 2, True, 2)
float64 = DType("float64", 8, True, 3)
int64 = DType("int64", 8, False, 4)
uint32 = DType("uint32", 4, False, 5)
uint8 = DType("uint8", 1, False, 6)
ALL_DTYPES = (float32, float16, bfloat16, float64, int64, uint32, uint8)
BY_CODE = ALL_DTYPES  # indexed by the C++ code
_BY_NAME = {d.name: d for d in ALL_DTYPES}


def _dtype_by_name(name):
    return _BY_NAME[name]


def to_dtype(dt) -> DType:
    """The ember DType for ``dt``: an ember DType, its name, or a numpy dtype; raises DTypeError."""
    if isinstance(dt, DType):
        return dt
    if isinstance(dt, str) and dt in _BY_NAME:
        return _BY_NAME[dt]
    if dt is None:  # np.dtype(None) is float64: never pick a dtype the caller did not name
        raise DTypeError("[dtype] expected a dtype, got None")
    try:
        return from_numpy_dtype(np.dtype(dt))
    except TypeError:
        raise DTypeError(f"[dtype] unknown dtype {dt!r}") from None


_NP_TO_EMBER = {
    np.dtype(np.float32): float32,
    np.dtype(np.float16): float16,
    np.dtype(np.float64): float64,
    np.dtype(np.int64): int64,
    np.dtype(np.uint32): uint32,
    np.dtype(np.uint8): uint8,
}
# numpy dtypes ember has no slot for are widened (like torch's defaults): ints -> int64, bool -> uint8.
_NP_WIDEN = {
    np.dtype(np.bool_): uint8,
    np.dtype(np.int8): int64,
    np.dtype(np.int16): int64,
    np.dtype(np.int32): int64,
    np.dtype(np.uint16): int64,
}


def from_numpy_dtype(npdt: np.dtype) -> DType:
    """The ember DType holding numpy dtype ``npdt`` (narrow ints widen to int64, bool to uint8)."""
    if npdt in _NP_TO_EMBER:
        return _NP_TO_EMBER[npdt]
    if npdt == _NP_BF16:
        return bfloat16
    if npdt in _NP_WIDEN:
        return _NP_WIDEN[npdt]
    raise DTypeError(f"[tensor] numpy dtype {npdt} is not supported")


def numpy_dtype(dt: DType):
    """The numpy dtype that holds ``dt`` exactly (``ml_dtypes.bfloat16`` for bfloat16)."""
    if dt is bfloat16:
        return _NP_BF16
    return np.dtype(dt.name)


class Device:
    """A device: ``Device("cpu")`` (also ``em.cpu``), ``Device("metal", 0)`` or ``Device("metal:0")``.

    Devices compare and hash by value. Attributes: ``type`` (``"cpu"``, ``"metal"``, ``"cuda"``) and
    ``index``.
    """

    __slots__ = ("type", "index", "kind")
    _KINDS = {"cpu": 0, "metal": 1, "cuda": 2}

    def __init__(self, type="cpu", index=0):
        """Args: ``type``, a device type or ``"type:index"`` string (or a Device to copy); ``index``,
        the device's index among those of its type. Raises DeviceError for an unknown type."""
        if isinstance(type, Device):
            type, index = type.type, type.index
        if isinstance(type, str) and ":" in type:
            type, idx = type.split(":", 1)
            if not idx.isdigit():  # int() would raise a bare ValueError on "cpu:x"
                raise DeviceError(f"[device] invalid device index {idx!r} in {type}:{idx}")
            index = int(idx)
        if type not in self._KINDS:
            raise DeviceError(f"[device] unknown device type {type!r}")
        try:  # operator.index, not int(): Device("cpu", 1.5) is an error, not device 1
            index = operator.index(index)
        except TypeError:
            raise EmberTypeError(f"[device] device index must be an int, got {index!r}") from None
        self.type, self.index, self.kind = type, index, self._KINDS[type]

    def __eq__(self, other):
        if isinstance(other, str):
            other = Device(other)
        return isinstance(other, Device) and self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __repr__(self):
        return "Device('cpu')" if self.type == "cpu" else f"Device({self.type!r}, {self.index})"

    def __str__(self):
        return self.type if self.type == "cpu" else f"{self.type}:{self.index}"


cpu = Device("cpu")


def to_device(dev) -> Device:
    """The Device for ``dev``: a Device, a device string, or None (the CPU)."""
    if dev is None:
        return cpu
    return dev if isinstance(dev, Device) else Device(dev)


def metal_is_available() -> bool:
    """Whether ``Device("metal")`` can hold tensors in this process.

    True with ``EMBER_METAL=emulate`` in the environment (ember's MSL emulator, any OS), or on a build
    with the metal-cpp backend that finds a Metal device; read at every call.

    Returns:
        True when metal:0 is available, else False.
    """
    from . import _C  # late: _C's bindings import this module

    return bool(_C._metal_available(0))
