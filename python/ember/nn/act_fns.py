"""Activation functions beyond the fused ones: elu, leaky_relu, softplus, mish, hardswish, hardsigmoid
and gelu's tanh form, each composed of ember's elementwise kernels (so differentiable on every device)."""
from __future__ import annotations

import math

from ..args import float_arg
from ..errors import DTypeError, EmberTypeError, EmberValueError
from ..tensor import Tensor, where
from . import ops

__all__ = ["elu", "gelu", "hardsigmoid", "hardswish", "leaky_relu", "mish", "softplus"]


def _float_input(x, op):
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor, got {type(x).__name__}")
    if not x.dtype.is_float:
        raise DTypeError(f"[{op}] expected a float tensor, got {x.dtype.name}")


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
    # expm1 of x only where x <= 0: the unused branch never overflows, so no inf * 0 reaches a gradient.
    pos = x.gt(0.0)
    neg = where(pos, 0.0, x).expm1().affine(alpha, 0.0)
    return where(pos, x, neg)


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
    return where(x.gt(0.0), x, x.affine(slope, 0.0))


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
    bx = x.affine(beta, 0.0) if beta != 1.0 else x
    sp = softplus_stable(bx)
    if beta != 1.0:
        sp = sp.affine(1.0 / beta, 0.0)
    return where(bx.gt(threshold), x, sp)


def softplus_stable(x):
    """``log(1 + exp(x))`` for any x without overflow: ``x + log1p(exp(-x))`` where x > 0, else
    ``log1p(exp(x))``, each branch fed only its own side of 0 (so neither exp overflows and the
    gradient at 0 is sigmoid(0) = 0.5, not the 0 of a relu + abs form)."""
    pos = x.gt(0.0)
    xp, xn = where(pos, x, 0.0), where(pos, 0.0, x)
    return where(pos, xp + xp.neg().exp().log1p(), xn.exp().log1p())


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
    if x.dtype.name == "float16":  # n below overflows float16's range long before the ratio reaches 1
        return mish(x.to_dtype("float32")).to_dtype(x.dtype)
    # tanh(log(1 + e)) = n / (n + 2) with n = e (e + 2), e = exp(x): four kernels fewer than tanh of a
    # stable softplus; exp's input is capped at 20, where the ratio is 1 in float32/bfloat16/float64.
    e = x.clamp(hi=20.0).exp()
    n = e * e.affine(1.0, 2.0)
    return x * (n / n.affine(1.0, 2.0))


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
    return x.affine(1.0 / 6.0, 0.5).clamp(0.0, 1.0)


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
    return x * x.affine(1.0 / 6.0, 0.5).clamp(0.0, 1.0)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


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
    # 0.5 (1 + tanh(z)) = sigmoid(2 z), with 2 z = x (2 c + 2 c 0.044715 x^2): the fused sigmoid, 5 kernels.
    two_z = x * x.sqr().affine(2.0 * _SQRT_2_OVER_PI * 0.044715, 2.0 * _SQRT_2_OVER_PI)
    return x * ops.sigmoid(two_z)
