"""DType and Device as value objects, with the numpy dtype mappings; below the tensor type and the CPU
kernel loader (dtypes.py adds the CPU device object, em.cpu, and the default device on top)."""
from __future__ import annotations

import operator

import numpy as np

from . import _C
from .errors import DeviceError, DTypeError, EmberTypeError

# numpy has no bfloat16; ml_dtypes' is the one JAX and MLX use, so a bf16 tensor is such an array.
_NP_BF16 = None


def _np_bf16() -> np.dtype:
    """``ml_dtypes.bfloat16`` as a numpy dtype, imported at first use (importing ml_dtypes takes about a
    second, most of ``import ember``)."""
    global _NP_BF16
    if _NP_BF16 is None:
        import ml_dtypes

        _NP_BF16 = np.dtype(ml_dtypes.bfloat16)
    return _NP_BF16


class DType:
    """An element type: ``em.float32 float16 bfloat16 float64 int64 int32 uint32 uint8 bool``.

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


# The codes, sizes and kinds come from the core (_C.DTYPES: (name, itemsize, is_float) by code).
_SPECS = {name: (code, size, is_float) for code, (name, size, is_float) in enumerate(_C.DTYPES)}


def _make(name):
    code, size, is_float = _SPECS[name]
    return DType(name, size, is_float, code)


float32 = _make("float32")
float16 = _make("float16")
bfloat16 = _make("bfloat16")
float64 = _make("float64")
int64 = _make("int64")
uint32 = _make("uint32")
uint8 = _make("uint8")
int32 = _make("int32")
bool = _make("bool")  # noqa: A001 -- em.bool, as torch.bool; this module calls builtins.bool by that name
ALL_DTYPES = tuple(sorted((float32, float16, bfloat16, float64, int64, uint32, uint8, int32, bool),
                          key=lambda d: d.code))
if [d.name for d in ALL_DTYPES] != [n for n, _, _ in _C.DTYPES]:
    raise ImportError(f"ember.dtypes names {[d.name for d in ALL_DTYPES]}, the core {_C.DTYPES}")
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
    np.dtype(np.int32): int32,
    np.dtype(np.bool_): bool,
}
# numpy dtypes ember has no slot for are widened (like torch's defaults): the narrower ints -> int64.
_NP_WIDEN = {
    np.dtype(np.int8): int64,
    np.dtype(np.int16): int64,
    np.dtype(np.uint16): int64,
}


def from_numpy_dtype(npdt: np.dtype) -> DType:
    """The ember DType holding numpy dtype ``npdt`` (int8, int16 and uint16 widen to int64)."""
    if npdt in _NP_TO_EMBER:
        return _NP_TO_EMBER[npdt]
    if npdt.name == "bfloat16" and npdt == _np_bf16():  # such an array means ml_dtypes is loaded already
        return bfloat16
    if npdt in _NP_WIDEN:
        return _NP_WIDEN[npdt]
    raise DTypeError(f"[tensor] numpy dtype {npdt} is not supported")


def numpy_dtype(dt: DType):
    """The numpy dtype that holds ``dt`` exactly (``ml_dtypes.bfloat16`` for bfloat16)."""
    if dt is bfloat16:
        return _np_bf16()
    return np.dtype(dt.name)


class Device:
    """A device: ``Device("cpu")`` (also ``em.cpu``), ``Device("metal", 0)`` or ``Device("metal:0")``.

    Devices compare and hash by value. Attributes: ``type`` (``"cpu"``, ``"metal"``, ``"cuda"``) and
    ``index``.
    """

    __slots__ = ("type", "index", "kind")
    _KINDS = {name: code for code, name in enumerate(_C.DEVICE_KINDS)}  # the core's DeviceKind codes

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
