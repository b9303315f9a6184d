"""ember.nn.functional: torch.nn.functional's names for ember's ops (relu, gelu, softmax, one_hot,
dropout, the losses, pooling, interpolate, ...), so that ``import ember.nn.functional as F`` reads like torch."""
from __future__ import annotations

from ..args import bool_arg, float_arg, int_arg
from ..creation import arange, rand, tensor
from ..errors import DTypeError, EmberTypeError, EmberValueError, IndexOutOfRange, ShapeError
from ..movement import pad
from ..tensor_type import Tensor
from .act_fns import elu, gelu, hardsigmoid, hardswish, leaky_relu, mish, softplus
from .act_more import (
    celu,
    glu,
    hardshrink,
    hardtanh,
    logsigmoid,
    prelu,
    relu6,
    softmin,
    softshrink,
    softsign,
    threshold,
)
from .conv import conv1d, conv2d, conv_transpose1d, conv_transpose2d, fold, unfold
from .instance_norm import instance_norm
from .interpolate import interpolate
from .losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from .norm import batch_norm, group_norm
from .ops import layer_norm, log_softmax, rms_norm, sigmoid, silu, softmax
from .pooling import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    avg_pool1d,
    avg_pool2d,
    max_pool1d,
    max_pool2d,
)

__all__ = [
    "instance_norm", "dropout2d",
    "celu", "glu", "hardshrink", "hardtanh", "logsigmoid", "prelu", "relu6", "softmin", "softshrink", "softsign",
    "threshold",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "avg_pool1d", "avg_pool2d", "batch_norm",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "conv1d", "conv2d", "conv_transpose1d",
    "conv_transpose2d", "cross_entropy", "dropout", "elu", "fold", "gelu", "group_norm", "hardsigmoid",
    "hardswish", "huber_loss", "interpolate", "kl_div", "l1_loss", "layer_norm", "leaky_relu", "log_softmax",
    "max_pool1d", "max_pool2d", "mish", "mse_loss", "nll_loss", "one_hot", "pad", "relu", "rms_norm", "sigmoid", "silu",
    "smooth_l1_loss", "softmax", "softplus", "tanh", "unfold",
]


def relu(x):
    """max(x, 0) elementwise, as ``torch.nn.functional.relu``.

    Args:
        x: a tensor.

    Returns:
        A new tensor, differentiable.

    Raises:
        EmberTypeError: for a non-tensor.
    """
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[relu] expected a Tensor, got {type(x).__name__}")
    return x.relu()


def tanh(x):
    """tanh elementwise, as ``torch.nn.functional.tanh``.

    Args:
        x: a float tensor.

    Returns:
        A new tensor, differentiable.

    Raises:
        EmberTypeError: for a non-tensor.
        DTypeError: for an integer tensor.
    """
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[tanh] expected a Tensor, got {type(x).__name__}")
    return x.tanh()


def one_hot(indices, num_classes=-1):
    """One-hot encodings of integer class indices, as ``torch.nn.functional.one_hot``.

    Args:
        indices: an integer tensor (or list / array) of class ids in [0, num_classes).
        num_classes: the number of classes; -1 takes the largest index + 1.

    Returns:
        An int64 tensor of shape ``indices.shape + (num_classes,)``.

    Raises:
        DTypeError: for float indices.
        IndexOutOfRange: for an index outside [0, num_classes).
        EmberValueError: for num_classes < -1, or -1 with no indices.
    """
    ids = indices if isinstance(indices, Tensor) else tensor(indices)
    if ids.dtype.is_float:
        raise DTypeError(f"[one_hot] indices must be an integer tensor, got {ids.dtype.name}")
    n = int_arg(num_classes, "one_hot", "num_classes")
    if n < -1:
        raise EmberValueError(f"[one_hot] num_classes must be -1 or >= 0, got {n}")
    if ids.numel():
        lo, hi = int(ids.min().item()), int(ids.max().item())
        if n == -1:
            n = hi + 1
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise IndexOutOfRange(f"[one_hot] class index {bad} out of range for {n} classes")
    elif n == -1:
        raise EmberValueError("[one_hot] num_classes=-1 needs at least one index to infer the count")
    return ids.unsqueeze(-1).eq(arange(n, device=ids.device)).long()


def _dropout_args(x, p, training, op):
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor, got {type(x).__name__}")
    if not x.dtype.is_float:
        raise DTypeError(f"[{op}] expected a float tensor, got {x.dtype.name}")
    p = float_arg(p, op, "p")
    if not 0.0 <= p <= 1.0:
        raise EmberValueError(f"[{op}] p must be in [0, 1], got {p}")
    return p, bool_arg(training, op, "training")


def dropout(x, p=0.5, training=True, inplace=False, *, generator=None):
    """Zeroes each element with probability p and scales the rest by 1 / (1 - p) when training, as
    ``torch.nn.functional.dropout``; the mask comes from ``em.rand`` (``em.manual_seed`` repeats it).

    Args:
        x: a float tensor.
        p: the drop probability, in [0, 1].
        training: apply dropout (True) or return x unchanged (False).
        inplace: torch's flag, accepted; ember returns a new tensor either way.
        generator: an ``em.Generator`` to draw the mask from instead of the global stream.

    Returns:
        A new tensor (x itself when not training or p == 0), differentiable in x.

    Raises:
        DTypeError: for a non-float tensor.
        EmberValueError: for p outside [0, 1].
    """
    p, training = _dropout_args(x, p, training, "dropout")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = rand(*x.shape, device=x.device, generator=generator).ge(p).to_dtype(x.dtype)
    return x * keep.affine(1.0 / (1.0 - p), 0.0)


def dropout2d(x, p=0.5, training=True, inplace=False, *, generator=None):
    """Zeroes whole channels with probability p and scales the rest by 1 / (1 - p) when training, as
    ``torch.nn.functional.dropout2d``: one draw per (sample, channel) of an (N, C, H, W) input, or per
    channel of an unbatched (C, H, W) one.

    Args:
        x: a float tensor (N, C, H, W) or (C, H, W).
        p: the drop probability, in [0, 1].
        training: apply dropout (True) or return x unchanged (False).
        inplace: torch's flag, accepted; ember returns a new tensor either way.
        generator: an ``em.Generator`` to draw the mask from instead of the global stream.

    Returns:
        A new tensor (x itself when not training or p == 0), differentiable in x.

    Raises:
        ShapeError: x is not 3-D or 4-D.
        DTypeError: for a non-float tensor.
        EmberValueError: for p outside [0, 1].
    """
    p, training = _dropout_args(x, p, training, "dropout2d")
    if x.ndim not in (3, 4):
        raise ShapeError(f"[dropout2d] expected an input (N, C, H, W) or (C, H, W), got shape {x.shape}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    mask_shape = x.shape[:-2] + (1, 1)
    keep = rand(*mask_shape, device=x.device, generator=generator).ge(p).to_dtype(x.dtype)
    return x * keep.affine(1.0 / (1.0 - p), 0.0)
