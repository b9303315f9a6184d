"""The sort family (sort, argsort, topk) and the scans (cumsum, cumprod, cummax, cummin) along one dim:
a C++ kernel per device, differentiable (sort/topk/cummax/cummin through the indices they return)."""
from __future__ import annotations

from . import _C
from . import dtypes as _dt
from .args import bool_arg, int_arg
from .backprop import record
from .backprop import rule as _rule
from .errors import EmberTypeError, EmberValueError
from .multi import where
from .tensor_type import Tensor, _dim, _wrap


def _check_tensor(x, op):
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor, got {type(x).__name__}")


def _sort(x, dim, descending, stable, op):
    """(values, indices) of x sorted along dim; the values are recorded as x.gather(indices, dim), so
    their gradient is scattered back through the indices (gather's rule)."""
    _check_tensor(x, op)
    descending = bool_arg(descending, op, "descending")
    stable = bool_arg(stable, op, "stable")
    if x.ndim == 0:  # a scalar is a line of one element; gather (and its backward) needs a dim
        v, i = _sort(x.reshape(1), dim, descending, stable, op)
        return v.reshape(()), i.reshape(())
    dim = _dim(dim, x.ndim, op)
    vs, ids, layout = _C.sort(x._storage, x._layout, dim, descending, stable)
    wrap = _wrap
    idx = wrap(ids, layout, _dt.int64, x._device)
    vals = record(wrap(vs, layout, x._dtype, x._device), "gather", (x, idx), dim)
    return vals, idx


def sort(x, dim=-1, descending=False, stable=False):
    """Sorts ``x`` along ``dim``, as ``torch.sort``.

    NaN sorts as the largest value (last ascending, first descending). Equal values always keep their
    index order, so every sort is stable; ``stable`` is accepted for torch's signature.

    Args:
        x: a tensor of any dtype (a 0-d tensor is one line of one element).
        dim: the dim to sort along (negative counts from the end).
        descending: largest first when True.
        stable: accepted for torch's signature; the order of equal values is always their index order.

    Returns:
        ``(values, indices)``: the sorted values (x's dtype, differentiable) and their int64 positions
        along ``dim`` in ``x``, both of x's shape.

    Raises:
        EmberTypeError: ``x`` is not a tensor, or a flag is not a bool.
        EmberValueError: a flag is an int other than 0 or 1.
        IndexOutOfRange: ``dim`` is out of range.
        DTypeError: the device does not hold x's dtype.
    """
    return _sort(x, dim, descending, stable, "sort")


def argsort(x, dim=-1, descending=False, stable=False):
    """The int64 indices that sort ``x`` along ``dim``, as ``torch.argsort``.

    Args:
        x: a tensor of any dtype.
        dim: the dim to sort along.
        descending: largest first when True.
        stable: accepted for torch's signature (equal values always keep index order).

    Returns:
        An int64 tensor of x's shape: ``sort(x, dim, descending)[1]``.

    Raises:
        EmberTypeError: ``x`` is not a tensor, or a flag is not a bool.
        EmberValueError: a flag is an int other than 0 or 1.
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _sort(x, dim, descending, stable, "argsort")[1]


def topk(x, k, dim=-1, largest=True, sorted=True):
    """The ``k`` largest (or smallest) values of ``x`` along ``dim`` and their indices, as ``torch.topk``.

    A selection kernel on every device (the line is never sorted whole; only the ``k`` chosen are).
    NaN counts as the largest value; among equal values the lower index comes first.

    Args:
        x: a tensor of any dtype.
        k: how many values to keep, ``0 <= k <= x.shape[dim]``.
        dim: the dim to select along.
        largest: the largest values when True, else the smallest.
        sorted: accepted for torch's signature; the values always come in sorted order.

    Returns:
        ``(values, indices)``: x's shape with ``dim`` of size ``k``; values differentiable (the gradient
        goes back to the picked positions), indices int64.

    Raises:
        EmberTypeError: ``x`` is not a tensor, ``k`` is not an int, or a flag is not a bool.
        EmberValueError: ``k`` is negative or larger than the dim, or a flag is an int other than 0 or 1.
        IndexOutOfRange: ``dim`` is out of range.
        DTypeError: the device does not hold x's dtype.
    """
    _check_tensor(x, "topk")
    k = int_arg(k, "topk", "k")
    largest = bool_arg(largest, "topk", "largest")
    bool_arg(sorted, "topk", "sorted")
    d = _dim(dim, x.ndim, "topk")
    n = 1 if x.ndim == 0 else x.shape[d]
    if not 0 <= k <= n:
        raise EmberValueError(f"[topk] k = {k} is out of range for a dim of size {n}")
    if x.ndim == 0:  # torch: the scalar itself (for k = 0 too); gather's backward needs a dim
        v, i = topk(x.reshape(1), 1, 0, largest)
        return v.reshape(()), i.reshape(())
    vs, ids, layout = _C.topk(x._storage, x._layout, d, k, largest)
    wrap = _wrap
    idx = wrap(ids, layout, _dt.int64, x._device)
    return record(wrap(vs, layout, x._dtype, x._device), "gather", (x, idx), d), idx


# --------------------------------------------------------------------- scans
_SCAN = {"cumsum": 0, "cumprod": 1, "cummax": 2, "cummin": 3}


def _scan(name, x, dim, exclusive, reverse):
    _check_tensor(x, name)
    exclusive = bool_arg(exclusive, name, "exclusive")
    reverse = bool_arg(reverse, name, "reverse")
    d = _dim(dim, x.ndim, name)
    vs, ids, layout = _C.scan(_SCAN[name], x._storage, x._layout, d, exclusive, reverse)
    wrap = _wrap
    odt = x._dtype if x._dtype.is_float or name in ("cummax", "cummin") else _dt.int64
    if ids is None:
        return record(wrap(vs, layout, odt, x._device), name, (x,), (d, exclusive, reverse))
    idx = wrap(ids, layout, _dt.int64, x._device)
    if x.ndim == 0:
        return wrap(vs, layout, odt, x._device), idx
    # the values are x at the indices: the gradient goes back through them (gather's rule)
    return record(wrap(vs, layout, odt, x._device), "gather", (x, idx), d), idx


def cumsum(x, dim, exclusive=False, reverse=False):
    """Running sums along ``dim``, as ``torch.cumsum`` (with MLX's ``exclusive`` and ``reverse`` forms).

    Halves and float32 add in float, float64 in double; integer inputs give int64 sums (torch's rule).

    Args:
        x: a tensor.
        dim: the dim to scan along.
        exclusive: each output leaves its own element out (the first is 0).
        reverse: scan from the end of the dim.

    Returns:
        A tensor of x's shape (x's dtype for floats, int64 for integers); differentiable.

    Raises:
        EmberTypeError: ``x`` is not a tensor, or ``dim`` is not an int.
        EmberValueError: a flag is not a bool.
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _scan("cumsum", x, dim, exclusive, reverse)


def cumprod(x, dim, exclusive=False, reverse=False):
    """Running products along ``dim``, as ``torch.cumprod`` (with ``exclusive`` and ``reverse`` forms).

    The gradient is ``cumsum(g * out, reversed) / x`` before a line's first zero, the product of the other
    elements (never a division) at that zero, and 0 after it, as torch and MLX give it.

    Args:
        x: a tensor.
        dim: the dim to scan along.
        exclusive: each output leaves its own element out (the first is 1).
        reverse: scan from the end of the dim.

    Returns:
        A tensor of x's shape (x's dtype for floats, int64 for integers); differentiable.

    Raises:
        EmberTypeError: ``x`` is not a tensor, or ``dim`` is not an int.
        EmberValueError: a flag is not a bool.
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _scan("cumprod", x, dim, exclusive, reverse)


def cummax(x, dim, reverse=False):
    """Running maxima along ``dim`` and where they are, as ``torch.cummax`` (with a ``reverse`` form).

    A NaN is taken and kept; among equal values the later position (in scan order) is reported.

    Args:
        x: a tensor.
        dim: the dim to scan along.
        reverse: scan from the end of the dim.

    Returns:
        ``(values, indices)``: x's dtype (differentiable, through the indices) and int64.

    Raises:
        EmberTypeError: ``x`` is not a tensor, or ``dim`` is not an int.
        EmberValueError: ``reverse`` is not a bool.
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _scan("cummax", x, dim, False, reverse)


def cummin(x, dim, reverse=False):
    """Running minima along ``dim`` and where they are, as ``torch.cummin`` (with a ``reverse`` form).

    Args:
        x: a tensor.
        dim: the dim to scan along.
        reverse: scan from the end of the dim.

    Returns:
        ``(values, indices)``: x's dtype (differentiable, through the indices) and int64.

    Raises:
        EmberTypeError: ``x`` is not a tensor, or ``dim`` is not an int.
        EmberValueError: ``reverse`` is not a bool.
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _scan("cummin", x, dim, False, reverse)


@_rule("cumsum", ())
def _cumsum_grad(n, out, g):
    dim, exclusive, reverse = n.saved
    return (cumsum(g, dim, exclusive, not reverse),)  # each input feeds the outputs after it


@_rule("cumprod", (0,))
def _cumprod_grad(n, out, g):
    dim, exclusive, reverse = n.saved
    x = n.inputs[0]
    # the product is recomputed from x rather than read from the result, which the caller may modify
    y = cumprod(x, dim, exclusive, reverse)
    # Before a line's first zero (in scan order) sum(g * y over later outputs) / x is exact; at the first
    # zero the gradient is that sum with the zero taken as 1 (the product of the others, exact); after it 0.
    zero = x.eq(0)
    seen = cumsum(zero, dim, False, reverse)  # zeros up to and including each position, in scan order
    before, first = seen.eq(0), zero & seen.eq(1)
    w = where
    at_zero = cumsum(g * cumprod(w(first, 1.0, x), dim, exclusive, reverse), dim, exclusive, not reverse)
    ahead = cumsum(g * y, dim, exclusive, not reverse) / w(before, x, 1.0)
    return (w(before, ahead, w(first, at_zero, 0.0)),)
