"""The activation family's one definition: each activation's composite form and its one backward, used by
the Tensor methods' rules (x.gelu()) and by nn's ops (nn.ops.gelu, nn.elu, ...) on every device."""
from __future__ import annotations

import math

from . import _C
from .backprop import is_grad_enabled
from .custom_op import CustomOp1
from .fused_op import FusedOp
from .kernel_result import dense_like
from .multi import where
from .reference import vjp
from .tensor_type import UNARY

__all__ = ["COMPOSITES", "Activation", "act_bwd"]

_F = _C.fused
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
# gelu's tanh form: 2 z = x (_B + _BK x^2), z = sqrt(2/pi) (x + 0.044715 x^3).
_B = 2.0 * math.sqrt(2.0 / math.pi)
_BK = _B * 0.044715


# ----------------------------------------------------------------------------- the composite forms
# f(x, p0, p1) in Tensor ops whose rules are written by hand (tanh, erf, exp, log1p, clamp, where), so
# backward(create_graph=True) differentiates them. Branches that where() drops stay finite (clamped
# arguments): a dropped inf would still turn its zero gradient into NaN. At the kinks each form's
# derivative is the fused kernel's (torch's): hardswish 0 at -3 and 1 at 3, hardsigmoid 0 at +-3, ...
def _sigmoid(x, p0=0.0, p1=0.0):
    return (x * 0.5).tanh() * 0.5 + 0.5  # 1 / (1 + exp(-x)) without exp's overflow


def _silu(x, p0=0.0, p1=0.0):
    return x * _sigmoid(x)


def _gelu(x, p0=0.0, p1=0.0):
    return x * ((x * _INV_SQRT2).erf() * 0.5 + 0.5)


def _elu(x, alpha, p1=0.0):
    return where(x.gt(0.0), x, x.clamp(hi=0.0).expm1() * alpha)


def _leaky_relu(x, slope, p1=0.0):
    return where(x.gt(0.0), x, x * slope)


def _softplus(x, beta, threshold):
    bx = x * beta  # log(1 + e^bx) / beta, taken from the side where e^(-|bx|) cannot overflow
    sp = where(bx.gt(0.0), bx + (-bx.clamp(lo=0.0)).exp().log1p(), bx.clamp(hi=0.0).exp().log1p())
    return where(bx.gt(threshold), x, sp / beta)


def _mish(x, p0=0.0, p1=0.0):
    return x * _softplus(x, 1.0, math.inf).tanh()


def _hardswish(x, p0=0.0, p1=0.0):
    return where(x.le(-3.0), 0.0, where(x.ge(3.0), x, x * (x + 3.0) * (1.0 / 6.0)))


def _hardsigmoid(x, p0=0.0, p1=0.0):
    return where(x.le(-3.0), 0.0, where(x.ge(3.0), 1.0, x * (1.0 / 6.0) + 0.5))


def _gelu_tanh(x, p0=0.0, p1=0.0):
    return x * _sigmoid(x * (x * x * _BK + _B))  # 0.5 x (1 + tanh(z)) = x sigmoid(2 z)


COMPOSITES = {"sigmoid": _sigmoid, "silu": _silu, "gelu": _gelu, "elu": _elu, "leaky_relu": _leaky_relu,
              "softplus": _softplus, "mish": _mish, "hardswish": _hardswish, "hardsigmoid": _hardsigmoid,
              "gelu_tanh": _gelu_tanh}
_BWD = {k: getattr(_F, k + "_bwd") for k in COMPOSITES}  # the fused backward kernels, one per activation


# ----------------------------------------------------------------------------- the one backward
def act_bwd(kind, x, out, g, p0=0.0, p1=0.0):
    """The gradient of activation ``kind`` (parameters p0, p1) at input ``x`` for the output gradient ``g``.

    In an ordinary backward it is one fused kernel, on every device (sigmoid's reads its output
    ``out``). Under ``backward(create_graph=True)`` it is the gradient of the composite form in
    ``COMPOSITES``, itself differentiable, so higher orders work.

    Args:
        kind: the activation's name, a key of ``COMPOSITES``.
        x: the activation's input.
        out: its output.
        g: the gradient flowing into the output.
        p0: the first scalar parameter (elu's alpha, leaky_relu's slope, softplus' beta).
        p1: the second (softplus' threshold).

    Returns:
        Tensor: the gradient with respect to ``x``.
    """
    if not is_grad_enabled():
        a = out if kind == "sigmoid" else x
        return dense_like(_BWD[kind](a._storage, a._layout, g._storage, g._layout, p0, p1), x.shape, x)
    return vjp(COMPOSITES[kind], [x, p0, p1], [g])[0]


class Activation(FusedOp, CustomOp1):
    """nn's activation op: the forward is the activation's unary kernel, the backward ``act_bwd`` (the
    same as the Tensor methods'), the composite its form in ``COMPOSITES``. ``Activation("elu", alpha)``;
    the op's name is the activation's."""

    def __init__(self, kind, p0=0.0, p1=0.0):
        self.name, self.p0, self.p1 = kind, p0, p1
        self._code = UNARY[kind]

    def cpu_fwd(self, storage, layout):
        return _C.unary(self._code, storage, layout, self.p0, self.p1), layout.shape

    def bwd(self, x, res, g):
        return act_bwd(self.name, x, res, g, self.p0, self.p1)

    def composite(self, x):
        return COMPOSITES[self.name](x, self.p0, self.p1)
