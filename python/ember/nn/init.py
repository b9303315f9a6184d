"""nn.init: torch's parameter initialisers (uniform, normal, xavier, kaiming, trunc_normal, orthogonal, ...),
written in place into Vars (the storage's version bumps), drawn from em.manual_seed's stream or a Generator."""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from .. import _C
from ..args import float_arg
from ..backprop import no_grad
from ..creation import eye as _eye
from ..creation import full as _full
from ..creation import rand, randn
from ..creation import tensor as _tensor
from ..errors import DTypeError, EmberTypeError, EmberValueError, ShapeError
from ..multi import where
from ..tensor_type import Tensor

__all__ = [
    "calculate_gain", "constant_", "eye_", "kaiming_normal_", "kaiming_uniform_", "normal_", "ones_",
    "orthogonal_", "trunc_normal_", "uniform_", "xavier_normal_", "xavier_uniform_", "zeros_",
]


def _target(t, op, need_float=True):
    if not isinstance(t, Tensor):
        raise EmberTypeError(f"[{op}] expected a tensor (a Var) to fill, got {type(t).__name__}")
    if need_float and not t.dtype.is_float:
        raise DTypeError(f"[{op}] fills float tensors, got {t.dtype.name}")


def _write(t, values, op):
    """Copies values into t's own storage (in place: a Var stays the same object; the storage's
    version bumps, so a graph that saved t notices)."""
    with no_grad():
        v = values.detach().to_dtype(t.dtype).to_device(t.device)
        if v.shape != t.shape:
            v = v.reshape(t.shape)
        _C.copy_into(v._storage, v._layout, t._storage, t._layout, op)
    return t


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity, as ``torch.nn.init.calculate_gain``: 1 for linear,
    the convolutions and sigmoid, 5/3 for tanh, sqrt(2) for relu, sqrt(2 / (1 + slope^2)) for
    leaky_relu (slope ``param``, default 0.01), 3/4 for selu.

    Raises:
        EmberValueError: an unknown nonlinearity or a bad leaky_relu slope.
    """
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
    if nonlinearity in linear or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, numbers.Real) and not isinstance(param, bool):
            slope = param
        else:
            raise EmberValueError(f"[calculate_gain] negative_slope {param!r} is not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise EmberValueError(f"[calculate_gain] unsupported nonlinearity {nonlinearity!r}")


def _calculate_fan_in_and_fan_out(t):
    """(fan_in, fan_out) of a weight, torch's rule: dim 1 times the receptive field, dim 0 times it."""
    shape = t.shape if isinstance(t, Tensor) else tuple(t)
    if len(shape) < 2:
        raise ShapeError(f"[init] fan in and fan out need a tensor of at least 2 dims, got shape {shape}")
    rf = math.prod(shape[2:]) if len(shape) > 2 else 1
    return shape[1] * rf, shape[0] * rf


def _fan(t, mode, op):
    if mode not in ("fan_in", "fan_out"):
        raise EmberValueError(f"[{op}] mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(t)
    return fan_in if mode == "fan_in" else fan_out


def _draw_dtype(t):
    return t.dtype if t.dtype.name in ("float32", "float64") else "float32"


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fills ``tensor`` in place with U(a, b) draws; returns it.

    Args:
        tensor: a float tensor (usually a Var).
        a: the lower bound.
        b: the upper bound.
        generator: an ``em.Generator`` (default: the global stream of ``em.manual_seed``).
    """
    _target(tensor, "uniform_")
    a, b = float_arg(a, "uniform_", "a"), float_arg(b, "uniform_", "b")
    if not a <= b:
        raise EmberValueError(f"[uniform_] expects a <= b, got a={a}, b={b}")
    vals = rand(*tensor.shape, dtype=_draw_dtype(tensor), device=tensor.device, lo=a, hi=b, generator=generator)
    return _write(tensor, vals, "uniform_")


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fills ``tensor`` in place with N(mean, std^2) draws; returns it.

    Args:
        tensor: a float tensor.
        mean: the mean.
        std: the standard deviation, >= 0.
        generator: an ``em.Generator`` (default: the global stream).
    """
    _target(tensor, "normal_")
    mean, std = float_arg(mean, "normal_", "mean"), float_arg(std, "normal_", "std")
    if not std >= 0:
        raise EmberValueError(f"[normal_] std must be >= 0, got {std}")
    vals = randn(*tensor.shape, dtype=_draw_dtype(tensor), device=tensor.device, mean=mean, std=std,
                 generator=generator)
    return _write(tensor, vals, "normal_")


def _erfinv(y):
    """erf^-1 of a float tensor in (-1, 1): Giles' single-precision approximation, then two Newton
    steps on ember's erf (composite tensor ops on y's device)."""
    w = -((1.0 - y) * (1.0 + y)).log()
    small = w.lt(5.0)
    ws = w - 2.5
    ps = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
              0.246640727, 1.50140941):
        ps = ps * ws + c
    wl = w.clamp(5.0, None).sqrt() - 3.0
    pl = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
              1.00167406, 2.83297682):
        pl = pl * wl + c
    x = where(small, ps, pl) * y
    for _ in range(2):  # d erf(x)/dx = 2/sqrt(pi) exp(-x^2)
        x = x - (x.erf() - y) / ((-(x * x)).exp() * (2.0 / math.sqrt(math.pi)))
    return x


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Fills ``tensor`` in place with N(mean, std^2) draws truncated to [a, b] (torch's inverse-CDF
    method: uniform draws between the bounds' CDF values, mapped back through erf^-1); returns it.

    Args:
        tensor: a float tensor.
        mean: the mean of the untruncated normal.
        std: its standard deviation.
        a: the lower cut-off.
        b: the upper cut-off.
        generator: an ``em.Generator`` (default: the global stream).

    Raises:
        EmberValueError: a > b or std < 0.
    """
    _target(tensor, "trunc_normal_")
    mean, std = float_arg(mean, "trunc_normal_", "mean"), float_arg(std, "trunc_normal_", "std")
    a, b = float_arg(a, "trunc_normal_", "a"), float_arg(b, "trunc_normal_", "b")
    if not a <= b or not std >= 0:
        raise EmberValueError(f"[trunc_normal_] expects a <= b and std >= 0, got a={a}, b={b}, std={std}")
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("[trunc_normal_] mean is more than 2 std from [a, b]; the values may be incorrect",
                      stacklevel=2)

    def cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    lo, hi = cdf((a - mean) / std) if std else 0.0, cdf((b - mean) / std) if std else 1.0
    with no_grad():
        u = rand(*tensor.shape, dtype="float64" if tensor.dtype.name == "float64" else "float32",
                 device=tensor.device, lo=2 * lo - 1, hi=2 * hi - 1, generator=generator)
        eps = 1e-12 if u.dtype.name == "float64" else 1e-7
        x = _erfinv(u.clamp(-1.0 + eps, 1.0 - eps)) * (std * math.sqrt(2.0)) + mean
        x = x.clamp(a, b)
    return _write(tensor, x, "trunc_normal_")


def constant_(tensor, val):
    """Fills ``tensor`` in place with ``val``; returns it."""
    _target(tensor, "constant_", need_float=False)
    val = float_arg(val, "constant_", "val") if tensor.dtype.is_float else val
    return _write(tensor, _full(tensor.shape, val, dtype=tensor.dtype, device=tensor.device), "constant_")


def zeros_(tensor):
    """Fills ``tensor`` in place with zeros; returns it."""
    return constant_(tensor, 0)


def ones_(tensor):
    """Fills ``tensor`` in place with ones; returns it."""
    return constant_(tensor, 1)


def eye_(tensor):
    """Fills a 2-D ``tensor`` in place with the identity (ones on the main diagonal); returns it.

    Raises:
        ShapeError: the tensor is not 2-D.
    """
    _target(tensor, "eye_", need_float=False)
    if tensor.ndim != 2:
        raise ShapeError(f"[eye_] only 2-D tensors are supported, got shape {tensor.shape}")
    return _write(tensor, _eye(*tensor.shape, dtype=tensor.dtype, device=tensor.device), "eye_")


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """Glorot uniform, in place: U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))``; returns it.

    Raises:
        ShapeError: fewer than 2 dims.
    """
    _target(tensor, "xavier_uniform_")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = float_arg(gain, "xavier_uniform_", "gain") * math.sqrt(2.0 / float(fan_in + fan_out))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """Glorot normal, in place: N(0, std^2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``; returns it.

    Raises:
        ShapeError: fewer than 2 dims.
    """
    _target(tensor, "xavier_normal_")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = float_arg(gain, "xavier_normal_", "gain") * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He uniform, in place: U(-b, b) with ``b = gain(nonlinearity, a) * sqrt(3 / fan)``; returns it.

    Args:
        tensor: a float tensor of at least 2 dims.
        a: the negative slope of the rectifier after this layer (leaky_relu).
        mode: "fan_in" (keeps the forward pass's variance) or "fan_out" (the backward's).
        nonlinearity: a name ``calculate_gain`` knows ("relu", "leaky_relu", ...).
        generator: an ``em.Generator`` (default: the global stream).
    """
    _target(tensor, "kaiming_uniform_")
    if 0 in tensor.shape:
        warnings.warn("[kaiming_uniform_] initializing a zero-element tensor is a no-op", stacklevel=2)
        return tensor
    fan = _fan(tensor, mode, "kaiming_uniform_")
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He normal, in place: N(0, std^2) with ``std = gain(nonlinearity, a) / sqrt(fan)``; returns it.

    Args:
        tensor: a float tensor of at least 2 dims.
        a: the negative slope of the rectifier after this layer (leaky_relu).
        mode: "fan_in" or "fan_out".
        nonlinearity: a name ``calculate_gain`` knows.
        generator: an ``em.Generator`` (default: the global stream).
    """
    _target(tensor, "kaiming_normal_")
    if 0 in tensor.shape:
        warnings.warn("[kaiming_normal_] initializing a zero-element tensor is a no-op", stacklevel=2)
        return tensor
    fan = _fan(tensor, mode, "kaiming_normal_")
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return normal_(tensor, 0.0, std, generator)


def orthogonal_(tensor, gain=1.0, generator=None):
    """Fills ``tensor`` (at least 2-D, seen as rows x the rest) in place with a (semi-)orthogonal
    matrix times ``gain``, torch's recipe: the Q of a QR decomposition of normal draws, its columns'
    signs fixed by R's diagonal (so Q is uniformly distributed). The QR runs in LAPACK through numpy on
    the host; returns the tensor.

    Raises:
        ShapeError: fewer than 2 dims.
    """
    _target(tensor, "orthogonal_")
    if tensor.ndim < 2:
        raise ShapeError(f"[orthogonal_] only tensors with 2 or more dims are supported, got shape {tensor.shape}")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = randn(rows, cols, dtype="float64", device="cpu", generator=generator).numpy()
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    q = q * float_arg(gain, "orthogonal_", "gain")
    return _write(tensor, _tensor(np.ascontiguousarray(q), device="cpu"), "orthogonal_")
