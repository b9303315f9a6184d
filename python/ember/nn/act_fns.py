"""Activation functions beyond the fused ones: elu, leaky_relu, softplus, mish, hardswish, hardsigmoid
and gelu's tanh form, each one kernel forward (a UnaryOp with its scalar parameters) and one fused kernel
backward (``_C.fused.<name>_bwd``), on every device."""
from __future__ import annotations

import math

from .. import _C
from ..args import float_arg
from ..backprop import is_grad_enabled
from ..custom_op import CustomOp1
from ..errors import DTypeError, EmberTypeError, EmberValueError
from ..multi import where
from ..tensor_type import UNARY, Tensor
from . import ops

__all__ = ["elu", "gelu", "hardsigmoid", "hardswish", "leaky_relu", "mish", "softplus"]

_F = _C.fused
# gelu's tanh form: 2 z = x (_B + _BK x^2), z = sqrt(2/pi) (x + 0.044715 x^3).
_B = 2.0 * math.sqrt(2.0 / math.pi)
_BK = _B * 0.044715


def _float_input(x, op):
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor, got {type(x).__name__}")
    if not x.dtype.is_float:
        raise DTypeError(f"[{op}] expected a float tensor, got {x.dtype.name}")


class _Act(CustomOp1):
    """An activation with scalar parameters p0, p1: the forward is its UnaryOp kernel, the backward its
    fused kernel; under ``backward(create_graph=True)`` the backward is ``g * _dfdx`` written with
    Tensor ops instead, so second-order derivatives work. Subclasses set ``name`` and ``_dfdx``."""

    def __init__(self, p0=0.0, p1=0.0):
        self.p0, self.p1 = p0, p1

    def cpu_fwd(self, storage, layout):
        return _C.unary(UNARY[self.name], storage, layout, self.p0, self.p1), layout.shape

    # _C.unary and _C.fused take a storage of any device: one call path everywhere.
    metal_fwd = cuda_fwd = cpu_fwd

    def bwd(self, x, res, g):
        if not is_grad_enabled():
            st = getattr(_F, self.name + "_bwd")(x._storage, x._layout, g._storage, g._layout, self.p0, self.p1)
            return ops._out(st, x.shape, x)
        return self._grad(x, g)

    def _grad(self, x, g):
        return g * self._dfdx(x)


class _Elu(_Act):
    name = "elu"

    def _dfdx(self, x):
        return where(x.gt(0.0), 1.0, x.exp() * self.p0)


class _LeakyRelu(_Act):
    name = "leaky_relu"

    def _grad(self, x, g):
        return where(x.gt(0.0), g, g * self.p0)


class _Softplus(_Act):
    name = "softplus"

    def _dfdx(self, x):
        bx = x * self.p0
        return where(bx.gt(self.p1), 1.0, ops.sigmoid(bx))


class _Mish(_Act):
    name = "mish"

    def _dfdx(self, x):
        t = softplus(x).tanh()  # mish' = t + x sigmoid(x) (1 - t^2)
        return t + x * ops.sigmoid(x) * (1.0 - t * t)


class _Hardswish(_Act):
    name = "hardswish"

    def _grad(self, x, g):
        return where(x.le(-3.0), 0.0, where(x.ge(3.0), g, g * (x * (1.0 / 3.0) + 0.5)))


class _Hardsigmoid(_Act):
    name = "hardsigmoid"

    def _grad(self, x, g):
        return where(x.gt(-3.0), where(x.lt(3.0), g * (1.0 / 6.0), 0.0), 0.0)


class _GeluTanh(_Act):
    name = "gelu_tanh"

    def _dfdx(self, x):
        xx = x * x
        s = ops.sigmoid(x * (xx * _BK + _B))
        return s + x * (s * (1.0 - s)) * (xx * (3.0 * _BK) + _B)


def elu(x, alpha=1.0):
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere, as ``torch.nn.functional.elu``.

    Args:
        x: a float tensor (any strides).
        alpha: the scale of the negative part.

    Returns:
        A new tensor of x's shape and dtype, differentiable.

    Raises:
        DTypeError: for a non-float tensor.
        EmberTypeError: for a non-tensor input or a non-number alpha.
    """
    _float_input(x, "elu")
    alpha = float_arg(alpha, "elu", "alpha")
    return x.apply_op1(_Elu(alpha))


def leaky_relu(x, negative_slope=0.01):
    """``x`` where positive, ``negative_slope * x`` elsewhere, as ``torch.nn.functional.leaky_relu``.

    Args:
        x: a float tensor.
        negative_slope: the slope for x <= 0.

    Returns:
        A new tensor of x's shape and dtype, differentiable.

    Raises:
        DTypeError: for a non-float tensor.
        EmberTypeError: for a non-tensor input.
    """
    _float_input(x, "leaky_relu")
    slope = float_arg(negative_slope, "leaky_relu", "negative_slope")
    return x.apply_op1(_LeakyRelu(slope))


def softplus(x, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta * x)) / beta``, linear (``x``) where ``beta * x > threshold``, as
    ``torch.nn.functional.softplus``.

    Args:
        x: a float tensor.
        beta: the sharpness; must not be 0.
        threshold: above ``beta * x > threshold`` the result is ``x`` itself.

    Returns:
        A new tensor of x's shape and dtype, differentiable.

    Raises:
        DTypeError: for a non-float tensor.
        EmberValueError: for beta == 0.
    """
    _float_input(x, "softplus")
    beta = float_arg(beta, "softplus", "beta")
    threshold = float_arg(threshold, "softplus", "threshold")
    if beta == 0.0:
        raise EmberValueError("[softplus] beta must not be 0")
    return x.apply_op1(_Softplus(beta, threshold))


def softplus_stable(x):
    """``log(1 + exp(x))`` for any float x without overflow (softplus with no threshold): one kernel,
    ``max(x, 0) + log1p(exp(-|x|))``, differentiable (the gradient sigmoid(x), 0.5 at 0).

    Args:
        x: a float tensor.

    Returns:
        A new tensor of x's shape and dtype, differentiable.

    Raises:
        DTypeError: for a non-float tensor.
    """
    _float_input(x, "softplus")
    return x.apply_op1(_Softplus(1.0, math.inf))


def mish(x):
    """``x * tanh(softplus(x))``, as ``torch.nn.functional.mish``.

    Args:
        x: a float tensor.

    Returns:
        A new tensor of x's shape and dtype, differentiable.

    Raises:
        DTypeError: for a non-float tensor.
    """
    _float_input(x, "mish")
    return x.apply_op1(_Mish())


def hardsigmoid(x):
    """``clamp(x + 3, 0, 6) / 6``, as ``torch.nn.functional.hardsigmoid``.

    Args:
        x: a float tensor.

    Returns:
        A new tensor of x's shape and dtype, differentiable (0 outside [-3, 3]).

    Raises:
        DTypeError: for a non-float tensor.
    """
    _float_input(x, "hardsigmoid")
    return x.apply_op1(_Hardsigmoid())


def hardswish(x):
    """``x * clamp(x + 3, 0, 6) / 6``, as ``torch.nn.functional.hardswish`` (MobileNetV3).

    Args:
        x: a float tensor.

    Returns:
        A new tensor of x's shape and dtype, differentiable.

    Raises:
        DTypeError: for a non-float tensor.
    """
    _float_input(x, "hardswish")
    return x.apply_op1(_Hardswish())


def gelu(x, approximate="none"):
    """GELU, as ``torch.nn.functional.gelu``: the exact ``x * Phi(x)`` (one fused kernel) or, with
    ``approximate="tanh"``, ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (candle's default ``gelu``).

    Args:
        x: a float tensor.
        approximate: "none" (erf) or "tanh".

    Returns:
        A new tensor of x's shape and dtype, differentiable.

    Raises:
        DTypeError: for a non-float tensor.
        EmberValueError: for another ``approximate``.
    """
    if approximate == "none":
        return ops.gelu(x)
    if approximate != "tanh":
        raise EmberValueError(f"[gelu] approximate must be 'none' or 'tanh', got {approximate!r}")
    _float_input(x, "gelu")
    return x.apply_op1(_GeluTanh())
