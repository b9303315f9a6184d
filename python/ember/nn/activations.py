"""Activation and regularisation modules: ReLU, GELU, SiLU, Tanh, Sigmoid, Identity and Dropout, the
torch modules a Sequential is built from."""
from __future__ import annotations

from ..args import float_arg
from ..errors import EmberValueError
from . import functional as F
from . import ops
from .layers import Module


class ReLU(Module):
    """max(x, 0) elementwise, as ``torch.nn.ReLU``. Calling it takes a tensor and returns a new one."""

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


class GELU(Module):
    """The exact (erf) GELU, x * Phi(x), as ``torch.nn.GELU()``; one fused kernel."""

    def forward(self, x):
        """Applies the activation.

        Args:
            x: a float tensor.

        Returns:
            A new tensor of x's shape and dtype, differentiable.

        Raises:
            DTypeError: for a non-float tensor.
        """
        return ops.gelu(x)


class SiLU(Module):
    """x * sigmoid(x), as ``torch.nn.SiLU``; one fused kernel."""

    def forward(self, x):
        """Applies the activation.

        Args:
            x: a float tensor.

        Returns:
            A new tensor of x's shape and dtype, differentiable.

        Raises:
            DTypeError: for a non-float tensor.
        """
        return ops.silu(x)


class Tanh(Module):
    """tanh elementwise, as ``torch.nn.Tanh``."""

    def forward(self, x):
        """Applies the activation.

        Args:
            x: a float tensor.

        Returns:
            A new tensor of x's shape and dtype, differentiable.

        Raises:
            DTypeError: for a non-float tensor.
        """
        ops._check_tensor(x, "Tanh")
        return x.tanh()


class Sigmoid(Module):
    """1 / (1 + exp(-x)) elementwise, as ``torch.nn.Sigmoid``; one fused kernel."""

    def forward(self, x):
        """Applies the activation.

        Args:
            x: a float tensor.

        Returns:
            A new tensor of x's shape and dtype, differentiable.

        Raises:
            DTypeError: for a non-float tensor.
        """
        return ops.sigmoid(x)


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

    Raises:
        EmberValueError: for p outside [0, 1].
    """

    def __init__(self, p=0.5):
        super().__init__()
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
        return f"p={self.p}"
