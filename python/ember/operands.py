"""Operands from Python values: scalars and arrays as tensors of the promoted dtype (binary ops),
index lists as index tensors, filled storages. Below the op modules, above creation."""
from __future__ import annotations

import numbers

import numpy as np

from . import dtypes as _dt
from .args import float_arg
from .creation import _full_storage, tensor
from .errors import DTypeError, EmberError, EmberTypeError
from .promotion import result_type
from .tensor_type import _SCALAR_LAYOUT, Tensor, _index_np, _wrap


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


def _scalar(value, dtype, device):
    return _wrap(_full_storage(device, dtype, 1, value), _SCALAR_LAYOUT, dtype, device)




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

def _as_index(ids, op, device=None):
    """``ids`` as an integer index tensor; a list or array goes to ``device`` (the tensor it indexes)."""
    if not isinstance(ids, Tensor):
        ids = tensor(_index_np(ids, op), device=device)
    if ids._dtype.is_float:
        raise DTypeError(f"[{op}] indices must be an integer tensor, got {ids._dtype.name}")
    return ids
