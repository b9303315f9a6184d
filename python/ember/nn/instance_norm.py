"""Instance normalization: instance_norm and InstanceNorm1d/2d, torch's, on the fused group_norm and batch_norm kernels."""
from __future__ import annotations

from .. import _C
from ..args import bool_arg, float_arg
from ..backprop import no_grad
from ..errors import DTypeError, EmberTypeError, EmberValueError, ShapeError
from ..tensor_type import Tensor
from .norm import _RunningStatsNorm, batch_norm, group_norm

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "instance_norm"]


def _update(buf, value):
    """Writes value into a running-statistics buffer in place (callers holding it see the update)."""
    v = value.detach().to_dtype(buf.dtype).to_device(buf.device).contiguous()
    _C.copy_into(v._storage, v._layout, buf._storage, buf._layout, "instance_norm")


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """Instance normalization, as ``torch.nn.functional.instance_norm``: each (sample, channel) of an
    (N, C, ...) input is normalised over its positions with the biased variance (the fused group_norm
    kernel with one group per channel), then scaled and shifted per channel. With
    ``use_input_stats`` and running statistics given, those are updated in place with the batch's mean
    of the instances' means and unbiased variances (torch's rule); without ``use_input_stats`` the
    running statistics normalise instead.

    Args:
        input: (N, C, ...) float tensor with at least one position per instance.
        running_mean: (C,) tensor or None.
        running_var: (C,) tensor or None.
        weight: optional (C,) scale.
        bias: optional (C,) shift.
        use_input_stats: normalise with each instance's own statistics (else the running ones).
        momentum: the running-average factor.
        eps: added to the variance.

    Returns:
        Tensor: input's shape and dtype; differentiable with respect to input, weight and bias.

    Raises:
        ShapeError: fewer than 3 dims, one position per instance while using its statistics, or wrong
            parameter shapes.
        EmberValueError: only one running statistic, or none without use_input_stats.
    """
    op = "instance_norm"
    if not isinstance(input, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor input, got {type(input).__name__}")
    if not input.dtype.is_float:
        raise DTypeError(f"[{op}] expected a float tensor, got {input.dtype.name}")
    if input.ndim < 3:
        raise ShapeError(f"[{op}] expected an input (N, C, ...) with at least one position dim, got {input.shape}")
    use_input_stats = bool_arg(use_input_stats, op, "use_input_stats")
    momentum, eps = float_arg(momentum, op, "momentum"), float_arg(eps, op, "eps")
    if (running_mean is None) != (running_var is None):
        raise EmberValueError(f"[{op}] give both running_mean and running_var, or neither")
    n, c = input.shape[0], input.shape[1]
    if not use_input_stats:
        if running_mean is None:
            raise EmberValueError(f"[{op}] use_input_stats=False needs running_mean and running_var")
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    positions = input.numel() // max(n * c, 1)
    if positions == 1:
        raise ShapeError(f"[{op}] expected more than 1 spatial element when training, got input {input.shape}")
    out = group_norm(input, c, weight, bias, eps) if c else input
    if running_mean is not None:
        for what, t in (("running_mean", running_mean), ("running_var", running_var)):
            if not isinstance(t, Tensor) or t.shape != (c,):
                raise ShapeError(f"[{op}] expected {what} of shape ({c},), got "
                                 f"{t.shape if isinstance(t, Tensor) else type(t).__name__}")
        dims = tuple(range(2, input.ndim))
        with no_grad():
            x = input.detach().to_dtype("float32") if input.dtype.name in ("float16", "bfloat16") else input.detach()
            mean = x.mean(dims).mean(0)
            var = x.var(dims, correction=1).mean(0)
            _update(running_mean, running_mean.to_dtype(mean.dtype) * (1.0 - momentum) + mean * momentum)
            _update(running_var, running_var.to_dtype(var.dtype) * (1.0 - momentum) + var * momentum)
    return out


class _InstanceNorm(_RunningStatsNorm):
    """The state of an instance norm layer: optional affine parameters and optional running statistics."""

    _rank = 3

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False, track_running_stats=False, device=None,
                 dtype=None):
        super().__init__()
        self._init_state(num_features, eps, momentum, affine, track_running_stats, dtype, device)

    def forward(self, x):
        """Normalises each instance of ``x``; training with running statistics also updates them, and
        eval mode with running statistics normalises with those.

        Args:
            x: a batched (N, C, ...) or unbatched (C, ...) float tensor of the layer's rank.

        Returns:
            The normalised tensor, x's shape.

        Raises:
            ShapeError: a wrong rank, or (with affine or running statistics) a wrong channel count.
        """
        name = type(self).__name__
        if not isinstance(x, Tensor):
            raise EmberTypeError(f"[{name}] expected a Tensor input, got {type(x).__name__}")
        if x.ndim not in (self._rank - 1, self._rank):
            raise ShapeError(f"[{name}] expected a {self._rank - 1}-D (unbatched) or {self._rank}-D (batched) input, "
                             f"got shape {x.shape}")
        unbatched = x.ndim == self._rank - 1
        xb = x.unsqueeze(0) if unbatched else x
        if (self.affine or self.track_running_stats) and xb.shape[1] != self.num_features:
            raise ShapeError(f"[{name}] expected {self.num_features} channels, got input of shape {x.shape}")
        use_stats = self.training or not self.track_running_stats
        y = instance_norm(xb, self.running_mean, self.running_var, self.weight, self.bias, use_stats,
                          0.0 if self.momentum is None else self.momentum, self.eps)
        return y.squeeze(0) if unbatched else y


class InstanceNorm1d(_InstanceNorm):
    """``instance_norm`` over (N, C, L) or (C, L) inputs, as ``torch.nn.InstanceNorm1d``.

    Args:
        num_features: C.
        eps: added to the variance.
        momentum: the running-average factor (None: 0, as torch's instance norm takes it).
        affine: learn a per-channel weight (ones) and bias (zeros).
        track_running_stats: keep running statistics (used in eval mode).
        device: where the parameters and buffers live.
        dtype: their dtype (default float32).
    """

    _rank = 3


class InstanceNorm2d(_InstanceNorm):
    """``instance_norm`` over (N, C, H, W) or (C, H, W) inputs, as ``torch.nn.InstanceNorm2d``.

    Args:
        num_features: C.
        eps: added to the variance.
        momentum: the running-average factor (None: 0, as torch's instance norm takes it).
        affine: learn a per-channel weight (ones) and bias (zeros).
        track_running_stats: keep running statistics (used in eval mode).
        device: where the parameters and buffers live.
        dtype: their dtype (default float32).
    """

    _rank = 4
