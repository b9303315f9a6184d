"""Type promotion: the one rule (torch.result_type's) by which mixed dtypes, Python scalars and numpy
arrays meet in an op. Pure dtype logic; it never touches data."""
from __future__ import annotations

import numbers

import numpy as np

from . import dtypes as _dt
from .dtypes import DType
from .errors import EmberTypeError

__all__ = ["promote_types", "result_type"]

_INTS = (_dt.bool, _dt.uint8, _dt.int32, _dt.int64)  # torch's widening order (bool lowest)


def _promote_ints(a, b):
    # uint32 meets the others as numpy does: bool and uint8 fit in it, int32 and int64 widen to int64
    # (both lossless); torch has no uint32 arithmetic to follow
    if a is _dt.uint32 or b is _dt.uint32:
        other = b if a is _dt.uint32 else a
        return _dt.uint32 if other in (_dt.uint32, _dt.bool, _dt.uint8) else _dt.int64
    return a if _INTS.index(a) >= _INTS.index(b) else b


def _promote(a, b):
    if a is b:
        return a
    if a.is_float and b.is_float:
        if a is _dt.float64 or b is _dt.float64:
            return _dt.float64
        return _dt.float32  # f16 + bf16 and either with f32: float32 holds both
    if a.is_float:
        return a
    if b.is_float:
        return b
    return _promote_ints(a, b)


_TABLE = {(a, b): _promote(a, b) for a in _dt.ALL_DTYPES for b in _dt.ALL_DTYPES}


def promote_types(a, b) -> DType:
    """The smallest dtype both dtypes convert to without losing their kind, as ``torch.promote_types``.

    Args:
        a: a dtype (an ``em.DType``, its name or a numpy dtype).
        b: a dtype, likewise.

    Returns:
        The promoted ``em.DType``: f16 + bf16 -> float32, int + float -> the float, uint8 + int64 ->
        int64; uint32 with uint8 or int64 gives numpy's uint32 / int64 (torch refuses that pair).

    Raises:
        DTypeError: when either argument is not a dtype.
    """
    return _TABLE[_dt.to_dtype(a), _dt.to_dtype(b)]


# categories, lowest first: a scalar or 0-d tensor of a higher category than every dimensioned
# tensor takes part in the result (torch's rule); one of the same or a lower category does not
_BOOL, _INT, _FLOAT = 0, 1, 2


def _category(dt):
    return _FLOAT if dt.is_float else (_BOOL if dt is _dt.bool else _INT)


def _classify(x):
    """(priority, dtype or None, category): priority 2 for a tensor or array with dims, 1 for a 0-d
    tensor or array, 0 for a Python or numpy scalar (dtype None: scalars only lend their category)."""
    dt = getattr(x, "_dtype", None)
    if dt is not None:
        return (2 if x._layout.shape else 1), dt, _category(dt)
    if isinstance(x, (bool, np.bool_)):
        return 0, None, _BOOL
    if isinstance(x, (numbers.Integral, np.integer)):
        return 0, None, _INT
    if isinstance(x, numbers.Real):
        return 0, None, _FLOAT
    if isinstance(x, np.ndarray):
        dt = _dt.from_numpy_dtype(x.dtype)
        return (2 if x.ndim else 1), dt, _category(dt)
    raise EmberTypeError(f"[result_type] unsupported operand type {type(x).__name__}")


def _category_of_scalar(x):
    """The category (bool < int < float) of a Python or numpy scalar."""
    return _classify(x)[2]


def _scalar_dtype(cat):
    # torch's defaults for a Python float / int / bool
    return _dt.float32 if cat == _FLOAT else (_dt.int64 if cat == _INT else _dt.bool)


def result_type(*operands) -> DType:
    """The dtype an op computes in for these operands, as ``torch.result_type``.

    Tensors with dims decide first; a 0-d tensor counts only when its category (int < float) is
    higher than theirs, then a Python scalar only when its category is higher still (a Python float
    with an int tensor gives float32; a Python scalar never widens a float tensor). A numpy array
    counts as a tensor of its dtype.

    Args:
        *operands: tensors, numpy arrays and Python (or numpy) scalars; at least one tensor or array.

    Returns:
        The result ``em.DType``.

    Raises:
        DTypeError: for an operand of another type, or when no operand is a tensor or an array.
    """
    best = [None, None, None]  # promoted dtype per priority
    cats = [-1, -1, -1]  # highest category per priority
    for x in operands:
        p, dt, cat = _classify(x)
        if dt is not None:
            best[p] = dt if best[p] is None else _TABLE[best[p], dt]
        cats[p] = max(cats[p], cat)
    if best[2] is None and best[1] is None:
        raise EmberTypeError("[result_type] expected at least one tensor or array among the operands")
    out, out_cat = None, -1
    for p in (2, 1, 0):
        if cats[p] > out_cat:
            if out is None:
                out = best[p] if best[p] is not None else _scalar_dtype(cats[p])
            elif cats[p] == _FLOAT or out_cat == _BOOL:
                out = _TABLE[out, best[p] if best[p] is not None else _scalar_dtype(cats[p])]
            out_cat = cats[p]
    return out
