"""The Tensor methods a PyTorch user types first (to, float, stride, dim, mT, expand, bitwise and
logical ops, sort/scatter/cumsum by torch's signatures), pickling and deep copies, and the torch
gradient names that end in an error saying where ember keeps gradients."""
from __future__ import annotations

import copyreg

import numpy as np

from . import _C
from . import dtypes as _dt
from . import movement as _movement
from . import scatter as _scatter
from . import softmax as _softmax
from . import sorting as _sorting
from .args import bool_arg, int_arg
from .backprop import tracks
from .creation import tensor
from .errors import EmberValueError, GradientsInStore, IndexOutOfRange, ShapeError
from .tensor_type import UNARY, Tensor, _contig, _shape_arg, _wrap
from .variable import Var

_WHERE = ("ember keeps no gradients on tensors: backward() returns them in a GradStore, "
          "g = loss.backward(); g[v] (or g.get(v)), then opt.step(g), or opt.backward_step(loss) for both")


def _rebuild(arr, dtype_name, device, variable):
    """Unpickles a tensor: the values, then the device and variable-ness it had."""
    t = tensor(arr, dtype=dtype_name, device=device)
    if variable == "frozen":  # a parameter switched off with requires_grad_(False)
        return Var(t).requires_grad_(False)
    return Var(t) if variable else t


def _rebuild_layout(shape, stride, start_offset):
    return _C.Layout(list(shape), list(stride), start_offset)


def _reduce_layout(l):
    return _rebuild_layout, (tuple(l.shape), tuple(l.stride), l.start_offset)


copyreg.pickle(_C.Layout, _reduce_layout)  # a Layout is plain data: shape, strides, offset


def _cast_method(name, dtype, extra):
    def method(self):
        return self.to_dtype(dtype)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"This tensor as {dtype.name}{extra}, as ``torch.Tensor.{name}``.\n\n"
                      "Returns:\n    self when it already is, else a new tensor (differentiable from a float).\n")
    return method


def to(self, *args, dtype=None, device=None, copy=False):
    """Converts to a dtype and/or a device, as ``torch.Tensor.to``.

    Args:
        *args: at most two of: a dtype (``em.float16``, ``"float16"``, a numpy dtype), a device
            (``em.cpu``, ``"cpu"``) or a tensor (its dtype and device).
        dtype: the target dtype (keyword form).
        device: the target device (keyword form).
        copy: when True, always return a new storage, even if nothing changes.

    Returns:
        self when nothing changes and ``copy`` is False, else a new tensor (differentiable).

    Raises:
        EmberValueError: for more than one dtype or device, or an argument that is neither.
        DeviceError: for a device this build lacks.
    """
    for a in args:
        if hasattr(a, "_dtype") and hasattr(a, "_device"):
            dts, dvs = [a._dtype], [a._device]
        elif isinstance(a, _dt.Device) or (isinstance(a, str) and a.split(":")[0] in _dt.Device._KINDS):
            dts, dvs = [], [a]
        else:
            try:
                dts, dvs = [_dt.to_dtype(a)], []
            except Exception:
                raise EmberValueError(f"[to] expected a dtype, a device or a tensor, got {a!r}") from None
        for v in dts:
            if dtype is not None:
                raise EmberValueError("[to] got the dtype twice")
            dtype = v
        for v in dvs:
            if device is not None:
                raise EmberValueError("[to] got the device twice")
            device = v
    out = self
    if device is not None and dtype is not None:
        dev = _dt.to_device(device)
        if not _C.device_supports(dev.kind, dev.index, self._dtype.code):
            out = out.to_dtype(dtype)  # cast where the data is: the target device cannot hold its dtype
    if device is not None:
        out = out.to_device(device)
    if dtype is not None:
        out = out.to_dtype(dtype)
    return out.copy() if copy and out is self else out

_float = _cast_method("float", _dt.float32, "")

half = _cast_method("half", _dt.float16, "")

bfloat16 = _cast_method("bfloat16", _dt.bfloat16, "")

double = _cast_method("double", _dt.float64, "")

long = _cast_method("long", _dt.int64, " (floats truncate toward zero, as in torch)")

byte = _cast_method("byte", _dt.uint8, "")

_int = _cast_method("int", _dt.int32, " (floats truncate toward zero, as in torch)")

_bool = _cast_method("bool", _dt.bool, " (nonzero, NaN included, is True, as in torch)")

def bitwise_and(self, o):
    """Elementwise ``self & o``: bitwise on integer dtypes, logical on bool, as ``torch.bitwise_and``.

    Args:
        o: a Tensor, a Python int or bool, or a numpy array; broadcast against ``self`` and promoted
            with it (``em.result_type``: bool & int32 is int32).

    Returns:
        Tensor: the broadcast result, in the promoted dtype. Not differentiable.

    Raises:
        DTypeError: for a float operand ("[bitwise_and] not supported for float32").
        ShapeError: the shapes do not broadcast.
    """
    return self._binary(o, "bitwise_and")

def bitwise_or(self, o):
    """Elementwise ``self | o``: bitwise on integer dtypes, logical on bool, as ``torch.bitwise_or``.

    Args:
        o: a Tensor, a Python int or bool, or a numpy array; broadcast and promoted with ``self``.

    Returns:
        Tensor: the broadcast result, in the promoted dtype. Not differentiable.

    Raises:
        DTypeError: for a float operand.
        ShapeError: the shapes do not broadcast.
    """
    return self._binary(o, "bitwise_or")

def bitwise_xor(self, o):
    """Elementwise ``self ^ o``: bitwise on integer dtypes, logical on bool, as ``torch.bitwise_xor``.

    Args:
        o: a Tensor, a Python int or bool, or a numpy array; broadcast and promoted with ``self``.

    Returns:
        Tensor: the broadcast result, in the promoted dtype. Not differentiable.

    Raises:
        DTypeError: for a float operand.
        ShapeError: the shapes do not broadcast.
    """
    return self._binary(o, "bitwise_xor")

def bitwise_not(self):
    """Elementwise ``~self``: bitwise on integer dtypes (``~1`` is -2, uint8 ``~1`` is 254), logical on
    bool, as ``torch.bitwise_not``.

    Returns:
        Tensor: a new tensor of the same shape and dtype. Not differentiable.

    Raises:
        DTypeError: for a float tensor ("[bitwise_not] not supported for float32").
    """
    s = _C.unary(UNARY["bitwise_not"], self._storage, self._layout, 0.0, 0.0)
    shape = self.shape
    return _wrap(s, _contig(shape), self._dtype, self._device, None, shape)

def __and__(self, o): return self._binary(o, "bitwise_and")
def __rand__(self, o): return self._binary(o, "bitwise_and", True)
def __or__(self, o): return self._binary(o, "bitwise_or")
def __ror__(self, o): return self._binary(o, "bitwise_or", True)
def __xor__(self, o): return self._binary(o, "bitwise_xor")
def __rxor__(self, o): return self._binary(o, "bitwise_xor", True)

def _truth(self, o=None):
    """``self`` (or ``o``, a tensor, array or scalar) as a bool mask: nonzero is True, as torch's
    logical ops read their operands."""
    x = self if o is None else o
    if not isinstance(x, Tensor):
        x = tensor(x, device=self._device) if not isinstance(x, (int, float, complex)) else x
    if isinstance(x, Tensor):
        return x if x._dtype is _dt.bool else x.ne(0)
    return x != 0  # a Python scalar: its truth as a Python bool

def logical_and(self, o):
    """Elementwise ``self and o`` of the operands' truth (nonzero is True), as ``torch.logical_and``.

    Args:
        o: a Tensor, a Python scalar or a numpy array of any dtype; broadcast against ``self``.

    Returns:
        Tensor: bool, the broadcast shape. Not differentiable.

    Raises:
        ShapeError: the shapes do not broadcast.
    """
    return self._truth().bitwise_and(self._truth(o))

def logical_or(self, o):
    """Elementwise ``self or o`` of the operands' truth (nonzero is True), as ``torch.logical_or``.

    Args:
        o: a Tensor, a Python scalar or a numpy array of any dtype; broadcast against ``self``.

    Returns:
        Tensor: bool, the broadcast shape. Not differentiable.

    Raises:
        ShapeError: the shapes do not broadcast.
    """
    return self._truth().bitwise_or(self._truth(o))

def logical_xor(self, o):
    """Elementwise ``bool(self) != bool(o)`` (nonzero is True), as ``torch.logical_xor``.

    Args:
        o: a Tensor, a Python scalar or a numpy array of any dtype; broadcast against ``self``.

    Returns:
        Tensor: bool, the broadcast shape. Not differentiable.

    Raises:
        ShapeError: the shapes do not broadcast.
    """
    return self._truth().bitwise_xor(self._truth(o))

def nonzero(self, as_tuple=False):
    """The positions of the nonzero (True) elements in row-major order, as ``torch.nonzero``.

    The positions are found on the host (numpy's ``nonzero`` over a copy of the values), since
    their count decides the result's shape; the result goes back to ``self``'s device.

    Args:
        as_tuple: False (default) for one (n, ndim) tensor; True for a tuple of ndim 1-D tensors,
            one per dim (a 0-d tensor gives one tensor of 0 or 1 zeros, as torch).

    Returns:
        Tensor or tuple of Tensors: int64 positions (always int64, as torch's).
    """
    as_tuple = bool_arg(as_tuple, "nonzero", "as_tuple")
    a = self.numpy()
    idx = np.nonzero(a.reshape(1) if a.ndim == 0 else a)
    if as_tuple:
        return tuple(tensor(np.ascontiguousarray(i, dtype=np.int64), device=self._device) for i in idx)
    pos = np.stack(idx, axis=1) if a.ndim else np.zeros((len(idx[0]), 0), dtype=np.int64)
    return tensor(np.ascontiguousarray(pos, dtype=np.int64), device=self._device)

def logical_not(self):
    """Elementwise ``not self`` (zero is True), as ``torch.logical_not``; any dtype.

    Returns:
        Tensor: bool, the same shape. Not differentiable.
    """
    return self.bitwise_not() if self._dtype is _dt.bool else self.eq(0)

def is_contiguous(self) -> bool:
    """Whether the elements lie in row-major order with no gaps, as ``torch.Tensor.is_contiguous``.

    Returns:
        A bool.
    """
    return self._layout.is_contiguous()

def stride(self, dim=None):
    """The strides in elements (0 for a broadcast dim), as ``torch.Tensor.stride``.

    Args:
        dim: one dim (negative counts from the end), or None for all of them.

    Returns:
        A tuple of ints, or one int for ``dim``.

    Raises:
        IndexOutOfRange: for a dim out of range.
    """
    st = tuple(self._layout.stride)
    if dim is None:
        return st
    d = int_arg(dim, "stride", "dim")
    if not -len(st) <= d < len(st):
        raise IndexOutOfRange(f"[stride] dim {d} out of range for a tensor with {len(st)} dims")
    return st[d]

def dim(self) -> int:
    """The number of dims (``ndim``), as ``torch.Tensor.dim``.

    Returns:
        An int.
    """
    return len(self.shape)

def element_size(self) -> int:
    """Bytes per element, as ``torch.Tensor.element_size``.

    Returns:
        An int.
    """
    return self._dtype.itemsize

@property
def mT(self):  # noqa: N802  (torch's name)
    """The last two dims swapped (a view sharing storage), as ``torch.Tensor.mT``.

    Raises:
        ShapeError: below 2 dims.
    """
    if len(self.shape) < 2:
        raise ShapeError(f"[mT] expected at least 2 dims, got shape {self.shape}")
    return self.transpose(-2, -1)

def expand(self, *sizes):
    """A broadcast (stride-0) view, as ``torch.Tensor.expand``: -1 keeps a dim's size.

    Args:
        *sizes: the new shape (ints or one tuple); new dims go in front, -1 only for existing dims.

    Returns:
        A view sharing this tensor's storage.

    Raises:
        ShapeError: when a dim of size other than 1 would change, or -1 names a new dim.
    """
    shape = _shape_arg(sizes, "expand")
    lead = len(shape) - len(self.shape)
    if lead < 0:
        raise ShapeError(f"[expand] cannot expand shape {self.shape} to fewer dims {shape}")
    out = []
    for i, n in enumerate(shape):
        if n == -1:
            if i < lead:
                raise ShapeError(f"[expand] -1 is not allowed for the new leading dim {i} in {shape}")
            n = self.shape[i - lead]
        out.append(n)
    return self.broadcast_as(tuple(out))

def square(self):
    """x * x elementwise, as ``torch.Tensor.square`` (ember's ``sqr``).

    Returns:
        A new tensor, differentiable.
    """
    return self.sqr()

def reciprocal(self):
    """1 / x elementwise, as ``torch.Tensor.reciprocal`` (ember's ``recip``).

    Returns:
        A new tensor, differentiable.

    Raises:
        DTypeError: for an integer tensor.
    """
    return self.recip()

def softmax(self, dim=-1):
    """Softmax over one dim (one fused kernel), as ``torch.Tensor.softmax``.

    Args:
        dim: the dim to normalise over.

    Returns:
        A new tensor, differentiable.

    Raises:
        DTypeError: for a non-float tensor.
        IndexOutOfRange: for a dim out of range.
    """
    return _softmax.softmax(self, dim)

def log_softmax(self, dim=-1):
    """log(softmax) over one dim, computed stably, as ``torch.Tensor.log_softmax``.

    Args:
        dim: the dim to normalise over.

    Returns:
        A new tensor, differentiable.

    Raises:
        DTypeError: for a non-float tensor.
        IndexOutOfRange: for a dim out of range.
    """
    return _softmax.log_softmax(self, dim)

def __reduce__(self):
    # values, dtype, device and variable-ness travel; the graph (op) does not, as a detached copy
    kind = self.is_variable or ("frozen" if isinstance(self, Var) else False)
    return (_rebuild, (self.numpy(), self._dtype.name, str(self._device), kind))

def __deepcopy__(self, memo):
    s, l = _C.contiguous(self._storage, self._layout)
    out = _wrap(s, l, self._dtype, self._device, type(self) if isinstance(self, Var) else None)
    memo[id(self)] = out
    return out

@property
def grad(self):
    """torch's gradient attribute; ember returns gradients from ``backward()`` instead.

    Raises:
        GradientsInStore: always, saying where the gradients are (``g = loss.backward(); g[v]``).
    """
    raise GradientsInStore(f"[grad] {_WHERE}")

@property
def requires_grad(self):
    """Whether gradients flow into this tensor (a float Var, or a recorded op's result).

    Returns:
        A bool.

    Raises:
        GradientsInStore: on assignment; wrap the tensor in ``em.Var`` instead.
    """
    return tracks(self)

@requires_grad.setter
def requires_grad(self, value):
    raise GradientsInStore("[requires_grad] ember marks what to differentiate by type: v = em.Var(t) (a leaf "
                           f"that tracks gradients; em.Var(data) for new data); {_WHERE}")

def requires_grad_(self, requires_grad=True):
    """torch's in-place flag; ember marks what to differentiate by type.

    Args:
        requires_grad: ignored.

    Raises:
        GradientsInStore: always; use ``em.Var(t)``.
    """
    raise GradientsInStore("[requires_grad_] ember marks what to differentiate by type: v = em.Var(t); "
                           f"{_WHERE}")

def retain_grad(self):
    """torch's flag to keep an intermediate's gradient; ember's backward returns a new GradStore.

    Raises:
        GradientsInStore: always.
    """
    raise GradientsInStore(f"[retain_grad] {_WHERE}")

def sort(self, dim=-1, descending=False, stable=False):
    """This tensor sorted along ``dim``: ``em.sort(self, dim, descending, stable)``.

    Args:
        dim: the dim to sort along.
        descending: largest first when True.
        stable: accepted for torch's signature (equal values always keep index order).

    Returns:
        ``(values, indices)`` (see ``ember.sorting.sort``).

    Raises:
        EmberTypeError: a flag is not a bool.
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _sorting.sort(self, dim, descending, stable)

def argsort(self, dim=-1, descending=False, stable=False):
    """The int64 indices that sort this tensor along ``dim``: ``em.argsort(self, ...)``.

    Args:
        dim: the dim to sort along.
        descending: largest first when True.
        stable: accepted for torch's signature.

    Returns:
        An int64 tensor of this tensor's shape.

    Raises:
        EmberTypeError: a flag is not a bool.
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _sorting.argsort(self, dim, descending, stable)

def topk(self, k, dim=-1, largest=True, sorted=True):
    """The ``k`` largest (or smallest) values along ``dim`` and their indices: ``em.topk(self, ...)``.

    Args:
        k: how many values to keep.
        dim: the dim to select along.
        largest: the largest values when True.
        sorted: accepted for torch's signature (the values are always sorted).

    Returns:
        ``(values, indices)`` (see ``ember.sorting.topk``).

    Raises:
        EmberValueError: ``k`` is out of range.
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _sorting.topk(self, k, dim, largest, sorted)

def roll(self, shifts, dims=None):
    """This tensor rolled along dims: ``em.roll(self, shifts, dims)``.

    Args:
        shifts: an int or a sequence of ints.
        dims: an int or a sequence as long as shifts; None rolls the flattened tensor.

    Returns:
        A new tensor of this shape (see ``ember.movement.roll``).

    Raises:
        EmberValueError: shifts and dims differ in length.
        IndexOutOfRange: a dim is out of range.
    """
    return _movement.roll(self, shifts, dims)

def scatter(self, dim, index, src=None, value=None):
    """A copy of this tensor with ``src`` written in at ``index`` along ``dim``: ``em.scatter``.

    Args:
        dim: the dim the index runs along.
        index: an integer tensor with this tensor's number of dims.
        src: a tensor of this dtype (at least the index's size) or a number.
        value: a number, instead of ``src``.

    Returns:
        A new tensor of this shape (see ``ember.scatter.scatter``).

    Raises:
        EmberValueError: both or neither of ``src`` and ``value`` are given.
        ShapeError: the index, src and this tensor do not fit.
        IndexOutOfRange: ``dim`` or an index entry is out of range.
    """
    return _scatter.scatter(self, dim, index, src, value)

def scatter_reduce(self, dim, index, src, reduce, include_self=True):
    """A copy of this tensor with ``src`` combined in at ``index`` by ``reduce``: ``em.scatter_reduce``.

    Args:
        dim: the dim the index runs along.
        index: an integer tensor with this tensor's number of dims.
        src: a tensor of this dtype, at least the index's size.
        reduce: ``"sum"``, ``"prod"``, ``"mean"``, ``"amax"`` or ``"amin"``.
        include_self: whether this tensor's values at indexed positions take part.

    Returns:
        A new tensor of this shape (see ``ember.scatter.scatter_reduce``).

    Raises:
        EmberValueError: ``reduce`` is unknown.
        ShapeError: the index, src and this tensor do not fit.
        IndexOutOfRange: ``dim`` or an index entry is out of range.
    """
    return _scatter.scatter_reduce(self, dim, index, src, reduce, include_self)

def cumsum(self, dim, exclusive=False, reverse=False):
    """Running sums along ``dim``: ``em.cumsum(self, dim, exclusive, reverse)``.

    Args:
        dim: the dim to scan along.
        exclusive: leave each output's own element out.
        reverse: scan from the end.

    Returns:
        A tensor of this shape (int64 for integer inputs).

    Raises:
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _sorting.cumsum(self, dim, exclusive, reverse)

def cumprod(self, dim, exclusive=False, reverse=False):
    """Running products along ``dim``: ``em.cumprod(self, dim, exclusive, reverse)``.

    Args:
        dim: the dim to scan along.
        exclusive: leave each output's own element out.
        reverse: scan from the end.

    Returns:
        A tensor of this shape (int64 for integer inputs).

    Raises:
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _sorting.cumprod(self, dim, exclusive, reverse)

def cummax(self, dim, reverse=False):
    """Running maxima and their indices along ``dim``: ``em.cummax(self, dim, reverse)``.

    Args:
        dim: the dim to scan along.
        reverse: scan from the end.

    Returns:
        ``(values, indices)``.

    Raises:
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _sorting.cummax(self, dim, reverse)

def cummin(self, dim, reverse=False):
    """Running minima and their indices along ``dim``: ``em.cummin(self, dim, reverse)``.

    Args:
        dim: the dim to scan along.
        reverse: scan from the end.

    Returns:
        ``(values, indices)``.

    Raises:
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _sorting.cummin(self, dim, reverse)


METHODS = {  # bound onto Tensor by tensor_methods.py
    "to": to, "float": _float, "half": half, "bfloat16": bfloat16, "double": double, "long": long, "byte": byte,
    "int": _int, "bool": _bool, "bitwise_and": bitwise_and, "bitwise_or": bitwise_or, "bitwise_xor": bitwise_xor,
    "bitwise_not": bitwise_not, "__and__": __and__, "__rand__": __rand__, "__or__": __or__, "__ror__": __ror__,
    "__xor__": __xor__, "__rxor__": __rxor__, "_truth": _truth, "logical_and": logical_and,
    "logical_or": logical_or, "logical_xor": logical_xor, "nonzero": nonzero, "logical_not": logical_not,
    "is_contiguous": is_contiguous, "stride": stride, "dim": dim, "element_size": element_size, "mT": mT,
    "expand": expand, "square": square, "reciprocal": reciprocal, "softmax": softmax, "log_softmax": log_softmax,
    "__reduce__": __reduce__, "__deepcopy__": __deepcopy__, "grad": grad, "requires_grad": requires_grad,
    "requires_grad_": requires_grad_, "retain_grad": retain_grad, "sort": sort, "argsort": argsort, "topk": topk,
    "roll": roll, "scatter": scatter, "scatter_reduce": scatter_reduce, "cumsum": cumsum, "cumprod": cumprod,
    "cummax": cummax, "cummin": cummin,
}
