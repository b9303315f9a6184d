"""The sort family: sort, argsort and topk along one dim (a C++ kernel per device; NaN sorts as the
largest value, ties keep index order), differentiable through the indices they return."""
from __future__ import annotations

import sys

from . import _C
from . import dtypes as _dt
from .args import bool_arg, int_arg
from .backprop import record
from .errors import EmberTypeError, EmberValueError


def _t():
    return sys.modules["ember.tensor"]


def _check_tensor(x, op):
    if not isinstance(x, _t().Tensor):
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
    dim = _t()._dim(dim, x.ndim, op)
    vs, ids, layout = _C.sort(x._storage, x._layout, dim, descending, stable)
    wrap = _t()._wrap
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
    """
    _check_tensor(x, "topk")
    k = int_arg(k, "topk", "k")
    largest = bool_arg(largest, "topk", "largest")
    bool_arg(sorted, "topk", "sorted")
    n = 1 if x.ndim == 0 else x.shape[_t()._dim(dim, x.ndim, "topk")]
    if not 0 <= k <= n:
        raise EmberValueError(f"[topk] k = {k} is out of range for a dim of size {n}")
    if x.ndim == 0:
        return _sort(x, dim, largest, True, "topk")
    dim = _t()._dim(dim, x.ndim, "topk")
    _, idx = _sort(x.detach(), dim, largest, True, "topk")  # the values come from gather below
    idx = idx.narrow(dim, 0, k)
    return x.gather(idx, dim), idx
