"""scatter and scatter_reduce with torch's semantics: a copy of x with src written (or combined by sum,
prod, mean, amax, amin) in at an index along one dim; one C++ kernel per reduction and device, and
backward rules (torch's formulas) written with ember ops, so they are differentiable once more."""
from __future__ import annotations

import numbers

import numpy as np

from . import _C
from .args import bool_arg
from .backprop import record, rule, wanted
from .creation import full, ones, zeros
from .errors import EmberTypeError, EmberValueError
from .multi import where
from .operands import _as_index
from .tensor_type import Tensor, _dim, _wrap

# ScatterOp's codes (cpp/backend.h): 0 is plain scatter
_REDUCE = {"sum": 1, "prod": 2, "mean": 3, "amax": 4, "amin": 5}



def _scatter(x, dim, index, src, code, include_self, op):
    """The recorded op behind scatter / scatter_reduce: checks, fits src to the index, runs the kernel."""
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor, got {type(x).__name__}")
    dim = _dim(dim, x.ndim, op)
    ids = _as_index(index, op, x._device)
    if isinstance(src, Tensor):
        if src.ndim == ids.ndim and src.shape != ids.shape and all(a <= b for a, b in zip(ids.shape, src.shape)):
            # torch reads src only where the index has entries: a view of its leading block
            src = src[tuple(slice(0, n) for n in ids.shape)]
    elif isinstance(src, (numbers.Number, np.generic)) and not isinstance(src, complex):
        src = full((), src, dtype=x._dtype, device=x._device).broadcast_as(ids.shape)
    else:
        raise EmberTypeError(f"[{op}] src must be a Tensor or a number, got {type(src).__name__}")
    s, l = _C.scatter_reduce(code, x._storage, x._layout, ids._storage, ids._layout, src._storage, src._layout,
                             dim, include_self)
    name = "scatter" if code == 0 else "scatter_" + _NAMES[code]
    return record(_wrap(s, l, x._dtype, x._device), name, (x, ids, src), (dim, include_self))


_NAMES = {v: k for k, v in _REDUCE.items()}


def scatter(x, dim, index, src=None, value=None):
    """A copy of ``x`` with ``src`` written in along ``dim`` at ``index``, as ``torch.scatter``.

    ``out[i][index[i][j]] = src[i][j]`` for dim 1 of a 2-D tensor, and so on: each position of the
    index names where along ``dim`` its element of ``src`` goes; the other coordinates stay. A repeated
    index keeps the last element in index order (the same on every device and thread count).

    Args:
        x: the tensor to copy (any dtype the device holds).
        dim: the dim the index runs along (negative counts from the end).
        index: an integer tensor (int64, uint32 or uint8; a list or array is converted) with x's number of
            dims, no larger than x outside ``dim`` (negative entries count from the end).
        src: a tensor of x's dtype, at least the index's size in every dim (only its leading block is
            read), or a number; give either ``src`` or ``value``.
        value: a number written at every indexed position (torch's ``scatter(dim, index, value)``).

    Returns:
        A new tensor of x's shape and dtype, differentiable w.r.t. ``x`` (zero where written) and ``src``
        (the gradient gathered at the index, for every position, repeated ones included, as torch).

    Raises:
        EmberTypeError: ``x`` is not a tensor, or ``src`` is neither a tensor nor a number.
        EmberValueError: both or neither of ``src`` and ``value`` are given.
        DTypeError: the index is not an integer tensor, or src's dtype is not x's.
        ShapeError: the index and src, or the index and x, do not fit.
        IndexOutOfRange: ``dim`` or an index entry is out of range.
        DeviceError: the operands are on different devices.
    """
    if (src is None) == (value is None):
        raise EmberValueError("[scatter] give exactly one of src (a tensor or a number) and value")
    return _scatter(x, dim, index, value if src is None else src, 0, True, "scatter")


def scatter_reduce(x, dim, index, src, reduce, include_self=True):
    """A copy of ``x`` with ``src`` combined in along ``dim`` at ``index``, as ``torch.scatter_reduce``.

    Every element of ``src`` is combined by ``reduce`` into the element of the output its index names
    (as in ``scatter``); the elements meeting at one position combine in index order, so results are
    the same on every device and thread count.

    Args:
        x: the tensor to start from (any dtype the device holds).
        dim: the dim the index runs along.
        index: an integer tensor with x's number of dims, no larger than x outside ``dim``.
        src: a tensor of x's dtype, at least the index's size in every dim (its leading block is read).
        reduce: ``"sum"``, ``"prod"``, ``"mean"``, ``"amax"`` or ``"amin"``. ``"mean"`` divides by the
            number of elements combined (x's own included when ``include_self``), floor division for
            integers; ``"amax"``/``"amin"`` propagate NaN.
        include_self: when False, a position the index names starts from src's elements alone (x's value
            there is left out); positions no index names keep x's value either way.

    Returns:
        A new tensor of x's shape and dtype, differentiable w.r.t. ``x`` and ``src`` by torch's rules:
        ``prod`` handles zeros exactly, and tied ``amax``/``amin`` elements share the gradient evenly.

    Raises:
        EmberTypeError: ``x`` or ``src`` is not a tensor, or ``include_self`` is not a bool.
        EmberValueError: ``reduce`` is not one of the five.
        DTypeError: the index is not an integer tensor, or src's dtype is not x's.
        ShapeError: the index and src, or the index and x, do not fit.
        IndexOutOfRange: ``dim`` or an index entry is out of range.
        DeviceError: the operands are on different devices.
    """
    code = _REDUCE.get(reduce) if isinstance(reduce, str) else None
    if code is None:
        raise EmberValueError(f"[scatter_reduce] reduce must be one of {sorted(_REDUCE)}, got {reduce!r}")
    if not isinstance(src, Tensor):
        raise EmberTypeError(f"[scatter_reduce] src must be a Tensor, got {type(src).__name__}")
    include_self = bool_arg(include_self, "scatter_reduce", "include_self")
    return _scatter(x, dim, index, src, code, include_self, "scatter_reduce")


# --------------------------------------------------------------------- backward (torch's formulas)
def _written_zero(g, ids, dim):
    """g with zeros at the positions the index names (what overwrote x there gets the gradient)."""
    return scatter(g, dim, ids, value=0.0)


def _as(mask, like):
    """A 0/1 comparison result as a float tensor of like's dtype."""
    return mask.to_dtype(like._dtype)


@rule("scatter", (1,))
def _scatter_rule(n, out, g):
    x, ids, src = n.inputs
    dim = n.saved[0]
    return (_written_zero(g, ids, dim) if wanted(x) else None, None,
            g.gather(ids, dim) if wanted(src) else None)


@rule("scatter_sum", (1,))
def _scatter_sum(n, out, g):
    x, ids, src = n.inputs
    dim, include_self = n.saved
    gx = (g if include_self else _written_zero(g, ids, dim)) if wanted(x) else None
    return gx, None, g.gather(ids, dim) if wanted(src) else None


@rule("scatter_mean", (1,))
def _scatter_mean(n, out, g):
    x, ids, src = n.inputs
    dim, include_self = n.saved
    start = ones(x.shape, dtype=g._dtype, device=g._device) if include_self else \
        zeros(x.shape, dtype=g._dtype, device=g._device)
    count = start.scatter_add(ids, ones(ids.shape, dtype=g._dtype, device=g._device), dim)
    gn = g / where(count.eq(0), 1.0, count)
    gx = (gn if include_self else _written_zero(gn, ids, dim)) if wanted(x) else None
    return gx, None, gn.gather(ids, dim) if wanted(src) else None


def _scatter_extreme(n, out, g):
    """amax / amin: the gradient of each output goes evenly to the elements (x's and src's) equal to it."""
    x, ids, src = n.inputs
    dim, include_self = n.saved
    self_is = _as(x.eq(out), g)
    src_is = _as(src.eq(out.gather(ids, dim)), g)
    gd = g / self_is.scatter_add(ids, src_is, dim)
    gx = None
    if wanted(x):
        gx = self_is * gd
        gx = gx if include_self else _written_zero(gx, ids, dim)
    return gx, None, src_is * gd.gather(ids, dim) if wanted(src) else None


rule("scatter_amax", None, True)(_scatter_extreme)
rule("scatter_amin", None, True)(_scatter_extreme)


@rule("scatter_prod", None, True)
def _scatter_prod(n, out, g):
    """prod: x's gradient from the product with x's zeros taken as one (exact when x is 0); a src
    element that is its position's only zero gets the product of the others, computed without it."""
    x, ids, src = n.inputs
    dim, include_self = n.saved
    gx = gs = None
    if wanted(x):
        x1 = where(x.eq(0), 1.0, x)
        gx = g * scatter_reduce(x1, dim, ids, src, "prod", include_self) / x1
        gx = gx if include_self else _written_zero(gx, ids, dim)
    if wanted(src):
        zero = _as(src.eq(0), g)
        zeros_there = zeros(x.shape, dtype=g._dtype, device=g._device).scatter_add(ids, zero, dim).gather(ids, dim)
        single_m = (zero * _as(zeros_there.eq(1), g)).ne(0)  # src's element is its position's only zero
        without = scatter_reduce(x, dim, ids, where(single_m, 1.0, src), "prod", include_self)
        gs = where(single_m, (g * without).gather(ids, dim),
                     (g * out).gather(ids, dim) / where(zero.ne(0), 1.0, src))
    return gx, None, gs


__all__ = ["scatter", "scatter_reduce"]
