"""More of torch's activations, functions and modules: relu6 hardtanh softsign softshrink hardshrink celu
logsigmoid prelu glu softmin threshold; built on the fused elu/softplus/softmax kernels and elementwise ops."""
from __future__ import annotations

import warnings

from ..args import dim_arg, float_arg, int_arg
from ..creation import full
from ..errors import DTypeError, EmberTypeError, EmberValueError, ShapeError
from ..multi import where
from ..tensor_type import Tensor
from ..variable import Var
from . import act_fns, ops
from .module import Module

__all__ = [
    "CELU", "GLU", "Hardshrink", "Hardtanh", "LogSigmoid", "PReLU", "ReLU6", "Softmin", "Softshrink", "Softsign",
    "Threshold", "celu", "glu", "hardshrink", "hardtanh", "logsigmoid", "prelu", "relu6", "softmin", "softshrink",
    "softsign", "threshold",
]


def _float(x, op):
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor, got {type(x).__name__}")
    if not x.dtype.is_float:
        raise DTypeError(f"[{op}] expected a float tensor, got {x.dtype.name}")


def hardtanh(x, min_val=-1.0, max_val=1.0, inplace=False):
    """``clamp(x, min_val, max_val)``, as ``torch.nn.functional.hardtanh``; the gradient is 1 strictly
    inside the interval and 0 at and beyond its ends, as torch's.

    Args:
        x: a float tensor.
        min_val: the lower end.
        max_val: the upper end, >= min_val.
        inplace: torch's flag, accepted; ember returns a new tensor.

    Raises:
        EmberValueError: max_val < min_val.
    """
    return _hardtanh(x, min_val, max_val, "hardtanh")


def _hardtanh(x, min_val, max_val, op):
    _float(x, op)
    lo, hi = float_arg(min_val, op, "min_val"), float_arg(max_val, op, "max_val")
    if hi < lo:
        raise EmberValueError(f"[{op}] max_val {hi} must be >= min_val {lo}")
    inside = x.gt(lo) & x.lt(hi)
    return where(inside, x, x.detach().clamp(lo, hi))


def relu6(x, inplace=False):
    """``min(max(x, 0), 6)``, as ``torch.nn.functional.relu6`` (``hardtanh(x, 0, 6)``).

    Args:
        x: a float tensor.
        inplace: torch's flag, accepted; ember returns a new tensor.
    """
    return _hardtanh(x, 0.0, 6.0, "relu6")


def softsign(x):
    """``x / (1 + |x|)``, as ``torch.nn.functional.softsign``."""
    _float(x, "softsign")
    return x / (x.abs() + 1.0)


def _lambd(lambd, op):
    v = float_arg(lambd, op, "lambd")
    if not v >= 0:
        raise EmberValueError(f"[{op}] lambd must be >= 0, got {v}")
    return v


def softshrink(x, lambd=0.5):
    """``x - lambd`` above lambd, ``x + lambd`` below -lambd, 0 between, as
    ``torch.nn.functional.softshrink``.

    Raises:
        EmberValueError: lambd < 0.
    """
    _float(x, "softshrink")
    lam = _lambd(lambd, "softshrink")
    zero = full((), 0.0, dtype=x.dtype, device=x.device)
    return where(x.gt(lam), x - lam, where(x.lt(-lam), x + lam, zero))


def hardshrink(x, lambd=0.5):
    """``x`` where ``|x| > lambd``, else 0, as ``torch.nn.functional.hardshrink``.

    Raises:
        EmberValueError: lambd < 0.
    """
    _float(x, "hardshrink")
    lam = _lambd(lambd, "hardshrink")
    zero = full((), 0.0, dtype=x.dtype, device=x.device)
    return where(x.gt(lam) | x.lt(-lam), x, zero)


def celu(x, alpha=1.0, inplace=False):
    """``x`` for x > 0, ``alpha * (exp(x / alpha) - 1)`` otherwise, as ``torch.nn.functional.celu``
    (``alpha * elu(x / alpha)``: the fused elu kernel).

    Args:
        x: a float tensor.
        alpha: the scale, not 0.
        inplace: torch's flag, accepted; ember returns a new tensor.

    Raises:
        EmberValueError: alpha == 0.
    """
    _float(x, "celu")
    a = float_arg(alpha, "celu", "alpha")
    if a == 0.0:
        raise EmberValueError("[celu] alpha must not be 0 (x / alpha)")
    return act_fns.elu(x * (1.0 / a), 1.0) * a


def logsigmoid(x):
    """``log(sigmoid(x)) = -softplus(-x)``, as ``torch.nn.functional.logsigmoid``, through the stable
    fused softplus (no overflow for large ``|x|``)."""
    _float(x, "logsigmoid")
    return -act_fns.softplus_stable(-x)


def prelu(x, weight):
    """``x`` for x > 0, ``weight * x`` otherwise, as ``torch.nn.functional.prelu``: ``weight`` has one
    element, or one per channel (dim 1 of x; dim 0 of a 1-D x).

    Raises:
        ShapeError: weight's size is neither 1 nor the channel count.
    """
    _float(x, "prelu")
    if not isinstance(weight, Tensor):
        raise EmberTypeError(f"[prelu] expected a Tensor weight, got {type(weight).__name__}")
    n = weight.numel()
    if n != 1:
        ch = 1 if x.ndim >= 2 else 0
        if x.ndim == 0 or weight.ndim != 1 or x.shape[ch] != n:
            raise ShapeError(f"[prelu] weight of shape {weight.shape} needs one element or one per channel of "
                             f"an input of shape {x.shape}")
        w = weight.reshape(n, *([1] * (x.ndim - ch - 1)))
    else:
        w = weight.reshape(())
    return where(x.gt(0.0), x, x * w)


def glu(x, dim=-1):
    """``a * sigmoid(b)`` where a, b are the halves of x along dim, as ``torch.nn.functional.glu``.

    Raises:
        ShapeError: dim's size is odd (or x is 0-d).
    """
    _float(x, "glu")
    if x.ndim == 0:
        raise ShapeError("[glu] expected at least 1 dim, got a scalar")
    d = dim_arg(int_arg(dim, "glu", "dim"), x.ndim, "glu")
    if x.shape[d] % 2:
        raise ShapeError(f"[glu] halving dim {dim} needs an even size, got {x.shape[d]}")
    h = x.shape[d] // 2
    return x.narrow(d, 0, h) * ops.sigmoid(x.narrow(d, h, h))


def _implicitdim_arg(ndim):
    # torch's legacy choice when no dim is given
    return 0 if ndim in (0, 1, 3) else 1


def softmin(x, dim=None, dtype=None):
    """``softmax(-x, dim)``, as ``torch.nn.functional.softmin``.

    Args:
        x: a float tensor.
        dim: the dim to normalise over (None: torch's implicit choice, with a warning).
        dtype: cast x to this dtype first.
    """
    _float(x, "softmin")
    if dtype is not None:
        x = x.to_dtype(dtype)
    if dim is None:
        warnings.warn("[softmin] implicit dim is deprecated; pass dim", UserWarning, stacklevel=2)
        dim = _implicitdim_arg(x.ndim)
    return ops.softmax(-x, dim)


def threshold(x, threshold, value, inplace=False):
    """``x`` where ``x > threshold``, else ``value``, as ``torch.nn.functional.threshold``.

    Args:
        x: a float tensor.
        threshold: the cut.
        value: what replaces x at and below it.
        inplace: torch's flag, accepted; ember returns a new tensor.
    """
    _float(x, "threshold")
    t, v = float_arg(threshold, "threshold", "threshold"), float_arg(value, "threshold", "value")
    return where(x.gt(t), x, full((), v, dtype=x.dtype, device=x.device))


def _inplace(flag):
    return ", inplace=True" if flag else ""


class _Act(Module):
    """A module around one function with fixed keyword arguments (and torch's inplace flag, accepted)."""

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = bool(inplace)

    def forward(self, x):
        """Applies the activation.

        Args:
            x: a float tensor.

        Returns:
            A new tensor, differentiable.
        """
        return self._apply(x)


class ReLU6(_Act):
    """``min(max(x, 0), 6)``, as ``torch.nn.ReLU6``."""

    def _apply(self, x):
        return relu6(x)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Hardtanh(_Act):
    """``clamp(x, min_val, max_val)``, as ``torch.nn.Hardtanh``.

    Args:
        min_val: the lower end.
        max_val: the upper end.
        inplace: torch's flag, accepted; ember returns a new tensor.
    """

    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        super().__init__(inplace)
        self.min_val = float_arg(min_val, "Hardtanh", "min_val")
        self.max_val = float_arg(max_val, "Hardtanh", "max_val")
        if self.max_val < self.min_val:
            raise EmberValueError(f"[Hardtanh] max_val {self.max_val} must be >= min_val {self.min_val}")

    def _apply(self, x):
        return hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}{_inplace(self.inplace)}"


class Softsign(_Act):
    """``x / (1 + |x|)``, as ``torch.nn.Softsign``."""

    def _apply(self, x):
        return softsign(x)


class Softshrink(_Act):
    """Soft shrinkage, as ``torch.nn.Softshrink``.

    Args:
        lambd: the threshold, >= 0.
    """

    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = _lambd(lambd, "Softshrink")

    def _apply(self, x):
        return softshrink(x, self.lambd)

    def extra_repr(self):
        return str(self.lambd)


class Hardshrink(_Act):
    """Hard shrinkage, as ``torch.nn.Hardshrink``.

    Args:
        lambd: the threshold, >= 0.
    """

    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = _lambd(lambd, "Hardshrink")

    def _apply(self, x):
        return hardshrink(x, self.lambd)

    def extra_repr(self):
        return f"{self.lambd}"


class CELU(_Act):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``, as ``torch.nn.CELU``.

    Args:
        alpha: the scale, not 0.
        inplace: torch's flag, accepted; ember returns a new tensor.
    """

    def __init__(self, alpha=1.0, inplace=False):
        super().__init__(inplace)
        self.alpha = float_arg(alpha, "CELU", "alpha")
        if self.alpha == 0.0:
            raise EmberValueError("[CELU] alpha must not be 0")

    def _apply(self, x):
        return celu(x, self.alpha)

    def extra_repr(self):
        return f"alpha={self.alpha}{_inplace(self.inplace)}"


class LogSigmoid(_Act):
    """``log(sigmoid(x))``, as ``torch.nn.LogSigmoid``."""

    def _apply(self, x):
        return logsigmoid(x)


class PReLU(Module):
    """``x`` for x > 0, ``weight * x`` otherwise with a learned weight, as ``torch.nn.PReLU``.

    Args:
        num_parameters: 1 (one slope shared) or the channel count (dim 1 of the input).
        init: the slopes' initial value.
        device: where the weight lives.
        dtype: its dtype (default float32).
    """

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = int_arg(num_parameters, "PReLU", "num_parameters")
        if self.num_parameters < 1:
            raise EmberValueError(f"[PReLU] num_parameters must be positive, got {self.num_parameters}")
        self.init = float_arg(init, "PReLU", "init")
        self.weight = Var(full((self.num_parameters,), self.init, dtype=dtype or "float32", device=device))

    def forward(self, x):
        """Applies the activation with the learned slopes.

        Args:
            x: a float tensor (N, C, ...) or (C,) when num_parameters > 1.

        Returns:
            A new tensor, differentiable in x and the weight.
        """
        return prelu(x, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class GLU(_Act):
    """The gated linear unit, as ``torch.nn.GLU``.

    Args:
        dim: the dim to halve.
    """

    def __init__(self, dim=-1):
        super().__init__()
        self.dim = int_arg(dim, "GLU", "dim")

    def _apply(self, x):
        return glu(x, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmin(_Act):
    """``softmax(-x, dim)``, as ``torch.nn.Softmin``.

    Args:
        dim: the dim to normalise over.
    """

    def __init__(self, dim=None):
        super().__init__()
        self.dim = None if dim is None else int_arg(dim, "Softmin", "dim")

    def _apply(self, x):
        return softmin(x, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Threshold(_Act):
    """``x`` where ``x > threshold``, else ``value``, as ``torch.nn.Threshold``.

    Args:
        threshold: the cut.
        value: what replaces x at and below it.
        inplace: torch's flag, accepted; ember returns a new tensor.
    """

    def __init__(self, threshold, value, inplace=False):
        super().__init__(inplace)
        self.threshold = float_arg(threshold, "Threshold", "threshold")
        self.value = float_arg(value, "Threshold", "value")

    def _apply(self, x):
        return threshold(x, self.threshold, self.value)

    def extra_repr(self):
        return f"threshold={self.threshold}, value={self.value}{_inplace(self.inplace)}"
