"""Functions of several tensors: where, maximum, minimum, cat and stack, each computing in the
promoted dtype (promotion.py) and recording its op for backward."""
from __future__ import annotations

import numbers

import numpy as np

from . import _C
from .backprop import record
from .creation import tensor
from .errors import EmberTypeError, EmberValueError, ShapeError
from .operands import _scalar
from .promotion import _category_of_scalar, _scalar_dtype, promote_types, result_type
from .tensor_type import Tensor, _check_tensor_arg, _dim, _wrap


def _to_operand(x, dt, device):
    """x (a tensor, numpy array, list or scalar) as a tensor of dtype dt on device."""
    if isinstance(x, Tensor):
        return x.to_dtype(dt)
    if isinstance(x, (np.ndarray, list)):
        return tensor(x, device=device).to_dtype(dt)
    return _scalar(x, dt, device)


def where(cond, a, b):
    """Elementwise ``cond ? a : b`` with numpy broadcasting, as ``torch.where``.

    Args:
        cond: the condition, a tensor (any nonzero element is true), a numpy array or a list.
        a: the values where cond holds: a tensor, numpy array, list or Python scalar.
        b: the values elsewhere, likewise.

    Returns:
        A new tensor of the promoted dtype of a and b (torch.result_type's rule; two Python
        scalars give bool, int64 or float32), differentiable in a and b.

    Raises:
        DTypeError: for an operand of an unsupported type.
        ShapeError: when the shapes do not broadcast.
    """
    # lists, arrays and scalars go to the device of the tensor operands (the default device for none)
    device = next((x._device for x in (cond, a, b) if isinstance(x, Tensor)), None)
    if not isinstance(cond, Tensor):  # a list / array condition, like numpy
        cond = tensor(cond, device=device)
    for x in (a, b):
        if not isinstance(x, (Tensor, np.ndarray, list, numbers.Real, np.bool_)):
            raise EmberTypeError(f"[where] unsupported operand type {type(x).__name__}")
    arrays = [x for x in (a, b) if isinstance(x, (Tensor, np.ndarray, list))]
    if arrays:
        arrays = [tensor(x, device=cond._device) if isinstance(x, list) else x for x in arrays]
        dt = result_type(*arrays, *[x for x in (a, b) if isinstance(x, (numbers.Real, np.bool_))])
    else:  # two scalars: torch's defaults (bool, int64 or float32, the widest of the two)
        dt = _scalar_dtype(max(_category_of_scalar(a), _category_of_scalar(b)))
    a, b = _to_operand(a, dt, cond._device), _to_operand(b, dt, cond._device)
    s, l = _C.where(cond._storage, cond._layout, a._storage, a._layout, b._storage, b._layout)
    return record(_wrap(s, l, a._dtype, a._device), "where", (a, b, cond))


def maximum(a, b):
    """The elementwise maximum of a and b (NaN wins), in their promoted dtype.

    Args:
        a: a tensor, numpy array or Python scalar.
        b: likewise (two Python scalars give a 0-d tensor, as ``em.add`` does).

    Returns:
        A new tensor; ties share the gradient evenly.

    Raises:
        EmberTypeError: for an unsupported operand type.
        ShapeError: when the shapes do not broadcast.
    """
    if isinstance(a, Tensor):
        return a.maximum(b)
    if isinstance(b, Tensor):
        return b.maximum(a)
    return _operand(a, "maximum").maximum(b)  # two scalars / arrays, as em.add(1, 2.0) takes them


def minimum(a, b):
    """The elementwise minimum of a and b (NaN wins), in their promoted dtype.

    Args:
        a: a tensor, numpy array or Python scalar.
        b: likewise (two Python scalars give a 0-d tensor, as ``em.add`` does).

    Returns:
        A new tensor; ties share the gradient evenly.

    Raises:
        EmberTypeError: for an unsupported operand type.
        ShapeError: when the shapes do not broadcast.
    """
    if isinstance(a, Tensor):
        return a.minimum(b)
    if isinstance(b, Tensor):
        return b.minimum(a)
    return _operand(a, "minimum").minimum(b)  # two scalars / arrays, as em.add(1, 2.0) takes them


def _operand(x, op):
    """A non-tensor operand as a tensor (a Python int is int64, a float float32, as em.tensor makes them)."""
    if not isinstance(x, (numbers.Number, np.ndarray, np.generic, list, tuple)):
        raise EmberTypeError(f"[{op}] expected a tensor, array or Python scalar operand, got {type(x).__name__}")
    return tensor(x)


def _tensor_list(tensors, op):
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)) and not hasattr(tensors, "__iter__"):
        raise EmberTypeError(f"[{op}] expected a sequence of tensors, got {type(tensors).__name__}")
    tensors = list(tensors)
    if not tensors:
        raise EmberValueError(f"[{op}] expected at least one tensor")
    for i, t in enumerate(tensors):
        _check_tensor_arg(t, op, f"at position {i}")
    dt = tensors[0]._dtype
    for t in tensors[1:]:
        if t._dtype is not dt:
            dt = promote_types(dt, t._dtype)
    return [t.to_dtype(dt) for t in tensors]


def cat(tensors, dim=0):
    """Joins tensors along an existing dim, as ``torch.cat``.

    Args:
        tensors: a non-empty sequence of tensors with equal shapes except along dim; mixed dtypes
            are promoted (torch.promote_types) and each gradient comes back in its input's dtype.
        dim: the dim to join along (negative counts from the end).

    Returns:
        A new tensor.

    Raises:
        DTypeError: when tensors is not a sequence of tensors.
        EmberValueError: for an empty sequence.
        ShapeError: when the other dims differ.
        IndexOutOfRange: for a dim out of range.
    """
    tensors = _tensor_list(tensors, "cat")
    dim = _dim(dim, tensors[0].ndim, "cat")
    s, l = _C.cat([t._storage for t in tensors], [t._layout for t in tensors], dim)
    t0 = tensors[0]
    return record(_wrap(s, l, t0._dtype, t0._device), "cat", tuple(tensors), (dim, tuple(t.shape[dim] for t in tensors)))


def stack(tensors, dim=0):
    """Joins tensors of one shape along a new dim, as ``torch.stack``.

    Args:
        tensors: a non-empty sequence of tensors of the same shape (dtypes promoted as in cat).
        dim: where the new dim goes, in ``[-ndim - 1, ndim]``.

    Returns:
        A new tensor with one more dim.

    Raises:
        DTypeError: when tensors is not a sequence of tensors.
        EmberValueError: for an empty sequence.
        ShapeError: when the shapes differ.
        IndexOutOfRange: for a dim out of range.
    """
    tensors = _tensor_list(tensors, "stack")
    dim = _dim(dim, tensors[0].ndim + 1, "stack")
    for t in tensors[1:]:
        if t.shape != tensors[0].shape:
            raise ShapeError(f"[stack] all tensors must have the same shape, got {tensors[0].shape} and {t.shape}")
    return cat([t.unsqueeze(dim) for t in tensors], dim)
