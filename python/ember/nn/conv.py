"""Convolutions: unfold / fold (windows as columns, and back), conv1d / conv2d and their transposes (one
kernel per direction: forward, input gradient, weight gradient; each a GEMM over column tiles built in
cache), with the Conv*/ConvTranspose* layers."""
from __future__ import annotations

import math
import numbers

from .. import _C
from ..backprop import needs_grad
from ..custom_op import CustomOp1, CustomOp2, CustomOp3
from ..dtypes import to_device, to_dtype
from ..errors import DeviceError, DTypeError, EmberValueError, ShapeError
from ..tensor_type import Tensor
from .layers import Module, _uniform

__all__ = [
    "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "conv1d", "conv2d", "conv_transpose1d",
    "conv_transpose2d", "fold", "unfold",
]


def _pair(v, op, what, lo):
    """An int or a pair of ints, each at least ``lo``, as a 2-tuple."""
    vals = tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    if len(vals) != 2 or not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in vals):
        raise DTypeError(f"[{op}] {what} must be an int or a pair of ints, got {v!r}")
    if any(x < lo for x in vals):
        raise EmberValueError(f"[{op}] {what} must be at least {lo}, got {v!r}")
    return tuple(int(x) for x in vals)


def _out_size(n, k, s, p_before, p_after, d, op):
    size = (n + p_before + p_after - d * (k - 1) - 1) // s + 1
    if size < 1:
        raise ShapeError(f"[{op}] the kernel {k} with dilation {d} does not fit an input of size {n} with "
                         f"padding ({p_before}, {p_after})")
    return size


def _check_geom(geom, out_shape, op):
    """Every size the kernels get, and the output's element count, must fit an int64: a dilation or
    stride near 2**62 would otherwise overflow the binding's arguments (a bare TypeError)."""
    count = 1
    for v in out_shape:
        count *= max(v, 1)
    if count >= 2**63 or any(abs(v) >= 2**63 for v in geom):
        raise ShapeError(f"[{op}] output {tuple(out_shape)} (or the kernel's reach) is too large to index with int64")


class _Unfold(CustomOp1):
    """im2col as a differentiable op: its backward is fold with the same geometry."""

    name = "unfold"

    def __init__(self, geom):
        self.geom = geom

    def cpu_fwd(self, storage, layout):
        s, l = _C.im2col(storage, layout, self.geom)
        return s, l.shape

    metal_fwd = cuda_fwd = cpu_fwd  # the binding dispatches on the storage's device

    def bwd(self, arg, res, grad_res):
        return grad_res.apply_op1(_Fold(self.geom))


class _Fold(CustomOp1):
    """col2im as a differentiable op: its backward is unfold with the same geometry."""

    name = "fold"

    def __init__(self, geom):
        self.geom = geom

    def cpu_fwd(self, storage, layout):
        s, l = _C.col2im(storage, layout, self.geom)
        return s, l.shape

    metal_fwd = cuda_fwd = cpu_fwd

    def bwd(self, arg, res, grad_res):
        return grad_res.apply_op1(_Unfold(self.geom))


class _Conv(CustomOp2):
    """conv2d(x, w) as one kernel; its backward is the two other directions (themselves differentiable)."""

    name = "conv2d"

    def __init__(self, geom, groups):
        self.geom, self.groups = geom, groups

    def cpu_fwd(self, xs, xl, ws, wl):
        s, l = _C.conv2d_fwd(xs, xl, ws, wl, None, None, self.geom, self.groups)
        return s, l.shape

    metal_fwd = cuda_fwd = cpu_fwd  # the binding dispatches on the storage's device

    def bwd(self, x, w, res, gy):
        dx = gy.apply_op2(w, _ConvInput(self.geom, self.groups)) if needs_grad(x) else None
        dw = x.apply_op2(gy, _ConvWeight(self.geom, self.groups)) if needs_grad(w) else None
        return dx, dw


class _ConvBias(CustomOp3):
    """conv2d(x, w) + b, the bias added in the kernel while each output tile is in cache."""

    name = "conv2d"

    def __init__(self, geom, groups):
        self.geom, self.groups = geom, groups

    def cpu_fwd(self, xs, xl, ws, wl, bs, bl):
        s, l = _C.conv2d_fwd(xs, xl, ws, wl, bs, bl, self.geom, self.groups)
        return s, l.shape

    metal_fwd = cuda_fwd = cpu_fwd

    def bwd(self, x, w, b, res, gy):
        dx, dw = _Conv.bwd(self, x, w, res, gy)
        return dx, dw, (gy.sum((0, 2, 3)) if needs_grad(b) else None)


class _ConvInput(CustomOp2):
    """dx = conv2d_bwd_input(gy, w): the adjoint of conv2d in x (and conv_transpose2d's forward)."""

    name = "conv2d_bwd_input"

    def __init__(self, geom, groups):
        self.geom, self.groups = geom, groups

    def cpu_fwd(self, gs, gl, ws, wl):
        s, l = _C.conv2d_bwd_input(gs, gl, ws, wl, self.geom, self.groups)
        return s, l.shape

    metal_fwd = cuda_fwd = cpu_fwd

    def bwd(self, gy, w, dx, gdx):
        # bilinear in (gy, w): <gdx, A_w^T gy> = <conv(gdx, w), gy>
        dgy = gdx.apply_op2(w, _Conv(self.geom, self.groups)) if needs_grad(gy) else None
        dw = gdx.apply_op2(gy, _ConvWeight(self.geom, self.groups)) if needs_grad(w) else None
        return dgy, dw


class _ConvWeight(CustomOp2):
    """dw = conv2d_bwd_weight(x, gy): the adjoint of conv2d in w."""

    name = "conv2d_bwd_weight"

    def __init__(self, geom, groups):
        self.geom, self.groups = geom, groups

    def cpu_fwd(self, xs, xl, gs, gl):
        s, l = _C.conv2d_bwd_weight(xs, xl, gs, gl, self.geom, self.groups)
        return s, l.shape

    metal_fwd = cuda_fwd = cpu_fwd

    def bwd(self, x, gy, dw, gdw):
        dx = gy.apply_op2(gdw, _ConvInput(self.geom, self.groups)) if needs_grad(x) else None
        dgy = x.apply_op2(gdw, _Conv(self.geom, self.groups)) if needs_grad(gy) else None
        return dx, dgy


def _check_float(x, op, what):
    if not isinstance(x, Tensor):
        raise DTypeError(f"[{op}] {what} must be a Tensor, got {type(x).__name__}")
    if not x.dtype.is_float:
        raise DTypeError(f"[{op}] {what} must be a float tensor, got {x.dtype.name}")


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """The sliding windows of a batch of images as columns (im2col), torch's ``F.unfold``.

    Args:
        input: (N, C, H, W).
        kernel_size: the window, an int or (kh, kw).
        dilation: the spacing between window elements.
        padding: zeros added on both sides of each spatial dim.
        stride: the step between windows.

    Returns:
        Tensor: (N, C * kh * kw, L) with L the number of windows; differentiable (the backward is
        ``fold``).

    Raises:
        ShapeError: ``input`` is not 4-D, or the window does not fit.
    """
    _check_float(input, "unfold", "input")
    if input.ndim != 4:
        raise ShapeError(f"[unfold] expected input (N, C, H, W), got {input.shape}")
    k, d = _pair(kernel_size, "unfold", "kernel_size", 1), _pair(dilation, "unfold", "dilation", 1)
    p, s = _pair(padding, "unfold", "padding", 0), _pair(stride, "unfold", "stride", 1)
    n, c, h, w = input.shape
    oh = _out_size(h, k[0], s[0], p[0], p[0], d[0], "unfold")
    ow = _out_size(w, k[1], s[1], p[1], p[1], d[1], "unfold")
    return input.apply_op1(_Unfold((n, c, h, w, *k, *s, *p, *d, oh, ow)))


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Sums columns of windows back into images (col2im), torch's ``F.fold``; the adjoint of ``unfold``.

    Args:
        input: (N, C * kh * kw, L), L the number of windows ``output_size`` has.
        output_size: the image size (H, W), or an int.
        kernel_size: the window, an int or (kh, kw).
        dilation: the spacing between window elements.
        padding: the padding the windows were taken with.
        stride: the step between windows.

    Returns:
        Tensor: (N, C, H, W); overlapping windows add up. Differentiable (the backward is ``unfold``).

    Raises:
        ShapeError: the column count or L does not fit the geometry.
    """
    _check_float(input, "fold", "input")
    k, d = _pair(kernel_size, "fold", "kernel_size", 1), _pair(dilation, "fold", "dilation", 1)
    p, s = _pair(padding, "fold", "padding", 0), _pair(stride, "fold", "stride", 1)
    h, w = _pair(output_size, "fold", "output_size", 1)
    if input.ndim != 3 or input.shape[1] % (k[0] * k[1]):
        raise ShapeError(f"[fold] expected input (N, C * {k[0]} * {k[1]}, L), got {input.shape}")
    oh = _out_size(h, k[0], s[0], p[0], p[0], d[0], "fold")
    ow = _out_size(w, k[1], s[1], p[1], p[1], d[1], "fold")
    if input.shape[2] != oh * ow:
        raise ShapeError(f"[fold] expected {oh * ow} windows for output size ({h}, {w}), got {input.shape[2]}")
    n, c = input.shape[0], input.shape[1] // (k[0] * k[1])
    return input.apply_op1(_Fold((n, c, h, w, *k, *s, *p, *d, oh, ow)))


def _conv_padding(padding, k, d, s, op):
    """(before, after) per spatial dim for an int, a pair, "valid" or "same" (extra on the after side)."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0), (0, 0))
        if padding == "same":
            if s != (1, 1):
                raise EmberValueError(f"[{op}] padding='same' needs stride 1, got stride {s}")
            tot = [d[i] * (k[i] - 1) for i in range(2)]
            return tuple((t // 2, t - t // 2) for t in tot)
        raise EmberValueError(f"[{op}] padding must be an int, a pair, 'valid' or 'same', got {padding!r}")
    p = _pair(padding, op, "padding", 0)
    return ((p[0], p[0]), (p[1], p[1]))


def _check_conv_args(x, weight, bias, groups, op, transposed):
    _check_float(x, op, "input")
    _check_float(weight, op, "weight")
    if weight.dtype is not x.dtype:
        raise DTypeError(f"[{op}] weight has dtype {weight.dtype.name}, input {x.dtype.name}")
    if weight.device != x.device:
        raise DeviceError(f"[{op}] weight is on {weight.device}, input on {x.device}")
    if not isinstance(groups, numbers.Integral) or isinstance(groups, bool) or groups < 1:
        raise EmberValueError(f"[{op}] groups must be a positive int, got {groups!r}")
    c_in = x.shape[1]
    if c_in % groups or weight.shape[0] % groups:
        raise ShapeError(f"[{op}] groups {groups} must divide the input channels {c_in} and the weight's "
                         f"first dim {weight.shape[0]}")
    if transposed:
        if weight.shape[0] != c_in:
            raise ShapeError(f"[{op}] weight {weight.shape} expects {weight.shape[0]} input channels, got {c_in}")
        c_out = weight.shape[1] * groups
    else:
        if weight.shape[1] * groups != c_in:
            raise ShapeError(f"[{op}] weight {weight.shape} with groups {groups} expects "
                             f"{weight.shape[1] * groups} input channels, got {c_in}")
        c_out = weight.shape[0]
    if bias is not None:
        _check_float(bias, op, "bias")
        if bias.shape != (c_out,) or bias.dtype is not x.dtype:
            raise ShapeError(f"[{op}] expected bias of shape ({c_out},) and dtype {x.dtype.name}, got "
                             f"{bias.shape} {bias.dtype.name}")
    return c_out


def _batched(x, spatial, op):
    """(x as N, C, *spatial; whether a batch dim was added)."""
    if not isinstance(x, Tensor):
        raise DTypeError(f"[{op}] input must be a Tensor, got {type(x).__name__}")
    if x.ndim == spatial + 1:
        return x.unsqueeze(0), True
    if x.ndim != spatial + 2:
        raise ShapeError(f"[{op}] expected input (N, C, {', '.join('HW'[-spatial:])}) or without N, got {x.shape}")
    return x, False


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """A 2-D convolution (cross-correlation, as torch's ``F.conv2d``), one fused kernel per direction.

    Args:
        input: (N, C_in, H, W) or (C_in, H, W); any strides.
        weight: (C_out, C_in / groups, kh, kw).
        bias: (C_out,) or None.
        stride: an int or (sh, sw).
        padding: an int, (ph, pw), "valid" or "same" (stride 1; the odd extra zero goes after).
        dilation: an int or (dh, dw).
        groups: input and output channels split into this many independent groups.

    Returns:
        Tensor: (N, C_out, OH, OW); differentiable with respect to input, weight and bias.

    Raises:
        ShapeError: the shapes do not fit together.
        DTypeError: non-float or mixed dtypes.
    """
    x, added = _batched(input, 2, "conv2d")
    _check_float(weight, "conv2d", "weight")
    if weight.ndim != 4:
        raise ShapeError(f"[conv2d] expected weight (C_out, C_in / groups, kh, kw), got {weight.shape}")
    _check_conv_args(x, weight, bias, groups, "conv2d", transposed=False)
    k, d = (weight.shape[2], weight.shape[3]), _pair(dilation, "conv2d", "dilation", 1)
    s = _pair(stride, "conv2d", "stride", 1)
    (pt, pb), (pl, pr) = _conv_padding(padding, k, d, s, "conv2d")
    n, c, h, w = x.shape
    oh = _out_size(h, k[0], s[0], pt, pb, d[0], "conv2d")
    ow = _out_size(w, k[1], s[1], pl, pr, d[1], "conv2d")
    geom = (n, c, h, w, *k, *s, pt, pl, *d, oh, ow)
    _check_geom(geom + (pb, pr), (n, weight.shape[0], oh, ow), "conv2d")
    if bias is None:
        out = x.apply_op2(weight, _Conv(geom, groups))
    else:
        out = x.apply_op3(weight, bias, _ConvBias(geom, groups))
    return out.squeeze(0) if added else out


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """A 2-D transposed convolution (the adjoint of ``conv2d``), torch's ``F.conv_transpose2d``.

    Args:
        input: (N, C_in, H, W) or (C_in, H, W).
        weight: (C_in, C_out / groups, kh, kw).
        bias: (C_out,) or None.
        stride: an int or (sh, sw).
        padding: an int or (ph, pw): removed from both sides of the output.
        output_padding: an int or a pair added to the output's after side (smaller than stride or
            dilation), to pick among the sizes a strided convolution maps to one.
        groups: independent channel groups.
        dilation: an int or (dh, dw).

    Returns:
        Tensor: (N, C_out, (H - 1) * sh - 2 ph + dh (kh - 1) + output_padding + 1, ...); differentiable
        with respect to input, weight and bias.

    Raises:
        ShapeError: the shapes do not fit together.
        DTypeError: non-float or mixed dtypes.
    """
    op = "conv_transpose2d"
    x, added = _batched(input, 2, op)
    _check_float(weight, op, "weight")
    if weight.ndim != 4:
        raise ShapeError(f"[{op}] expected weight (C_in, C_out / groups, kh, kw), got {weight.shape}")
    c_out = _check_conv_args(x, weight, bias, groups, op, transposed=True)
    k, d = (weight.shape[2], weight.shape[3]), _pair(dilation, op, "dilation", 1)
    s, p = _pair(stride, op, "stride", 1), _pair(padding, op, "padding", 0)
    op_ = _pair(output_padding, op, "output_padding", 0)
    for i in range(2):
        if op_[i] >= max(s[i], d[i]):
            raise EmberValueError(f"[{op}] output_padding {op_} must be smaller than stride {s} or dilation {d}")
    n, c, h, w = x.shape
    hout = (h - 1) * s[0] - 2 * p[0] + d[0] * (k[0] - 1) + op_[0] + 1
    wout = (w - 1) * s[1] - 2 * p[1] + d[1] * (k[1] - 1) + op_[1] + 1
    if hout < 1 or wout < 1:
        raise ShapeError(f"[{op}] padding {p} leaves no output for input ({h}, {w}) and kernel {k}")
    geom = (n, c_out, hout, wout, *k, *s, *p, *d, h, w)
    _check_geom(geom + (d[0] * (k[0] - 1), d[1] * (k[1] - 1)), (n, c_out, hout, wout), op)
    # The adjoint in x of the conv2d that maps (C_out, hout, wout) to x's (C_in, h, w) with this weight.
    out = x.apply_op2(weight, _ConvInput(geom, groups))
    if bias is not None:
        out = out + bias.reshape(1, c_out, 1, 1)
    return out.squeeze(0) if added else out


def _as_2d(v):
    """A 1-D conv argument as the 2-D one over (1, L)."""
    if isinstance(v, str):
        return v
    v = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    return (1,) + v if len(v) == 1 else v  # a wrong length is reported by the 2-D check


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """A 1-D convolution (torch's ``F.conv1d``): ``conv2d`` over (N, C, 1, L).

    Args:
        input: (N, C_in, L) or (C_in, L).
        weight: (C_out, C_in / groups, k).
        bias: (C_out,) or None.
        stride: an int.
        padding: an int, "valid" or "same".
        dilation: an int.
        groups: independent channel groups.

    Returns:
        Tensor: (N, C_out, L_out); differentiable with respect to input, weight and bias.

    Raises:
        ShapeError: the shapes do not fit together.
    """
    x, added = _batched(input, 1, "conv1d")
    if not isinstance(weight, Tensor) or weight.ndim != 3:
        raise ShapeError(f"[conv1d] expected weight (C_out, C_in / groups, k), got "
                         f"{getattr(weight, 'shape', type(weight).__name__)}")
    pad = padding if isinstance(padding, str) else (0, _as_2d(padding)[-1])
    out = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, _as_2d(stride), pad, _as_2d(dilation), groups)
    out = out.squeeze(2)
    return out.squeeze(0) if added else out


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """A 1-D transposed convolution (torch's ``F.conv_transpose1d``): ``conv_transpose2d`` over (N, C, 1, L).

    Args:
        input: (N, C_in, L) or (C_in, L).
        weight: (C_in, C_out / groups, k).
        bias: (C_out,) or None.
        stride: an int.
        padding: an int.
        output_padding: an int, smaller than stride or dilation.
        groups: independent channel groups.
        dilation: an int.

    Returns:
        Tensor: (N, C_out, (L - 1) * stride - 2 padding + dilation (k - 1) + output_padding + 1).

    Raises:
        ShapeError: the shapes do not fit together.
    """
    x, added = _batched(input, 1, "conv_transpose1d")
    if not isinstance(weight, Tensor) or weight.ndim != 3:
        raise ShapeError(f"[conv_transpose1d] expected weight (C_in, C_out / groups, k), got "
                         f"{getattr(weight, 'shape', type(weight).__name__)}")
    pad = (0, _as_2d(padding)[-1])
    opad = (0, _as_2d(output_padding)[-1])
    out = conv_transpose2d(x.unsqueeze(2), weight.unsqueeze(2), bias, _as_2d(stride), pad, opad, groups,
                           _as_2d(dilation))
    out = out.squeeze(2)
    return out.squeeze(0) if added else out


# ----------------------------------------------------------------------------- layers
class _ConvNd(Module):
    """The parameters of a convolution layer, initialised as torch does (uniform in +-1/sqrt(fan_in))."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                 transposed, dims, dtype, device):
        super().__init__()
        name = type(self).__name__
        for what, v in (("in_channels", in_channels), ("out_channels", out_channels), ("groups", groups)):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1:
                raise EmberValueError(f"[{name}] {what} must be a positive int, got {v!r}")
        if in_channels % groups or out_channels % groups:
            raise ShapeError(f"[{name}] groups {groups} must divide in_channels {in_channels} and out_channels "
                             f"{out_channels}")
        k = _pair(kernel_size, name, "kernel_size", 1) if dims == 2 else (_pair(kernel_size, name, "kernel_size", 1)[0],)
        dtype, device = to_dtype(dtype or "float32"), to_device(device)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, k
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        shape = (in_channels, out_channels // groups, *k) if transposed else (out_channels, in_channels // groups, *k)
        fan_in = shape[1] * math.prod(k)
        bound = 1.0 / math.sqrt(fan_in)
        self.weight = _uniform(shape, bound, dtype, device)
        self.bias = _uniform((out_channels,), bound, dtype, device) if bias else None

    def extra_repr(self):
        """torch's wording: ``3, 8, kernel_size=(3, 3), stride=(1, 1)``, then the non-default arguments."""
        n = len(self.kernel_size)

        def tup(v):
            return v if isinstance(v, str) else tuple(v) if isinstance(v, (tuple, list)) else (v,) * n

        s = f"{self.in_channels}, {self.out_channels}, kernel_size={tup(self.kernel_size)}, stride={tup(self.stride)}"
        if tup(self.padding) != (0,) * n:
            s += f", padding={tup(self.padding)}"
        if tup(self.dilation) != (1,) * n:
            s += f", dilation={tup(self.dilation)}"
        if tup(getattr(self, "output_padding", 0)) != (0,) * n:
            s += f", output_padding={tup(self.output_padding)}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv2d(_ConvNd):
    """A 2-D convolution layer: ``conv2d(x, weight, bias, ...)`` with a learned (C_out, C_in/groups, kh, kw)
    weight."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, dtype=None, device=None):
        """Args:
            in_channels: channels of the input.
            out_channels: channels of the output.
            kernel_size: an int or (kh, kw).
            stride: an int or a pair.
            padding: an int, a pair, "valid" or "same".
            dilation: an int or a pair.
            groups: independent channel groups; must divide both channel counts.
            bias: add a learned bias.
            dtype: the parameters' dtype (default float32).
            device: where the parameters live (default the CPU).
        """
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, False, 2,
                         dtype, device)

    def forward(self, x):
        """The convolution of ``x`` (N, C_in, H, W) with this layer's weight and bias."""
        return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv1d(_ConvNd):
    """A 1-D convolution layer: ``conv1d(x, weight, bias, ...)`` with a learned (C_out, C_in/groups, k) weight."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, dtype=None, device=None):
        """Args:
            in_channels: channels of the input.
            out_channels: channels of the output.
            kernel_size: an int.
            stride: an int.
            padding: an int, "valid" or "same".
            dilation: an int.
            groups: independent channel groups; must divide both channel counts.
            bias: add a learned bias.
            dtype: the parameters' dtype (default float32).
            device: where the parameters live (default the CPU).
        """
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, False, 1,
                         dtype, device)

    def forward(self, x):
        """The convolution of ``x`` (N, C_in, L) with this layer's weight and bias."""
        return conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ConvTranspose2d(_ConvNd):
    """A 2-D transposed convolution layer, with a learned (C_in, C_out/groups, kh, kw) weight."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, dtype=None, device=None):
        """Args:
            in_channels: channels of the input.
            out_channels: channels of the output.
            kernel_size: an int or (kh, kw).
            stride: an int or a pair.
            padding: an int or a pair.
            output_padding: an int or a pair, smaller than stride or dilation.
            groups: independent channel groups.
            bias: add a learned bias.
            dilation: an int or a pair.
            dtype: the parameters' dtype (default float32).
            device: where the parameters live (default the CPU).
        """
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, True, 2,
                         dtype, device)
        self.output_padding = output_padding

    def forward(self, x):
        """The transposed convolution of ``x`` (N, C_in, H, W)."""
        return conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                self.groups, self.dilation)


class ConvTranspose1d(_ConvNd):
    """A 1-D transposed convolution layer, with a learned (C_in, C_out/groups, k) weight."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, dtype=None, device=None):
        """Args:
            in_channels: channels of the input.
            out_channels: channels of the output.
            kernel_size: an int.
            stride: an int.
            padding: an int.
            output_padding: an int, smaller than stride or dilation.
            groups: independent channel groups.
            bias: add a learned bias.
            dilation: an int.
            dtype: the parameters' dtype (default float32).
            device: where the parameters live (default the CPU).
        """
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, True, 1,
                         dtype, device)
        self.output_padding = output_padding

    def forward(self, x):
        """The transposed convolution of ``x`` (N, C_in, L)."""
        return conv_transpose1d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                self.groups, self.dilation)
