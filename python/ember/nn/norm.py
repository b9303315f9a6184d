"""Normalization layers over channels: group_norm / GroupNorm and batch_norm / BatchNorm1d / BatchNorm2d
(batch statistics while training, running statistics in eval), each one fused kernel forward and one backward."""
from __future__ import annotations

import math

from .. import _C
from ..args import bool_arg, float_arg, int_arg
from ..backprop import needs_grad
from ..creation import full, ones, tensor, zeros
from ..custom_op import CustomOp1, CustomOp3
from ..dtypes import to_device, to_dtype
from ..errors import DeviceError, DTypeError, EmberTypeError, EmberValueError, ShapeError
from ..fused_op import FusedOp
from ..kernel_result import dense
from ..kernel_result import dense_like as _out
from ..tensor_type import Tensor
from ..variable import Var
from .layers import Module

__all__ = ["BatchNorm1d", "BatchNorm2d", "GroupNorm", "batch_norm", "group_norm"]


def _float_input(x, op, min_dim):
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor input, got {type(x).__name__}")
    if not x.dtype.is_float:
        raise DTypeError(f"[{op}] expected a float tensor, got {x.dtype.name}")
    if x.ndim < min_dim:
        raise ShapeError(f"[{op}] expected input (N, C, ...) with at least {min_dim} dims, got {x.shape}")


def _channel_param(p, c, x, op, what):
    """An optional (C,) affine parameter checked against x, as (1, C, 1, ...) for broadcasting."""
    if p is None:
        return None
    if not isinstance(p, Tensor):
        raise EmberTypeError(f"[{op}] {what} must be a Tensor or None, got {type(p).__name__}")
    if p.shape != (c,):
        raise ShapeError(f"[{op}] expected {what} of shape ({c},), got {p.shape}")
    if p.device != x.device:
        raise DeviceError(f"[{op}] {what} is on {p.device}, input on {x.device}")
    if p.dtype is not x.dtype:
        raise DTypeError(f"[{op}] {what} has dtype {p.dtype.name}, input {x.dtype.name}")
    return p.reshape(1, c, *([1] * (x.ndim - 2)))


def _bshape(x):
    """(1, C, 1, ...): a per-channel vector's shape for broadcasting against x."""
    return (1, x.shape[1], *([1] * (x.ndim - 2)))


def _affine(y, x, w, b):
    if w is not None:
        y = y * w.reshape(*_bshape(x))
    return y if b is None else y + b.reshape(*_bshape(x))


class _GroupNormBase(FusedOp):
    """group_norm's declaration: the composite form (create_graph differentiates it) and the saved stats."""

    name = "group_norm"
    saved = "rstd"

    def __init__(self, groups, eps):
        self.groups, self.eps = groups, eps
        self.mean = self.rstd = None

    def composite(self, x, w=None, b=None):
        xg = x.reshape(x.shape[0], self.groups, -1)
        xc = xg - xg.mean(-1, keepdim=True)
        return _affine((xc * ((xc * xc).mean(-1, keepdim=True) + self.eps).rsqrt()).reshape(*x.shape), x, w, b)


class _GroupNormAffine(_GroupNormBase, CustomOp3):
    """group_norm(x, groups, w, b) as one kernel; the backward is one kernel too (dx, dw, db)."""

    def cpu_fwd(self, xs, xl, ws, wl, bs, bl):
        y, self.mean, self.rstd = _C.fused.group_norm_fwd(xs, xl, self.groups, ws, wl, bs, bl, self.eps)
        return y, xl.shape

    def bwd_kernel(self, x, w, b, y, g):
        dxs, dws, dbs = _C.fused.group_norm_bwd(x._storage, x._layout, self.groups, w._storage, w._layout,
                                                self.mean, self.rstd, g._storage, g._layout)
        dx, dw, db = _out(dxs, x.shape, x), _out(dws, w.shape, w), _out(dbs, b.shape, b)
        return (dx if needs_grad(x) else None, dw if needs_grad(w) else None, db if needs_grad(b) else None)


class _GroupNormPlain(_GroupNormBase, CustomOp1):
    """group_norm(x, groups) without affine parameters."""

    def cpu_fwd(self, xs, xl):
        y, self.mean, self.rstd = _C.fused.group_norm_fwd(xs, xl, self.groups, None, None, None, None, self.eps)
        return y, xl.shape

    def bwd_kernel(self, x, y, g):
        dxs, _, _ = _C.fused.group_norm_bwd(x._storage, x._layout, self.groups, None, None, self.mean, self.rstd,
                                            g._storage, g._layout)
        return _out(dxs, x.shape, x)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Group normalization, as ``torch.nn.functional.group_norm``: the channels are split into
    ``num_groups`` groups and each (sample, group) is normalised over its channels and positions with
    the biased variance, then scaled and shifted per channel. One fused kernel does the forward
    (statistics and affine) and one the backward (input, weight and bias gradients); f16/bf16
    accumulate in f32.

    Args:
        input: (N, C, ...) float tensor, any strides.
        num_groups: divides C.
        weight: optional (C,) scale.
        bias: optional (C,) shift.
        eps: added to the variance.

    Returns:
        Tensor: input's shape and dtype; differentiable with respect to input, weight and bias.

    Raises:
        ShapeError: C not divisible by num_groups, or a wrong parameter shape.
        DTypeError: non-float or mismatched dtypes.
        EmberValueError: num_groups < 1, or an eps that is NaN, infinite or negative.
    """
    op = "group_norm"
    _float_input(input, op, 2)
    g = int_arg(num_groups, op, "num_groups")
    eps = float_arg(eps, op, "eps")
    _check_eps(eps, op)
    c = input.shape[1]
    if g < 1:
        raise EmberValueError(f"[{op}] num_groups must be positive, got {g}")
    if c % g:
        raise ShapeError(f"[{op}] num_groups {g} must divide the channels {c}")
    _channel_param(weight, c, input, op, "weight")
    _channel_param(bias, c, input, op, "bias")
    if weight is None and bias is None:
        return input.apply_op1(_GroupNormPlain(g, eps))
    if weight is None:
        weight = full((c,), 1.0, dtype=input.dtype, device=input.device)
    if bias is None:
        bias = full((c,), 0.0, dtype=input.dtype, device=input.device)
    return input.apply_op3(weight, bias, _GroupNormAffine(g, eps))


def _stat(t, c, x, op, what):
    if t is None:
        return None
    if not isinstance(t, Tensor):
        raise EmberTypeError(f"[{op}] {what} must be a Tensor or None, got {type(t).__name__}")
    if t.shape != (c,) or not t.dtype.is_float:
        raise ShapeError(f"[{op}] expected {what} to be a float tensor of shape ({c},), got {t.shape} {t.dtype.name}")
    if t.device != x.device:
        raise DeviceError(f"[{op}] {what} is on {t.device}, input on {x.device}")
    if t.is_variable:  # the kernel reads and writes it outside the graph: its gradient would be silently lost
        raise EmberTypeError(f"[{op}] {what} must be a plain tensor (a buffer), not a Var; pass v.detach() or a "
                             "tensor of its own")
    return t


def _check_eps(eps, op):
    """eps must be a finite number >= 0 (NaN or a negative one makes every output NaN)."""
    if not (eps >= 0 and math.isfinite(eps)):
        raise EmberValueError(f"[{op}] eps must be finite and >= 0, got {eps}")


class _BatchNormBase(FusedOp):
    """batch_norm's declaration: one kernel computes (or reads) the per-channel statistics, normalises, and
    updates the running statistics in place; the composite uses the batch's statistics while training and
    the running ones (as the forward read them) in eval."""

    name = "batch_norm"
    saved = "rstd"

    def __init__(self, rm, rv, training, momentum, eps):
        self.rm, self.rv = rm, rv
        self.training, self.momentum, self.eps = training, momentum, eps
        self.mean = self.rstd = None

    def _fwd(self, xs, xl, ws, wl, bs, bl):
        rm, rv = self.rm, self.rv
        y, self.mean, self.rstd = _C.fused.batch_norm_fwd(
            xs, xl, ws, wl, bs, bl, None if rm is None else rm._storage, None if rm is None else rm._layout,
            None if rv is None else rv._storage, None if rv is None else rv._layout, self.training, self.momentum,
            self.eps)
        self.rm = self.rv = None  # the forward's statistics (self.mean, self.rstd) stand for them from now on
        return y, xl.shape

    def _stats(self, x):
        """The statistics the forward used, as (C,) tensors of the stats dtype."""
        dt = x.dtype if x.dtype.name == "float64" else to_dtype("float32")
        c = x.shape[1]
        return dense(self.mean, (c,), dt, x.device), dense(self.rstd, (c,), dt, x.device)

    def composite(self, x, w=None, b=None):
        dims = (0, *range(2, x.ndim))
        if self.training:
            xc = x - x.mean(dims, keepdim=True)
            r = ((xc * xc).mean(dims, keepdim=True) + self.eps).rsqrt()
        else:  # constants: the running statistics, read by the forward (or still held before it ran)
            mean, rstd = self._stats(x) if self.rstd is not None else (self.rm, (self.rv + self.eps).rsqrt())
            r = rstd.reshape(*_bshape(x)).to_dtype(x.dtype)
            xc = x - mean.reshape(*_bshape(x)).to_dtype(x.dtype)
        return _affine(xc * r, x, w, b)

    def _kernel_grads(self, x, w, g):
        dxs, dws, dbs = _C.fused.batch_norm_bwd(x._storage, x._layout, None if w is None else w._storage,
                                                None if w is None else w._layout, self.mean, self.rstd, g._storage,
                                                g._layout, self.training)
        c = x.shape[1]
        return _out(dxs, x.shape, x), _out(dws, (c,), x), _out(dbs, (c,), x)


class _BatchNormAffine(_BatchNormBase, CustomOp3):
    """batch_norm(x, w, b) as one kernel; the backward is one kernel too (dx, dw, db)."""

    def cpu_fwd(self, xs, xl, ws, wl, bs, bl):
        return self._fwd(xs, xl, ws, wl, bs, bl)

    def bwd_kernel(self, x, w, b, y, g):
        dx, dw, db = self._kernel_grads(x, w, g)
        return (dx if needs_grad(x) else None, dw if needs_grad(w) else None, db if needs_grad(b) else None)


class _BatchNormPlain(_BatchNormBase, CustomOp1):
    """batch_norm(x) without affine parameters."""

    def cpu_fwd(self, xs, xl):
        return self._fwd(xs, xl, None, None, None, None)

    def bwd_kernel(self, x, y, g):
        return self._kernel_grads(x, None, g)[0]


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Batch normalization, as ``torch.nn.functional.batch_norm``: per channel (dim 1) over the batch
    and every position. When ``training`` (or without running statistics) it normalises with the
    batch's mean and biased variance and, if given, updates ``running_mean`` / ``running_var`` in
    place: ``r = (1 - momentum) r + momentum * stat`` with the unbiased variance, as torch; otherwise
    it normalises with the running statistics. One fused kernel does the forward (statistics, running
    update, affine) and one the backward (input, weight and bias gradients); f16/bf16 accumulate in f32.

    Args:
        input: (N, C) or (N, C, ...) float tensor, any strides.
        running_mean: (C,) float tensor (any float dtype) or None; updated in place while training.
        running_var: (C,) float tensor (any float dtype) or None; updated in place while training.
        weight: optional (C,) scale.
        bias: optional (C,) shift.
        training: use the batch statistics (and update the running ones).
        momentum: the running-average factor.
        eps: added to the variance.

    Returns:
        Tensor: input's shape and dtype; differentiable with respect to input, weight and bias.

    Raises:
        ShapeError: wrong parameter shapes.
        DTypeError: non-float or mismatched dtypes.
        ShapeError: a single value per channel while training.
        EmberValueError: only one of the running statistics given, a momentum outside [0, 1] (or NaN), an
            eps that is NaN, infinite or negative, or running statistics that are a broadcast (stride-0)
            view while training.
        EmberTypeError: running statistics that are a Var (they are buffers, written outside the graph).
    """
    op = "batch_norm"
    _float_input(input, op, 2)
    training = bool_arg(training, op, "training")
    momentum = float_arg(momentum, op, "momentum")
    eps = float_arg(eps, op, "eps")
    if not 0.0 <= momentum <= 1.0:  # NaN fails too: a running average weighs its two terms in [0, 1]
        raise EmberValueError(f"[{op}] momentum must be in [0, 1], got {momentum}")
    _check_eps(eps, op)
    c = input.shape[1]
    _channel_param(weight, c, input, op, "weight")
    _channel_param(bias, c, input, op, "bias")
    rm, rv = _stat(running_mean, c, input, op, "running_mean"), _stat(running_var, c, input, op, "running_var")
    if (rm is None) != (rv is None):
        raise EmberValueError(f"[{op}] give both running_mean and running_var, or neither")
    use_batch = training or rm is None
    for t, nm in ((rm, "running_mean"), (rv, "running_var")):
        if use_batch and t is not None and c > 1 and t.stride(0) == 0:  # C channels would update one element
            raise EmberValueError(f"[{op}] {nm} is a broadcast (stride-0) view: the running update needs one "
                                  "element per channel; pass a contiguous tensor")
    if use_batch and input.numel() // max(c, 1) == 1:
        raise ShapeError(f"[{op}] expected more than 1 value per channel when training, got input {input.shape}")
    # Without running statistics the batch's are used, as torch, and nothing is kept.
    args = (rm, rv, use_batch, momentum, eps)
    if weight is None and bias is None:
        return input.apply_op1(_BatchNormPlain(*args))
    if weight is None:
        weight = full((c,), 1.0, dtype=input.dtype, device=input.device)
    if bias is None:
        bias = full((c,), 0.0, dtype=input.dtype, device=input.device)
    return input.apply_op3(weight, bias, _BatchNormAffine(*args))


# ----------------------------------------------------------------------------- modules
class GroupNorm(Module):
    """``group_norm`` as a module, torch's ``nn.GroupNorm`` (weight starts at ones, bias at zeros).

    Args:
        num_groups: the number of channel groups; divides num_channels.
        num_channels: C.
        eps: added to the variance.
        affine: learn a per-channel weight and bias.
        dtype: the parameters' dtype (default float32).
        device: where the parameters live (default the CPU).

    Raises:
        ShapeError: num_groups does not divide num_channels.
    """

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, dtype=None, device=None):
        super().__init__()
        self.num_groups = int_arg(num_groups, "GroupNorm", "num_groups")
        self.num_channels = int_arg(num_channels, "GroupNorm", "num_channels")
        if self.num_groups < 1 or self.num_channels < 1 or self.num_channels % self.num_groups:
            raise ShapeError(f"[GroupNorm] num_groups {self.num_groups} must be positive and divide num_channels "
                             f"{self.num_channels}")
        self.eps, self.affine = float_arg(eps, "GroupNorm", "eps"), bool_arg(affine, "GroupNorm", "affine")
        dtype, device = to_dtype(dtype or "float32"), to_device(device)
        self.weight = Var(ones(self.num_channels, dtype=dtype, device=device)) if self.affine else None
        self.bias = Var(zeros(self.num_channels, dtype=dtype, device=device)) if self.affine else None

    def forward(self, x):
        """Normalises ``x``.

        Args:
            x: (N, C, ...) float tensor.

        Returns:
            The normalised tensor.
        """
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, bias={self.affine}"


class _RunningStatsNorm(Module):
    """The state batch and instance norm layers share: optional affine parameters (ones/zeros) and
    optional running statistics (buffers under torch's names, in ``state_dict``, never in
    ``parameters()``)."""

    _buffer_names = ("running_mean", "running_var", "num_batches_tracked")

    def _init_state(self, num_features, eps, momentum, affine, track_running_stats, dtype, device):
        name = type(self).__name__
        self.num_features = int_arg(num_features, name, "num_features")
        if self.num_features < 1:
            raise ShapeError(f"[{name}] num_features must be positive, got {self.num_features}")
        self.eps = float_arg(eps, name, "eps")
        self.momentum = None if momentum is None else float_arg(momentum, name, "momentum")
        self.affine = bool_arg(affine, name, "affine")
        self.track_running_stats = bool_arg(track_running_stats, name, "track_running_stats")
        dtype, device = to_dtype(dtype or "float32"), to_device(device)
        c = self.num_features
        self.weight = Var(ones(c, dtype=dtype, device=device)) if self.affine else None
        self.bias = Var(zeros(c, dtype=dtype, device=device)) if self.affine else None
        if self.track_running_stats:
            self.running_mean = zeros(c, dtype=dtype, device=device)
            self.running_var = ones(c, dtype=dtype, device=device)
            self.num_batches_tracked = tensor(0, device=device)
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.affine}, track_running_stats={self.track_running_stats}")


class _BatchNorm(_RunningStatsNorm):
    """The state of a batch norm layer: affine parameters and running statistics."""

    _ranks = (2,)

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, dtype=None,
                 device=None):
        super().__init__()
        self._init_state(num_features, eps, momentum, affine, track_running_stats, dtype, device)

    def reset_running_stats(self):
        """Sets the running mean to 0, the running variance to 1 and the batch count to 0."""
        if self.track_running_stats:
            self.running_mean.zero_set()
            self.running_var.fill_(1.0)
            self.num_batches_tracked = tensor(0, device=self.running_mean.device)

    def forward(self, x):
        """Normalises ``x`` with batch statistics (training, or without running statistics) or the
        running ones (eval); training also updates the running statistics.

        Args:
            x: a float tensor of a rank the layer accepts ((N, C) or (N, C, L) for BatchNorm1d,
                (N, C, H, W) for BatchNorm2d).

        Returns:
            The normalised tensor.

        Raises:
            ShapeError: a wrong rank or channel count.
        """
        name = type(self).__name__
        if not isinstance(x, Tensor):
            raise EmberTypeError(f"[{name}] expected a Tensor input, got {type(x).__name__}")
        if x.ndim not in self._ranks or x.shape[1] != self.num_features:
            raise ShapeError(f"[{name}] expected input of rank {' or '.join(map(str, self._ranks))} with "
                             f"{self.num_features} channels in dim 1, got {x.shape}")
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            t = self.num_batches_tracked
            # The count is mirrored in Python so a training step never waits on the device to read it;
            # it is read back only when someone replaced the tensor (load_state_dict).
            known = getattr(self, "_count", None)
            n = (known[1] if known is not None and known[0] is t else int(t.item())) + 1
            self.num_batches_tracked = tensor(n, device=self.running_mean.device)
            self._count = (self.num_batches_tracked, n)
            if self.momentum is None:  # a cumulative moving average
                momentum = 1.0 / n
        use_batch = self.training or not self.track_running_stats
        return batch_norm(x, self.running_mean if self.track_running_stats else None,
                          self.running_var if self.track_running_stats else None, self.weight, self.bias,
                          use_batch, momentum, self.eps)


class BatchNorm1d(_BatchNorm):
    """``batch_norm`` over (N, C) or (N, C, L) as a module, torch's ``nn.BatchNorm1d``.

    Args:
        num_features: C.
        eps: added to the variance.
        momentum: the running-average factor; None for a cumulative average.
        affine: learn a per-channel weight (ones) and bias (zeros).
        track_running_stats: keep running statistics for eval mode.
        dtype: the parameters' dtype (default float32).
        device: where the parameters live (default the CPU).
    """

    _ranks = (2, 3)

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, dtype=None,
                 device=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, dtype, device)


class BatchNorm2d(_BatchNorm):
    """``batch_norm`` over (N, C, H, W) as a module, torch's ``nn.BatchNorm2d``.

    Args:
        num_features: C.
        eps: added to the variance.
        momentum: the running-average factor; None for a cumulative average.
        affine: learn a per-channel weight (ones) and bias (zeros).
        track_running_stats: keep running statistics for eval mode.
        dtype: the parameters' dtype (default float32).
        device: where the parameters live (default the CPU).
    """

    _ranks = (4,)

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, dtype=None,
                 device=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, dtype, device)

