"""Argument coercion for the facade: user ints, floats and bools checked here raise an EmberError naming
the op, instead of int() truncating 1.5, float() raising a bare ValueError, or the _C binding refusing
a value past int64 with pybind's bare TypeError."""
from __future__ import annotations

import numbers
import operator

import numpy as np

from . import _C
from .errors import EmberTypeError, EmberValueError, IndexOutOfRange

_I64 = 2**63


def int_arg(v, op, what):
    """An integer argument (int, numpy int, bool, 0-d int tensor) as a Python int; never truncates a float."""
    if type(v) is int:
        return v
    try:
        return operator.index(v)
    except TypeError:
        raise EmberTypeError(f"[{op}] {what} must be an int, got {type(v).__name__}") from None


def i64_arg(v, op, what):
    """int_arg that also fits int64; beyond it any dim, index or offset is out of range."""
    v = int_arg(v, op, what)
    if not -_I64 <= v < _I64:
        raise IndexOutOfRange(f"[{op}] {what} {v} out of range")
    return v


def float_arg(v, op, what):
    """A real-number argument as a Python float; strings (float('1') parses them), None, lists and
    complex numbers raise DTypeError, ints too large for a double raise EmberValueError."""
    if type(v) is float:
        return v
    if isinstance(v, (str, bytes, bytearray)):
        raise EmberTypeError(f"[{op}] {what} must be a real number, got {type(v).__name__}")
    try:
        return float(v)
    except OverflowError:
        raise EmberValueError(f"[{op}] {what} {v} is too large for a float") from None
    except (TypeError, ValueError):
        raise EmberTypeError(f"[{op}] {what} must be a real number, got {type(v).__name__}") from None


def bool_arg(v, op, what):
    """A flag: bool, numpy bool, or the int 0 or 1; anything else raises (keepdim=2 is a typo, not True)."""
    if v is True or v is False:
        return v
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, numbers.Integral):
        if v in (0, 1):
            return bool(v)
        raise EmberValueError(f"[{op}] {what} must be a bool, got {v}")
    raise EmberTypeError(f"[{op}] {what} must be a bool, got {type(v).__name__}")


def dim_arg(dim, ndim, op):
    """One dim argument normalised into ``[0, ndim)``; a non-int or an out-of-range value raises with the op's name."""
    d = int_arg(dim, op, "dim")
    if not -2**63 <= d < 2**63:  # out of range anyway; the binding would refuse it with a bare TypeError
        raise IndexOutOfRange(f"[{op}] dim {d} out of range for a tensor with {ndim} dims")
    return _C.normalize_dim(d, ndim, op)
