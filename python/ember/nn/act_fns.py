"""Activation functions beyond the fused ones: elu, leaky_relu, softplus, mish, hardswish, hardsigmoid
and gelu's tanh form, each one kernel forward (a UnaryOp with its scalar parameters) and one fused kernel
backward (``_C.fused.<name>_bwd``), on every device; their backward and composite forms live in
ember.activation."""
from __future__ import annotations

import math

from ..activation import Activation
from ..args import float_arg
from ..errors import DTypeError, EmberTypeError, EmberValueError
from ..tensor_type import Tensor
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
    return x.apply_op1(Activation("elu", alpha))


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
    return x.apply_op1(Activation("leaky_relu", slope))


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
    return x.apply_op1(Activation("softplus", beta, threshold))


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
    return x.apply_op1(Activation("softplus", 1.0, math.inf))


def _plain(kind, what, grad=""):
    """The activation function ``kind`` without parameters: one kernel of a float tensor. ``what`` opens its
    docstring (its formula and torch's name); ``grad`` notes its gradient."""

    def fn(x):
        _float_input(x, kind)
        return x.apply_op1(Activation(kind))

    fn.__name__ = fn.__qualname__ = kind
    fn.__doc__ = f"""{what}

    Args:
        x: a float tensor.

    Returns:
        A new tensor of x's shape and dtype, differentiable{grad}.

    Raises:
        DTypeError: for a non-float tensor.
    """
    return fn


mish = _plain("mish", "``x * tanh(softplus(x))``, as ``torch.nn.functional.mish``.")
hardsigmoid = _plain("hardsigmoid", "``clamp(x + 3, 0, 6) / 6``, as ``torch.nn.functional.hardsigmoid``.",
                     " (0 outside [-3, 3])")
hardswish = _plain("hardswish", "``x * clamp(x + 3, 0, 6) / 6``, as ``torch.nn.functional.hardswish`` (MobileNetV3).")


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
    return x.apply_op1(Activation("gelu_tanh"))
