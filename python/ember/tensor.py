"""Tensor and Var: the Python facade over ember._C storages and layouts. Shape logic and op
recording live here; bytes never do."""
from __future__ import annotations

import itertools
import numbers

import numpy as np

from . import _C
from . import dtypes as _dt
from .argorder import bind
from .args import bool_arg, float_arg, i64_arg, int_arg
from .backprop import no_grad, record
from .composite import CompositeOps
from .dtypes import Device, DType
from .errors import (
    DeviceError,
    DTypeError,
    EmberError,
    EmberTypeError,
    EmberValueError,
    GradientsInStore,
    IndexOutOfRange,
    OutOfMemory,
    ShapeError,
)
from .promotion import result_type
from .tensor_methods import TorchNames

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


def _dim(dim, ndim, op):
    """One dim argument, normalised; a non-int or a value past int64 raises with the op's name."""
    d = int_arg(dim, op, "dim")
    if not -2**63 <= d < 2**63:  # out of range anyway; the binding would refuse it with a bare TypeError
        raise IndexOutOfRange(f"[{op}] dim {d} out of range for a tensor with {ndim} dims")
    return _C.normalize_dim(d, ndim, op)


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


class Tensor(TorchNames, CompositeOps):
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

    def to_dtype(self, dtype) -> Tensor:
        dtype = _dt.to_dtype(dtype)
        if dtype is self._dtype:
            return self
        s, l = _C.to_dtype(self._storage, self._layout, dtype.code)
        out = _wrap(s, l, dtype, self._device)
        if self._dtype.is_float:  # casts from ints are pruned
            record(out, "to_dtype", (self,), self._dtype)
        return out

    astype = to_dtype

    def to_device(self, device) -> Tensor:
        device = _dt.to_device(device)
        if device == self._device:
            return self
        s, l = _C.to_device(self._storage, self._layout, device.kind, device.index)
        out = _wrap(s, l, self._dtype, device)
        if self._dtype.is_float:
            record(out, "to_device", (self,), self._device)
        return out

    def contiguous(self) -> Tensor:
        return self if self._layout.is_contiguous() else self.copy()

    def copy(self) -> Tensor:
        """A copy in a new storage, on every device (never aliases); differentiable."""
        s, l = _C.contiguous(self._storage, self._layout)
        return record(_wrap(s, l, self._dtype, self._device), "copy", (self,))

    clone = copy

    def detach(self) -> Tensor:
        """Shares the storage, drops the op (and variable-ness)."""
        return _wrap(self._storage, self._layout, self._dtype, self._device)

    # ----------------------------------------------------------------- views
    def _view(self, layout, name, saved=None):
        out = _wrap(self._storage, layout, self._dtype, self._device)
        return record(out, name, (self,), saved)

    def transpose(self, d0, d1):
        d0, d1 = i64_arg(d0, "transpose", "dim"), i64_arg(d1, "transpose", "dim")
        return self._view(self._layout.transpose(d0, d1), "transpose", (d0, d1))

    def t(self):
        if self.ndim < 2:
            raise ShapeError(f"[t] expected at least 2 dims, got shape {self.shape}")
        return self.transpose(-2, -1)

    @property
    def T(self):
        return self.permute(*reversed(range(self.ndim)))

    def permute(self, *dims):
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        dims = tuple(i64_arg(d, "permute", "dim") for d in dims)
        layout = self._layout.permute(list(dims))
        return self._view(layout, "permute", tuple(_C.normalize_dim(d, self.ndim, "permute") for d in dims))

    def narrow(self, dim, start, length):
        dim = _dim(dim, self.ndim, "narrow")
        start, length = i64_arg(start, "narrow", "start"), i64_arg(length, "narrow", "length")
        return self._view(self._layout.narrow(dim, start, length), "narrow", (dim, start, length))

    def squeeze(self, dim=None):
        if dim is None:
            t = self
            for d in reversed(range(self.ndim)):
                if self.shape[d] == 1:
                    t = t.squeeze(d)
            return t
        dim = _dim(dim, self.ndim, "squeeze")
        return self._view(self._layout.squeeze(dim), "reshape", self.shape)

    def unsqueeze(self, dim):
        return self._view(self._layout.unsqueeze(i64_arg(dim, "unsqueeze", "dim")), "reshape", self.shape)

    def broadcast_as(self, *shape):
        shape = _shape_arg(shape, "broadcast_as")
        return self._view(self._layout.broadcast_as(list(shape)), "broadcast_as", self.shape)

    def broadcast_left(self, *shape):
        return self.broadcast_as(_shape_arg(shape, "broadcast_as") + self.shape)

    def reshape(self, *shape):
        shape = _C.resolve_reshape(list(_shape_arg(shape, "reshape")), self.numel())
        layout = self._layout.reshape(shape)
        if layout is not None:
            return self._view(layout, "reshape", self.shape)
        s, l = _C.contiguous(self._storage, self._layout)
        out = _wrap(s, l.reshape(shape), self._dtype, self._device)
        return record(out, "reshape", (self,), self.shape)

    def view(self, *shape):
        """This tensor in a new shape, always as a view of the same storage (torch's rule).

        Args:
            *shape: the new shape (ints or one tuple); one dim may be -1.

        Returns:
            A view sharing this tensor's storage, differentiable.

        Raises:
            ShapeError: when the element counts differ, or the layout cannot be seen in that shape
                without a copy (``reshape`` copies there).
        """
        shape = _C.resolve_reshape(list(_shape_arg(shape, "view")), self.numel())
        layout = self._layout.reshape(shape)
        if layout is None:
            raise ShapeError(f"[view] a tensor of shape {self.shape} and strides {self._layout.stride} cannot be "
                             f"viewed as {tuple(shape)} without a copy; use reshape (copies when it must) or "
                             "contiguous() first")
        return self._view(layout, "reshape", self.shape)

    def flatten(self, start_dim=0, end_dim=-1):
        if self.ndim == 0:
            return self.reshape(1)
        s = _dim(start_dim, self.ndim, "flatten")
        e = _dim(end_dim, self.ndim, "flatten")
        shape = self.shape
        n = 1
        for d in shape[s : e + 1]:
            n *= d
        return self.reshape(shape[:s] + (n,) + shape[e + 1 :])

    def flatten_all(self):
        return self.reshape(-1)

    def __getitem__(self, idx):
        return getitem(self, idx)  # indexing.py

    def __setitem__(self, idx, value):
        setitem(self, idx, value)  # indexing.py

    # ----------------------------------------------------------------- elementwise
    def _unary(self, name, p0=0.0, p1=0.0, saved=None):
        shape = self.shape
        s = _C.unary(UNARY[name], self._storage, self._layout, p0, p1)
        out = _wrap(s, _contig(shape), self._dtype, self._device, None, shape)
        if name in _PRUNED:
            return out
        return record(out, name, (self,), saved)

    def exp(self): return self._unary("exp")
    def log(self): return self._unary("log")
    def sin(self): return self._unary("sin")
    def cos(self): return self._unary("cos")
    def tanh(self): return self._unary("tanh")
    def sqrt(self): return self._unary("sqrt")
    def sqr(self): return self._unary("sqr")
    def abs(self): return self._unary("abs")
    def neg(self): return self._unary("neg")
    def recip(self): return self._unary("recip")
    def relu(self): return self._unary("relu")
    def gelu(self): return self._unary("gelu")
    def silu(self): return self._unary("silu")
    def erf(self): return self._unary("erf")
    def ceil(self): return self._unary("ceil")
    def floor(self): return self._unary("floor")
    def round(self): return self._unary("round")
    def sign(self): return self._unary("sign")
    def sigmoid(self): return self._unary("sigmoid")

    def affine(self, mul, add):
        mul, add = float_arg(mul, "affine", "mul"), float_arg(add, "affine", "add")
        shape = self.shape
        s = _C.unary(UNARY["affine"], self._storage, self._layout, mul, add)
        out = _wrap(s, _contig(shape), self._dtype, self._device, None, shape)
        return out if mul == 0.0 else record(out, "affine", (self,), (mul, add))

    def powf(self, e):
        e = float_arg(e, "powf", "exponent")
        return self._unary("powf", e, 0.0, e)

    def clamp(self, lo=None, hi=None, *, min=None, max=None):  # noqa: A002  (torch's keyword names)
        if min is not None or max is not None:
            if lo is not None or hi is not None:
                raise EmberValueError("[clamp] give the bounds as lo/hi or as min=/max=, not both")
            lo, hi = min, max
        if not self._dtype.is_float and any(_is_float_scalar(b) for b in (lo, hi)):
            # a float bound promotes an integer tensor to float32, as `t + 0.5` does here and clamp does
            # in torch: u8.clamp(0.5, 2.5) is [0.5, ..., 2.5], not a silently truncated bound
            return self.to_dtype(_dt.float32).clamp(lo, hi)
        if self._dtype is _dt.int64 and any(_big_int(b) for b in (lo, hi)):
            # a double cannot hold this bound exactly: compare in int64 (hi wins when lo > hi, as below)
            out = self
            for b, f in ((lo, maximum), (hi, minimum)):
                if b is not None:  # past int64 a bound saturates: clamp(hi=2**70) changes nothing
                    b = -(2**63) if int(b) < -(2**63) else 2**63 - 1 if int(b) > 2**63 - 1 else int(b)
                    out = f(out, full((), b, dtype=_dt.int64, device=self._device))
            return out
        lo = -float("inf") if lo is None else float_arg(lo, "clamp", "lo")
        hi = float("inf") if hi is None else float_arg(hi, "clamp", "hi")
        return self._unary("clamp", lo, hi, (lo, hi))

    def _binary(self, other, name, reverse=False):
        a, b = _operands(self, other, name)
        if reverse:
            a, b = b, a
        code = BINARY[name]
        if (name == "floor_divide" or name == "remainder") and not a._dtype.is_float and a._dtype is not _dt.bool \
                and b.numel() \
                and bool(b.eq(0).any().item()):  # as torch: an integer has no value for x // 0 (nor x % 0)
            raise EmberValueError(f"[{name}] integer division by zero")
        s = _C.binary(code, a._storage, a._layout, b._storage, b._layout)
        shape = _broadcast_shape(a.shape, b.shape)
        if code in _CMP_CODES:  # bool masks (the storage says: a device may still give uint8 ones)
            return _wrap(s, _contig(shape), _dt.BY_CODE[s.dtype_code], a._device, None, shape)
        out = _wrap(s, _contig(shape), a._dtype, a._device, None, shape)
        if (a._op is None and b._op is None and not a.is_variable and not b.is_variable) or name in _PRUNED:
            return out  # nothing to record (the common inference case, checked inline for speed)
        return record(out, name, (a, b))

    def __add__(self, o): return self._binary(o, "add")
    def __radd__(self, o): return self._binary(o, "add", True)
    def __sub__(self, o): return self._binary(o, "sub")
    def __rsub__(self, o): return self._binary(o, "sub", True)
    def __mul__(self, o): return self._binary(o, "mul")
    def __rmul__(self, o): return self._binary(o, "mul", True)
    def __floordiv__(self, o): return self._binary(o, "floor_divide")
    def __rfloordiv__(self, o): return self._binary(o, "floor_divide", True)
    def __mod__(self, o): return self._binary(o, "remainder")
    def __rmod__(self, o): return self._binary(o, "remainder", True)
    def __neg__(self): return self.neg()
    def __pos__(self): return self
    def __abs__(self): return self.abs()

    def __invert__(self): return self.bitwise_not()

    def __truediv__(self, o):
        a, o = _true_div_operands(self, o)
        return a._binary(o, "div")

    def __rtruediv__(self, o):
        a, o = _true_div_operands(self, o)
        return a._binary(o, "div", True)

    def __pow__(self, e):
        if isinstance(e, numbers.Real) and not isinstance(e, bool):
            return self.powf(e)
        return self._binary(e, "pow")

    def __rpow__(self, base):
        return self._binary(base, "pow", True)

    def add(self, o): return self._binary(o, "add")
    def sub(self, o): return self._binary(o, "sub")
    def mul(self, o): return self._binary(o, "mul")
    def div(self, o): return self / o
    def floor_divide(self, o): return self // o  # rounds toward -inf (Python's //); no gradient
    def remainder(self, o): return self % o  # the divisor's sign (Python's %)
    def maximum(self, o): return self._binary(o, "maximum")
    def minimum(self, o): return self._binary(o, "minimum")
    def pow(self, o): return self ** o

    def eq(self, o): return self._binary(o, "eq")
    def ne(self, o): return self._binary(o, "ne")
    def lt(self, o): return self._binary(o, "lt")
    def le(self, o): return self._binary(o, "le")
    def gt(self, o): return self._binary(o, "gt")
    def ge(self, o): return self._binary(o, "ge")
    __eq__ = eq  # type: ignore[assignment]
    __ne__ = ne  # type: ignore[assignment]
    __lt__ = lt
    __le__ = le
    __gt__ = gt
    __ge__ = ge

    # ----------------------------------------------------------------- reductions
    def _reduce(self, name, dim, keepdim):
        dims = _dims(dim, self.ndim, name)
        keepdim = bool_arg(keepdim, name, "keepdim")
        op, dtype = REDUCE[name], self._dtype
        if name == "sum" and not self._dtype.is_float and self._dtype is not _dt.int64:
            # Integer sums are int64, as in torch: counting a uint8 mask ((pred == y).sum()) must not
            # wrap at 256. (candle keeps u8 here, and its accuracy counts wrap.) The kernel adds the
            # narrow values into int64 where they lie, without an int64 copy of the input.
            op, dtype = REDUCE["sum_i64"], _dt.int64
        lay, mult = self._layout, 1
        st = lay.stride
        if 0 in st and name != "argmax" and name != "argmin" and lay.numel() > 0:
            # A broadcast (stride-0) reduced dim repeats one value: reduce a single copy of it in place
            # (a sum then scales by the count), never the expanded view (2**31 elements of zeros(1)).
            for d in dims:
                if st[d] == 0 and lay.shape[d] > 1:
                    mult *= lay.shape[d]
                    lay = lay.narrow(d, 0, 1)
        s, l = _C.reduce(op, self._storage, lay, dims, keepdim)
        if mult != 1 and name == "sum":
            with no_grad():
                r = _wrap(s, l, dtype, self._device)
                r = r.affine(float(mult), 0.0) if dtype.is_float else r * mult  # ints: exact, wrapping as int64 does
            s, l = r._storage, r._layout
        if name in ("argmax", "argmin"):
            return _wrap(s, l, _dt.int64, self._device)
        return record(_wrap(s, l, dtype, self._device), name, (self,), (tuple(dims), keepdim))

    def sum(self, dim=None, keepdim=False): return self._reduce("sum", dim, keepdim)
    def max(self, dim=None, keepdim=False): return self._reduce("max", dim, keepdim)
    def min(self, dim=None, keepdim=False): return self._reduce("min", dim, keepdim)
    def argmax(self, dim=None, keepdim=False): return self._reduce("argmax", dim, keepdim)
    def argmin(self, dim=None, keepdim=False): return self._reduce("argmin", dim, keepdim)

    def mean(self, dim=None, keepdim=False):
        dims = _dims(dim, self.ndim, "mean")
        n = 1
        for d in dims:
            n *= self.shape[d]
        if not self._dtype.is_float:
            raise DTypeError(f"[mean] expected a float dtype, got {self._dtype.name}")
        return self.sum(dims, keepdim).affine(1.0 / n if n else float("nan"), 0.0)

    def logsumexp(self, dim=None, keepdim=False):
        dims = _dims(dim, self.ndim, "logsumexp")
        with no_grad():
            m = self.max(dims, keepdim=True)
            m = where(m.abs().lt(float("inf")), m, zeros_like(m))  # all -inf rows stay -inf, not nan
        out = (self - m).exp().sum(dims, keepdim=True).log() + m
        return out if keepdim else out.squeeze_dims(dims)

    def squeeze_dims(self, dims):
        t = self
        for d in sorted(dims, reverse=True):
            t = t.squeeze(d)
        return t

    # ----------------------------------------------------------------- linear algebra & indexing
    def matmul(self, other):
        if not isinstance(other, Tensor):
            if not isinstance(other, (np.ndarray, list)):  # numpy's matmul would take it and return an array
                raise EmberTypeError(f"[matmul] unsupported operand type {type(other).__name__}")
            other = tensor(other, dtype=self._dtype, device=self._device)
        s, l = _C.matmul(self._storage, self._layout, other._storage, other._layout)
        return record(_wrap(s, l, self._dtype, self._device), "matmul", (self, other))

    __matmul__ = matmul

    def __rmatmul__(self, other):
        if not isinstance(other, (np.ndarray, list)):
            raise EmberTypeError(f"[matmul] unsupported operand type {type(other).__name__}")
        return tensor(other, dtype=self._dtype, device=self._device).matmul(self)

    def index_select(self, *args, **kwargs):
        a = bind("index_select", args, kwargs, ("indices", "dim"), ("dim", "indices"))
        return self._index_select(a["indices"], a["dim"])

    def _index_select(self, indices, dim):
        dim = _dim(dim, self.ndim, "index_select")
        ids = _as_index(indices, "index_select", self._device)
        s, l = _C.index_select(self._storage, self._layout, ids._storage, ids._layout, dim)
        return record(_wrap(s, l, self._dtype, self._device), "index_select", (self, ids), dim)

    def gather(self, *args, **kwargs):
        a = bind("gather", args, kwargs, ("indices", "dim"), ("dim", "indices"))
        return self._gather(a["indices"], a["dim"])

    def _gather(self, indices, dim):
        dim = _dim(dim, self.ndim, "gather")
        ids = _as_index(indices, "gather", self._device)
        s, l = _C.gather(self._storage, self._layout, ids._storage, ids._layout, dim)
        return record(_wrap(s, l, self._dtype, self._device), "gather", (self, ids), dim)

    def index_add(self, *args, alpha=1, **kwargs):
        """Out of place: a copy of self with source's slices added at indices along dim.

        Takes ember's order ``index_add(indices, source, dim)`` or torch's ``index_add(dim, index,
        source, alpha=1)``, told apart by the argument types (torch's starts with the int dim).

        Args:
            *args: ``(indices, source, dim)`` or ``(dim, index, source)``.
            alpha: ``source`` is multiplied by it first (torch's argument).
            **kwargs: the same by name (``indices``/``index``, ``source``/``src``, ``dim``).

        Raises:
            EmberTypeError: arguments that fit neither order.
        """
        a = bind("index_add", args, kwargs, ("indices", "source", "dim"), ("dim", "indices", "source"))
        source = a["source"]
        if alpha != 1:
            _check_tensor_arg(source, "index_add", "source")
            source = source * alpha
        return self._index_add(a["indices"], source, a["dim"])

    def _index_add(self, indices, source, dim):
        dim = _dim(dim, self.ndim, "index_add")
        ids = _as_index(indices, "index_add", self._device)
        _check_tensor_arg(source, "index_add", "source")
        s, l = _C.index_add(self._storage, self._layout, ids._storage, ids._layout,
                            source._storage, source._layout, dim)
        return record(_wrap(s, l, self._dtype, self._device), "index_add", (self, ids, source), dim)

    def scatter_add(self, *args, **kwargs):
        """Out of place: a copy of self with source added at indices along dim (torch semantics).

        Takes ember's order ``scatter_add(indices, source, dim)`` or torch's ``scatter_add(dim, index,
        src)``, told apart by the argument types (torch's starts with the int dim).

        Args:
            *args: ``(indices, source, dim)`` or ``(dim, index, src)``.
            **kwargs: the same by name (``indices``/``index``, ``source``/``src``, ``dim``).

        Raises:
            EmberTypeError: arguments that fit neither order.
        """
        a = bind("scatter_add", args, kwargs, ("indices", "source", "dim"), ("dim", "indices", "source"))
        return self._scatter_add(a["indices"], a["source"], a["dim"])

    def _scatter_add(self, indices, source, dim):
        dim = _dim(dim, self.ndim, "scatter_add")
        ids = _as_index(indices, "scatter_add", self._device)
        _check_tensor_arg(source, "scatter_add", "source")
        s, l = _C.scatter_add(self._storage, self._layout, ids._storage, ids._layout,
                              source._storage, source._layout, dim)
        return record(_wrap(s, l, self._dtype, self._device), "scatter_add", (self, ids, source), dim)

    # ----------------------------------------------------------------- in place
    def slice_set(self, src, dim, offset):
        """Writes src into self at [offset, offset + src.shape[dim]) along dim; every view sees it."""
        dim = _dim(dim, self.ndim, "slice_set")
        if self.ndim == 0:  # normalize_dim accepted dim 0, but a scalar has no dim to slice
            raise ShapeError("[slice_set] cannot slice_set into a 0-d tensor")
        offset = i64_arg(offset, "slice_set", "offset")
        if not isinstance(src, Tensor):  # lists / arrays, like Var.set
            src = tensor(src, dtype=self._dtype, device=self._device)
        if src.ndim != self.ndim:
            raise ShapeError(f"[slice_set] src has shape {src.shape}, expected {self.ndim} dims like {self.shape}")
        if offset < 0 or offset + src.shape[dim] > self.shape[dim]:
            raise IndexOutOfRange(f"[slice_set] offset {offset} + length {src.shape[dim]} out of range for dim "
                                  f"{dim} of size {self.shape[dim]}")
        dst = self._layout.narrow(dim, offset, src.shape[dim])
        for d, st in zip(dst.shape, dst.stride):  # several elements share one address: the last write would win
            if st == 0 and d > 1:
                raise EmberValueError(f"[slice_set] cannot write into a broadcast (stride 0) view {self._layout!r}")
        s_st, s_l = src._storage, src._layout
        if s_st.same_buffer(self._storage):  # snapshot an aliasing source so the write reads old values
            s_st, s_l = _C.contiguous(s_st, s_l)
        _C.copy_into(s_st, s_l, self._storage, dst, "slice_set")

    def zero_set(self):
        _C.fill(self._storage, self._layout, 0.0)

    def fill_(self, value):
        _C.fill(self._storage, self._layout, float_arg(value, "fill_", "value"))
        return self

    # ----------------------------------------------------------------- autograd
    def backward(self, create_graph=False):
        from .backprop import backward

        return backward(self, create_graph=create_graph)

    # custom ops are attached by custom_op.py (apply_op1/2/3, inplace_op1/2/3)


class Var(Tensor):
    """A leaf that tracks gradients. ``Var(t)`` copies ``t``'s data."""

    __slots__ = ()
    is_variable = True

    def __new__(cls, data, dtype=None, device=None, requires_grad=True):
        if not requires_grad:  # torch's flag, spelled out: a Var always tracks gradients
            raise GradientsInStore("[Var] a Var always tracks gradients; for a constant use em.tensor(data) (or "
                                   "t.detach())")
        src = data if isinstance(data, Tensor) else tensor(data, dtype=dtype, device=device)
        if isinstance(data, Tensor):
            if dtype is not None:
                src = src.to_dtype(dtype)
            if device is not None:
                src = src.to_device(device)
        s, l = _C.contiguous(src._storage, src._layout)
        return _wrap(s, l, src._dtype, src._device, cls)

    def __init__(self, *args, **kwargs):
        pass

    def set(self, t):
        """Writes t's values into this variable's storage (shape/dtype/device checked)."""
        if not isinstance(t, Tensor):
            t = tensor(t, dtype=self._dtype, device=self._device)
        if t.shape != self.shape:
            raise ShapeError(f"[set] shape mismatch: variable {self.shape}, value {t.shape}")
        if t._dtype is not self._dtype:
            raise DTypeError(f"[set] dtype mismatch: variable {self._dtype.name}, value {t._dtype.name}")
        if t._device != self._device:
            raise DeviceError(f"[set] device mismatch: variable {self._device}, value {t._device}")
        s_st, s_l = t._storage, t._layout
        if s_st.same_buffer(self._storage):
            s_st, s_l = _C.contiguous(s_st, s_l)
        _C.copy_into(s_st, s_l, self._storage, self._layout, "set")

    def as_tensor(self):
        return self

    def as_detached_tensor(self):
        return self.detach()

    def requires_grad_(self, requires_grad=True):
        """Freezes (False) or unfreezes (True) this parameter in place, as torch's flag: a frozen Var
        is no longer a variable (no gradient is computed for it, optimizers skip it) but stays this
        object with this storage; True makes it a variable again. Returns self.

        Args:
            requires_grad: True (a variable) or False (a constant).

        Raises:
            DTypeError: True for a non-float tensor.
        """
        if requires_grad and not self._dtype.is_float:
            raise DTypeError(f"[requires_grad_] only float tensors take gradients, got {self._dtype.name}")
        self.__class__ = Var if requires_grad else FrozenVar
        return self


class FrozenVar(Var):
    """A Var whose gradient is switched off (``requires_grad_(False)``): a module still lists it as a
    parameter, but ops treat it as a constant."""

    __slots__ = ()
    is_variable = False


# --------------------------------------------------------------------- helpers
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


def _true_div_operands(a, o):
    """True division computes in the promoted dtype, a float one (int / int gives float32, as torch)."""
    if isinstance(o, (np.ndarray, list)):
        o = tensor(o, device=a._device)
    if isinstance(o, Tensor):
        dt = result_type(a, o)
    elif isinstance(o, numbers.Real) and not a._dtype.is_float:
        dt = _dt.float32
    else:
        return a, o
    if not dt.is_float:
        dt = _dt.float32
    return a.to_dtype(dt), (o.to_dtype(dt) if isinstance(o, Tensor) else o)


def _full_storage(device, dtype, n, value):
    """n copies of value; integers beyond 2**53 skip the double the C++ fill takes, so no bit is lost."""
    if not dtype.is_float and isinstance(value, numbers.Integral) and abs(int(value)) > 2**53:
        arr = np.full(n, int(value) & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64).view(np.int64)  # wraps like a C cast
        return tensor(arr).to_dtype(dtype).to_device(device)._storage
    return _C.full(device.kind, device.index, dtype.code, n, float(value))


def _scalar(value, dtype, device):
    return _wrap(_full_storage(device, dtype, 1, value), _SCALAR_LAYOUT, dtype, device)


_SCALAR_LAYOUT = _C.Layout([], [], 0)  # only _scalar uses it: grad_rules.wanted() spots constants by it


def _operands(a, b, op):
    """a (a tensor) and b (a tensor, Python or numpy scalar, numpy array or list) as two tensors of
    the promoted dtype (torch.result_type's rule, promotion.py); casts are recorded, so gradients
    come back in each input's own dtype."""
    if isinstance(b, Tensor):
        if b._dtype is a._dtype:
            return a, b
        dt = result_type(a, b)
        return a.to_dtype(dt), b.to_dtype(dt)
    if isinstance(b, (bool, np.bool_, numbers.Integral)):
        if a._dtype.is_float:
            float_arg(b, op, "scalar")  # past a double's range: EmberValueError, not a bare OverflowError
        elif a._dtype is _dt.bool and not isinstance(b, (bool, np.bool_)):
            a = a.to_dtype(_dt.int64)  # a Python int is stronger than bool (torch: bool + 1 is int64)
        return a, _scalar(int(b), a._dtype, a._device)
    if isinstance(b, numbers.Real):
        if not a._dtype.is_float:
            a = a.to_dtype(_dt.float32)  # a Python float with an int tensor: float32, never truncated
        return a, _scalar(float(b), a._dtype, a._device)
    if isinstance(b, (np.ndarray, list)):  # a numpy array counts as a tensor of its dtype
        try:
            bt = tensor(b, device=a._device)
        except EmberError as e:
            raise type(e)(str(e).replace("[tensor]", f"[{op}]", 1)) from None
        return _operands(a, bt, op)
    mod = type(b).__module__ or ""
    if mod.split(".")[0] == "torch":
        raise EmberTypeError(f"[{op}] got a torch tensor; convert it first with em.from_dlpack(t) (zero-copy on "
                         "CPU) or em.tensor(t.numpy())")
    raise EmberTypeError(f"[{op}] unsupported operand type {type(b).__name__}")


def _index_add_zeros(shape, ids, src, dim):
    """zeros(shape).index_add(ids, src, dim) without copying the zeros; not recorded (backward rules)."""
    s, l = _C.index_add_zeros(list(shape), ids._storage, ids._layout, src._storage, src._layout, dim)
    return _wrap(s, l, src._dtype, src._device)


def _scatter_add_zeros(shape, ids, src, dim):
    """zeros(shape).scatter_add(ids, src, dim) without copying the zeros; not recorded."""
    s, l = _C.scatter_add_zeros(list(shape), ids._storage, ids._layout, src._storage, src._layout, dim)
    return _wrap(s, l, src._dtype, src._device)


def _index_np(ids, op):
    """An index list or array as int64 numpy values; an empty one is int64, floats are refused."""
    arr = np.asarray(ids)
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":  # never truncate float indices, never read a bool mask as 0/1
        raise DTypeError(f"[{op}] indices must be integers, got {arr.dtype}")
    return arr.astype(np.int64)


def _as_index(ids, op, device=None):
    """``ids`` as an integer index tensor; a list or array goes to ``device`` (the tensor it indexes)."""
    if not isinstance(ids, Tensor):
        ids = tensor(_index_np(ids, op), device=device)
    if ids._dtype.is_float:
        raise DTypeError(f"[{op}] indices must be an integer tensor, got {ids._dtype.name}")
    return ids


# Creation functions live in creation.py and are re-exported here (the rest of the package imports
# them from this module); imported last because creation.py builds Tensors, and tensor.py itself calls
# tensor() and zeros_like() at run time.
from .creation import (  # noqa: E402, F401, I001
    _check_fits, arange, from_numpy, full, full_like, manual_seed, ones, ones_like, rand, randn, tensor, zeros,
    zeros_like,
)
from .multi import cat, maximum, minimum, stack, where  # noqa: E402, F401, I001
from .indexing import getitem, setitem  # noqa: E402, I001  (indexing.py builds on everything above)
