"""A fused op declared once (docs/design/architecture.md): its kernel calls and its one composite form."""
from __future__ import annotations

from .backprop import is_grad_enabled
from .custom_op import _FWD_NAMES, _OpBase
from .reference import bwd_from_reference

__all__ = ["FusedOp"]

_NO_FWD = {name: getattr(_OpBase, name) for name in _FWD_NAMES}  # the base's "not implemented" forwards


class FusedOp:
    """Mixin over ``CustomOp1/2/3`` / ``CustomOp`` for an op whose forward and backward are fused kernels.

    A subclass (``class _RmsNorm(FusedOp, CustomOp2)``) declares:

    * ``cpu_fwd``: the forward kernel call. The ``_C.fused`` entries take a storage of any device, so
      it is every device's forward (``metal_fwd``, ``cuda_fwd``, ... are set to it unless declared).
    * ``bwd_kernel(self, <bwd's arguments>)``: the fused backward, for an ordinary ``backward()``.
    * ``composite(self, *inputs)``: the op in ordinary Tensor ops, written once. It is the op's
      ``reference`` (``check_op`` and the tests compare against it; the public ``*_slow`` functions
      call it), and ``backward(create_graph=True)`` differentiates it, so second order works.
    * ``saved``: the attribute the forward fills for ``bwd_kernel`` (rstd, lse, ...), or None.

    ``bwd`` is derived: the kernel when no graph is being built and the forward's statistics are
    there, else the gradients of ``composite`` recomputed from the saved inputs.
    """

    saved = None

    def __init_subclass__(cls, **kwargs):
        fwd = cls.__dict__.get("cpu_fwd")
        if fwd is not None:  # every device's forward, unless declared (or inherited from another cpu_fwd)
            inherited = next((b.__dict__["cpu_fwd"] for b in cls.__mro__[1:] if "cpu_fwd" in b.__dict__), None)
            for name, default in _NO_FWD.items():
                if name not in cls.__dict__ and getattr(cls, name, default) in (default, inherited):
                    setattr(cls, name, fwd)
        super().__init_subclass__(**kwargs)
        arity = getattr(cls, "_arity", None)
        if arity is not None:
            cls._composite_bwd = bwd_from_reference(arity)

    def composite(self, *inputs):
        """The op in ordinary Tensor ops (its one composite form); every fused op defines it."""
        raise NotImplementedError(f"{type(self).__name__} declares no composite")

    def reference(self, *inputs):
        """The op's reference for ``check_op`` and ``reference_grads``: its composite form."""
        return self.composite(*inputs)

    def bwd(self, *args):
        """The fused backward kernel in an ordinary backward; under ``create_graph`` (or before the
        forward saved its statistics) the differentiable gradients of ``composite``."""
        s = self.saved
        if not is_grad_enabled() and (s is None or getattr(self, s) is not None):
            return self.bwd_kernel(*args)
        return self._composite_bwd(*args)
