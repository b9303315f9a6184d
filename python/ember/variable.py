"""Var, the leaf tensor that tracks gradients, and FrozenVar, a parameter switched off."""
from __future__ import annotations

from . import _C
from .creation import tensor
from .errors import DeviceError, DTypeError, GradientsInStore, ShapeError
from .tensor_type import Tensor, _wrap


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
