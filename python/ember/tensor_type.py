"""The tensor data type: Tensor (a storage seen through a layout, plus the op that made it), its
attributes and numpy conversion, and the helpers every op module builds on (_wrap, _contig, dims,
op-code tables). No ops here: they live in the function modules and tensor_methods.py binds them."""
from __future__ import annotations

import itertools
import numbers

import numpy as np

from . import _C
from . import dtype_core as _dt
from .args import dim_arg, int_arg
from .dtype_core import Device, DType
from .errors import (
    DTypeError,
    EmberError,
    EmberTypeError,
    EmberValueError,
    IndexOutOfRange,
    OutOfMemory,
    ShapeError,
)

_ids = itertools.count(1)

# Op codes by name, from the core's enums (_C lists the names in enum order).
UNARY = {n: i for i, n in enumerate(_C.UNARY_OPS)}
BINARY = {n: i for i, n in enumerate(_C.BINARY_OPS)}
REDUCE = {n: i for i, n in enumerate(_C.REDUCE_OPS)}
_CMP_CODES = frozenset(BINARY[n] for n in ("eq", "ne", "lt", "le", "gt", "ge"))
_PRUNED = frozenset(("ceil", "floor", "round", "sign", "trunc", "floor_divide",  # zero gradient: never recorded
                     "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"))


def _wrap(storage, layout, dtype, device, cls=None, shape=None):
    t = object.__new__(cls or Tensor)
    t._storage = storage
    t._layout = layout
    t._dtype = dtype
    t._device = device
    t._op = None
    t._id = next(_ids)
    t._shape = shape
    return t


_CONTIG = {}


def _big_int(b):
    """An integer bound past 2**53, where a double would round it."""
    return isinstance(b, numbers.Integral) and not isinstance(b, bool) and abs(int(b)) > 2**53


def _is_float_scalar(b):
    """A real, non-integral-typed scalar (Python or numpy float): the kind that promotes int tensors."""
    return isinstance(b, numbers.Real) and not isinstance(b, numbers.Integral)


def _contig(shape):
    """The contiguous Layout of a shape; layouts are immutable, so one object per shape is shared."""
    l = _CONTIG.get(shape)
    if l is None:
        if len(_CONTIG) > 4096:
            _CONTIG.clear()
        l = _CONTIG[shape] = _C.Layout.contiguous(list(shape))
    return l


def _broadcast_shape(sa, sb):
    if sa == sb:
        return sa
    n = max(len(sa), len(sb))
    sa, sb = (1,) * (n - len(sa)) + sa, (1,) * (n - len(sb)) + sb
    return tuple(b if a == 1 else a for a, b in zip(sa, sb))


_dim = dim_arg


def _dims(dim, ndim, op):
    """dim (int, tuple/list of ints, None) -> sorted list of normalised dims."""
    if dim is None:
        return list(range(ndim))
    if not isinstance(dim, (tuple, list, range)):
        dim = (dim,)  # an int, numpy int or 0-d int tensor; anything else fails in _dim
    norm = [_dim(d, ndim, op) for d in dim]
    out = sorted(set(norm))
    if len(out) != len(norm):  # torch refuses (0, 0) and (1, -1) too: the caller likely meant other dims
        raise EmberValueError(f"[{op}] dim {tuple(dim)} names the same dim twice")
    return out if ndim else []


class Tensor:
    """An n-dimensional array on a device: a storage seen through a layout, plus the op that made it."""

    __slots__ = ("__weakref__", "_device", "_dtype", "_id", "_layout", "_op", "_shape", "_storage")
    is_variable = False
    __array_priority__ = 1000  # numpy defers to our operators

    # ----------------------------------------------------------------- attributes
    @property
    def shape(self):
        s = self._shape
        if s is None:
            s = self._shape = self._layout.shape
        return s

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def dtype(self) -> DType:
        return self._dtype

    @property
    def device(self) -> Device:
        return self._device

    @property
    def layout(self):
        return self._layout

    @property
    def id(self) -> int:
        return self._id

    @property
    def op(self):
        return self._op

    @property
    def storage(self):
        return self._storage

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def dims(self):
        return self.shape

    def size(self, dim=None):
        if dim is None:
            return self.shape
        d = _dim(dim, self.ndim, "size")
        if not self.shape:  # normalize_dim lets dim 0/-1 through for a scalar, which has no size to give
            raise IndexOutOfRange(f"[size] dim {dim} out of range for a 0-d tensor")
        return self.shape[d]

    def __len__(self):
        if not self.shape:
            raise EmberTypeError("[len] len() of a 0-d tensor")
        return self.shape[0]

    def __hash__(self):
        return id(self)

    def __bool__(self):
        if self.numel() != 1:
            raise EmberValueError("[bool] the truth value of a tensor with more than one element is ambiguous")
        return bool(self.item())

    def __repr__(self):
        try:
            body = np.array2string(self._np_values(), separator=", ", threshold=200, edgeitems=3, prefix="Tensor(")
        except EmberError as e:  # off the CPU a huge view fails in the host copy's allocation instead
            if self._device.type == "cpu" or not isinstance(e, (OutOfMemory, EmberValueError)):
                raise
            body = "[...]"
        except ValueError:  # a broadcast view bigger than numpy can describe: shape and dtype still print
            body = "[...]"
        extra = "" if self._device.type == "cpu" else f", device={self._device}"
        grad = ", var" if self.is_variable else (f", op={self._op.name}" if self._op is not None else "")
        return f"Tensor({body}, shape={self.shape}, dtype={self._dtype.name}{extra}{grad})"

    # ----------------------------------------------------------------- conversions
    def _np_values(self):
        """A numpy view of the values for reading (not a copy; callers copy)."""
        t = self if self._device.type == "cpu" else self.to_device("cpu")
        arr = t._storage.as_numpy(t._layout)
        if self._dtype is _dt.bfloat16 and _dt.numpy_dtype(_dt.bfloat16) is None:
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        return arr

    def numpy(self) -> np.ndarray:
        """A new numpy array with the values (never aliases the tensor)."""
        try:
            return np.array(self._np_values(), copy=True)
        except EmberError as e:
            # off the CPU the host copy's allocation is what fails for a huge view: the CPU's refusal too
            if self._device.type == "cpu" or not isinstance(e, (OutOfMemory, EmberValueError)):
                raise
            err = e
        except (MemoryError, ValueError) as e:  # a broadcast view can describe far more than memory holds
            err = e
        nbytes = self.numel() * self._dtype.itemsize
        raise OutOfMemory(f"[numpy] cannot copy shape {self.shape} ({nbytes} bytes) into an array: {err}") from None

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def tolist(self):
        return self.numpy().tolist()

    def item(self):
        if self.numel() != 1:
            raise ShapeError(f"[item] expected a tensor with one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self._dtype.is_float:
            raise DTypeError(f"[index] only integer tensors can be used as an index, got {self._dtype.name}")
        return int(self.item())


_SCALAR_LAYOUT = _C.Layout([], [], 0)  # the 0-d constants made from Python scalars: backprop.wanted() spots them by it


def _shape_arg(shape, op):
    """A shape given as ints or one tuple/list of ints; a float dim is an error (never truncated), and
    a dim past int64 raises ShapeError here rather than a bare TypeError in the binding."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    out = tuple(int_arg(d, op, "shape") for d in shape)
    for d in out:
        if not -2**63 <= d < 2**63:
            raise ShapeError(f"[{op}] dimension {d} out of range in shape {out}")
    return out


def _check_tensor_arg(x, op, what):
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor {what}, got {type(x).__name__}")


def _index_np(ids, op):
    """An index list or array as int64 numpy values; an empty one is int64, floats are refused."""
    arr = np.asarray(ids)
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":  # never truncate float indices, never read a bool mask as 0/1
        raise DTypeError(f"[{op}] indices must be integers, got {arr.dtype}")
    return arr.astype(np.int64)


def _from_array(arr, dtype, cpu):
    """A new tensor on ``cpu`` (the CPU device) holding a copy of the native-order numpy array ``arr``,
    whose values are ``dtype``."""
    npt = _dt.numpy_dtype(dtype)
    if npt is not None and arr.dtype != npt:
        arr = arr.astype(npt)
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")  # not np.ascontiguousarray: it turns a 0-d array into shape (1,)
    s = _C.CpuStorage._from_numpy_code(arr.reshape(-1), dtype.code)
    return _wrap(s, _C.Layout.contiguous(list(arr.shape)), dtype, cpu)
