"""Activation and regularisation modules: ReLU, GELU, SiLU, Tanh, Sigmoid, ELU, LeakyReLU, Softplus, Mish,
Hardswish, Hardsigmoid, Identity and Dropout, the torch modules a Sequential is built from."""
from __future__ import annotations

from ..args import float_arg
from ..errors import EmberValueError
from . import act_fns, ops
from . import functional as F
from .layers import Module


class ReLU(Module):
    """max(x, 0) elementwise, as ``torch.nn.ReLU``. Calling it takes a tensor and returns a new one.

    Args:
        inplace: torch's flag, accepted and shown in the repr; ember returns a new tensor either way
            (the values are the same).
    """

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = bool(inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""

    def forward(self, x):
        """Applies the activation.

        Args:
            x: a tensor.

        Returns:
            A new tensor of x's shape and dtype, differentiable.

        Raises:
            EmberTypeError: for a non-tensor input.
        """
        ops._check_tensor(x, "ReLU")
        return x.relu()


class _Pointwise(Module):
    """A module around one activation function (of ``act_fns`` or ``ops``) with fixed keyword arguments:
    its one ``forward``, documented once, serves every activation module below."""

    _fn = None

    def _kwargs(self):
        return {}

    def forward(self, x):
        """Applies the activation to ``x`` and returns a new differentiable tensor of its shape and
        dtype; a non-float ``x`` raises DTypeError.

        Args:
            x: the input, a float tensor.
        """
        return type(self)._fn(x, **self._kwargs())

    def extra_repr(self):
        return ", ".join(f"{k}={v}" for k, v in self._kwargs().items())


def _tanh(x):
    ops._check_tensor(x, "Tanh")
    return x.tanh()


class GELU(_Pointwise):
    """GELU as ``torch.nn.GELU``: the exact (erf) x * Phi(x), one fused kernel, or its tanh form.

    Args:
        approximate: "none" (erf, torch's default) or "tanh" (candle's default ``gelu``).

    Raises:
        EmberValueError: for another ``approximate``.
    """

    _fn = staticmethod(act_fns.gelu)

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise EmberValueError(f"[GELU] approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def _kwargs(self):
        return {"approximate": self.approximate}

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class SiLU(_Pointwise):
    """x * sigmoid(x), as ``torch.nn.SiLU``; one fused kernel."""

    _fn = staticmethod(ops.silu)


class Tanh(_Pointwise):
    """tanh elementwise, as ``torch.nn.Tanh``."""

    _fn = staticmethod(_tanh)


class Sigmoid(_Pointwise):
    """1 / (1 + exp(-x)) elementwise, as ``torch.nn.Sigmoid``; one fused kernel."""

    _fn = staticmethod(ops.sigmoid)


class Identity(Module):
    """Returns its input unchanged, as ``torch.nn.Identity`` (extra constructor arguments are ignored)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        """Returns its input.

        Args:
            x: anything.

        Returns:
            x itself.
        """
        return x


class Dropout(Module):
    """Zeroes each element with probability p while training and scales the rest by 1 / (1 - p), as
    ``torch.nn.Dropout``; in eval mode (``model.eval()``) it returns its input. The mask comes from
    ``em.rand``, so ``em.manual_seed`` makes it reproducible.

    Args:
        p: the drop probability, in [0, 1].
        inplace: torch's flag, accepted and shown in the repr; ember returns a new tensor either way.

    Raises:
        EmberValueError: for p outside [0, 1].
    """

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        self.inplace = bool(inplace)
        self.p = float_arg(p, "Dropout", "p")
        if not 0.0 <= self.p <= 1.0:
            raise EmberValueError(f"[Dropout] p must be in [0, 1], got {self.p}")

    def forward(self, x):
        """Applies dropout when training.

        Args:
            x: a float tensor.

        Returns:
            A new tensor with dropped elements zeroed and the rest scaled, or x itself in eval mode.

        Raises:
            DTypeError: for a non-float tensor.
        """
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout2d(Dropout):
    """Zeroes whole channels with probability p while training and scales the rest by 1 / (1 - p), as
    ``torch.nn.Dropout2d`` (``F.dropout2d``): input (N, C, H, W) or (C, H, W).

    Args:
        p: the drop probability, in [0, 1].
        inplace: torch's flag, accepted and shown in the repr; ember returns a new tensor either way.

    Raises:
        EmberValueError: for p outside [0, 1].
    """

    def forward(self, x):
        """Applies channel dropout when training.

        Args:
            x: a float tensor (N, C, H, W) or (C, H, W).

        Returns:
            A new tensor with dropped channels zeroed and the rest scaled, or x itself in eval mode.

        Raises:
            ShapeError: for another rank.
        """
        return F.dropout2d(x, self.p, self.training)


class _FloatParams(_Pointwise):
    """A _Pointwise module whose function takes float parameters: the module holds them as attributes named
    in ``_floats`` (torch's names), passed to ``_fn`` as keyword arguments on each call."""

    _floats = ()

    def _init_floats(self, op, *values):
        """Module.__init__, then each of ``_floats`` from ``values`` in order, checked by float_arg under [op]."""
        super().__init__()
        for name, v in zip(self._floats, values):
            setattr(self, name, float_arg(v, op, name))

    def _kwargs(self):
        return {name: getattr(self, name) for name in self._floats}


class ELU(_FloatParams):
    """``x`` for x > 0, ``alpha * (exp(x) - 1)`` otherwise, as ``torch.nn.ELU``.

    Args:
        alpha: the scale of the negative part.
    """

    _fn = staticmethod(act_fns.elu)
    _floats = ("alpha",)

    def __init__(self, alpha=1.0):
        self._init_floats("ELU", alpha)


class LeakyReLU(_FloatParams):
    """``x`` for x > 0, ``negative_slope * x`` otherwise, as ``torch.nn.LeakyReLU``.

    Args:
        negative_slope: the slope of the negative part.
    """

    _fn = staticmethod(act_fns.leaky_relu)
    _floats = ("negative_slope",)

    def __init__(self, negative_slope=0.01):
        self._init_floats("LeakyReLU", negative_slope)


class Softplus(_FloatParams):
    """``log(1 + exp(beta x)) / beta``, linear above ``threshold``, as ``torch.nn.Softplus``.

    Args:
        beta: the sharpness (not 0).
        threshold: where ``beta * x`` exceeds it the result is ``x``.

    Raises:
        EmberValueError: for beta == 0.
    """

    _fn = staticmethod(act_fns.softplus)
    _floats = ("beta", "threshold")

    def __init__(self, beta=1.0, threshold=20.0):
        self._init_floats("Softplus", beta, threshold)
        if self.beta == 0.0:
            raise EmberValueError("[Softplus] beta must not be 0")


class Mish(_Pointwise):
    """``x * tanh(softplus(x))``, as ``torch.nn.Mish``."""

    _fn = staticmethod(act_fns.mish)


class Hardswish(_Pointwise):
    """``x * clamp(x + 3, 0, 6) / 6``, as ``torch.nn.Hardswish``."""

    _fn = staticmethod(act_fns.hardswish)


class Hardsigmoid(_Pointwise):
    """``clamp(x + 3, 0, 6) / 6``, as ``torch.nn.Hardsigmoid``."""

    _fn = staticmethod(act_fns.hardsigmoid)
