"""Pooling: max_pool1d/2d (with indices), avg_pool1d/2d and adaptive_avg_pool1d/2d, and their modules.

Each is one C++ kernel per device (``_C.pool2d``, the pool2d family behind the backend trait: threaded
over the (n, c) planes on CPU, a thread per output on Metal); 1-D pools are the h == 1 case. The
backward is its own kernel (``_C.pool2d_bwd``): max adds each output's gradient at its index (torch's
first maximum), the averages spread it over the window. Both are recorded ops, so second order works.
Python checks the arguments with torch's rules and derives the output size.
"""
from __future__ import annotations

import numbers

from .. import _C
from .. import dtypes as _dt
from ..args import bool_arg
from ..backprop import is_grad_enabled, record, tracks
from ..backprop import rule as _rule
from ..errors import DTypeError, EmberTypeError, EmberValueError, ShapeError
from ..kernel_result import from_kernel
from ..tensor_type import Tensor
from .layers import Module

__all__ = [
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AvgPool1d", "AvgPool2d", "MaxPool1d", "MaxPool2d",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "avg_pool1d", "avg_pool2d", "max_pool1d", "max_pool2d",
]

_MAX, _AVG, _ADAPTIVE = 0, 1, 2  # cpp/backend.h's PoolKind


def _ints(v, n, op, what, lo):
    """An int or a sequence of n ints, each at least ``lo``, as an n-tuple."""
    vals = tuple(v) if isinstance(v, (tuple, list)) else (v,) * n
    if len(vals) != n or not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in vals):
        raise EmberTypeError(f"[{op}] {what} must be an int or {n} ints, got {v!r}")
    if any(x < lo for x in vals):
        raise EmberValueError(f"[{op}] {what} must be at least {lo}, got {v!r}")
    return tuple(int(x) for x in vals)


def _input(x, spatial, op):
    """(x as (N, C, *spatial) with a float dtype, whether a batch dim was added)."""
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor input, got {type(x).__name__}")
    if not x.dtype.is_float:
        raise DTypeError(f"[{op}] expected a float tensor, got {x.dtype.name}")
    names = "(N, C, L)" if spatial == 1 else "(N, C, H, W)"
    if x.ndim == spatial + 1:
        x, added = x.unsqueeze(0), True
    elif x.ndim == spatial + 2:
        added = False
    else:
        raise ShapeError(f"[{op}] expected input {names} or without N, got {x.shape}")
    if any(s == 0 for s in x.shape[2:]):
        raise ShapeError(f"[{op}] input {x.shape} has an empty spatial dim")
    return x, added


def _out_len(n, k, s, p, d, ceil_mode, op):
    """torch's pooled length (floor division, as its div_rtn): the last window must start inside the input
    or its left padding, and there must be one."""
    out = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    if out < 1:
        raise ShapeError(f"[{op}] the kernel {k} with dilation {d} does not fit an input of size {n} with padding {p}")
    return out


def _geometry(x, kernel_size, stride, padding, dilation, ceil_mode, op):
    """The 2-D window geometry (k, s, p, d, (oh, ow)) after torch's checks."""
    k = _ints(kernel_size, 2, op, "kernel_size", 1)
    s = k if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0) else _ints(stride, 2, op,
                                                                                                  "stride", 1)
    p = _ints(padding, 2, op, "padding", 0)
    d = _ints(dilation, 2, op, "dilation", 1)
    ceil_mode = bool_arg(ceil_mode, op, "ceil_mode")
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise EmberValueError(f"[{op}] padding {p} must be at most half the kernel size {k}")
    h, w = x.shape[2], x.shape[3]
    out = (_out_len(h, k[0], s[0], p[0], d[0], ceil_mode, op), _out_len(w, k[1], s[1], p[1], d[1], ceil_mode, op))
    return k, s, p, d, out


def _geom(x, k, s, p, d, out, divisor=0, include_pad=True):
    """The kernels' PoolGeom tuple for a 4-D x."""
    n, c, h, w = x.shape
    return (n, c, h, w, k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1], out[0], out[1], divisor, int(include_pad))


def _pool(x, kind, geom, with_indices=False):
    """(pooled x, Max's int64 indices or None); the values are recorded for backward."""
    vs, ids, layout = _C.pool2d(kind, x._storage, x._layout, geom, with_indices)
    idx = None if ids is None else from_kernel(ids, layout, _dt.int64, x._device)
    return record(from_kernel(vs, layout, x._dtype, x._device), "pool2d", (x,), (kind, geom, idx)), idx


def _pool_bwd(g, kind, geom, idx):
    """dx of a pooling from the output's gradient g (recorded: its own gradient is a gather or a pool)."""
    ids = None if idx is None else idx._storage
    il = None if idx is None else idx._layout
    s, layout = _C.pool2d_bwd(kind, g._storage, g._layout, ids, il, geom)
    return record(from_kernel(s, layout, g._dtype, g._device), "pool2d_bwd", (g,), (kind, geom, idx))


@_rule("pool2d", ())
def _pool2d_grad(n, out, g):
    kind, geom, idx = n.saved
    return (_pool_bwd(g, kind, geom, idx),)


@_rule("pool2d_bwd", ())
def _pool2d_bwd_grad(n, out, g):
    kind, geom, idx = n.saved
    if kind != _MAX:  # the averages' backward is linear, its adjoint the forward
        return (_pool(g, kind, geom)[0],)
    b, c, oh, ow = idx.shape
    return (g.reshape(b, c, -1).gather(idx.reshape(b, c, oh * ow), 2).reshape(b, c, oh, ow),)


def _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices, op):
    """max_pool2d over a 4-D x: (values (N, C, oh, ow), flat indices into H * W or None)."""
    k, s, p, d, out = _geometry(x, kernel_size, stride, padding, dilation, ceil_mode, op)
    return_indices = bool_arg(return_indices, op, "return_indices")
    # the indices cost a write per output: made only when returned or needed by the backward
    want = return_indices or (is_grad_enabled() and tracks(x))
    y, idx = _pool(x, _MAX, _geom(x, k, s, p, d, out), want)
    return y, (idx if return_indices else None)


def _squeeze(t, added, dim=None):
    if dim is not None:
        t = t.squeeze(dim)
    return t.squeeze(0) if added else t


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """2-D max pooling, as ``torch.nn.functional.max_pool2d``.

    Args:
        input: (N, C, H, W) or (C, H, W), a float tensor with any strides.
        kernel_size: the window, an int or (kh, kw).
        stride: the step between windows (default: the kernel size).
        padding: implicit -inf padding on both sides, at most half the kernel.
        dilation: the spacing between window taps.
        ceil_mode: round the output size up (a last, partial window) instead of down.
        return_indices: also return where each maximum came from.

    Returns:
        Tensor: (N, C, OH, OW), differentiable (the gradient goes to each window's first maximum in
        row-major order, as torch's; a NaN wins); with ``return_indices`` a pair (values, int64 indices
        into the flattened H * W plane, torch's convention).

    Raises:
        ShapeError: a window that does not fit, or a wrong input rank.
        EmberValueError: a non-positive kernel/stride/dilation, or padding over half the kernel.
        DTypeError: a non-float input, or one the device lacks.
    """
    x, added = _input(input, 2, "max_pool2d")
    y, idx = _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices, "max_pool2d")
    return (_squeeze(y, added), _squeeze(idx, added)) if idx is not None else _squeeze(y, added)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """1-D max pooling, as ``torch.nn.functional.max_pool1d``: ``max_pool2d`` over (N, C, 1, L).

    Args:
        input: (N, C, L) or (C, L), a float tensor.
        kernel_size: the window, an int.
        stride: the step between windows (default: the kernel size).
        padding: implicit -inf padding on both sides, at most half the kernel.
        dilation: the spacing between window taps.
        ceil_mode: round the output length up instead of down.
        return_indices: also return where each maximum came from.

    Returns:
        Tensor: (N, C, L_out), differentiable; with ``return_indices`` a pair (values, int64 indices
        into L).

    Raises:
        ShapeError: a window that does not fit, or a wrong input rank.
        EmberValueError: a bad kernel/stride/padding/dilation.
        DTypeError: a non-float input.
    """
    op = "max_pool1d"
    x, added = _input(input, 1, op)
    k, s = _ints(kernel_size, 1, op, "kernel_size", 1), None if stride is None else _ints(stride, 1, op, "stride", 1)
    p, d = _ints(padding, 1, op, "padding", 0), _ints(dilation, 1, op, "dilation", 1)
    y, idx = _max_pool(x.unsqueeze(2), (1,) + k, None if s is None else (1,) + s, (0,) + p, (1,) + d, ceil_mode,
                       return_indices, op)
    if idx is None:
        return _squeeze(y, added, 2)
    return _squeeze(y, added, 2), _squeeze(idx, added, 2)


def _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, op):
    k, s, p, d, out = _geometry(x, kernel_size, stride, padding, 1, ceil_mode, op)
    count_include_pad = bool_arg(count_include_pad, op, "count_include_pad")
    if divisor_override is not None and (not isinstance(divisor_override, numbers.Integral) or
                                         isinstance(divisor_override, bool) or divisor_override <= 0):
        raise EmberValueError(f"[{op}] divisor_override must be a positive int, got {divisor_override!r}")
    divisor = 0 if divisor_override is None else int(divisor_override)
    return _pool(x, _AVG, _geom(x, k, s, p, d, out, divisor, count_include_pad))[0]


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """2-D average pooling, as ``torch.nn.functional.avg_pool2d``.

    Args:
        input: (N, C, H, W) or (C, H, W), a float tensor with any strides.
        kernel_size: the window, an int or (kh, kw).
        stride: the step between windows (default: the kernel size).
        padding: implicit zero padding on both sides, at most half the kernel.
        ceil_mode: round the output size up (a last, partial window) instead of down.
        count_include_pad: the padding's zeros count in the divisor.
        divisor_override: divide every window sum by this instead.

    Returns:
        Tensor: (N, C, OH, OW), differentiable.

    Raises:
        ShapeError: a window that does not fit, or a wrong input rank.
        EmberValueError: a bad kernel/stride/padding or divisor_override.
        DTypeError: a non-float input.
    """
    x, added = _input(input, 2, "avg_pool2d")
    return _squeeze(_avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                              "avg_pool2d"), added)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """1-D average pooling, as ``torch.nn.functional.avg_pool1d``: ``avg_pool2d`` over (N, C, 1, L).

    Args:
        input: (N, C, L) or (C, L), a float tensor.
        kernel_size: the window, an int.
        stride: the step between windows (default: the kernel size).
        padding: implicit zero padding on both sides, at most half the kernel.
        ceil_mode: round the output length up instead of down.
        count_include_pad: the padding's zeros count in the divisor.

    Returns:
        Tensor: (N, C, L_out), differentiable.

    Raises:
        ShapeError: a window that does not fit, or a wrong input rank.
        EmberValueError: a bad kernel/stride/padding.
        DTypeError: a non-float input.
    """
    op = "avg_pool1d"
    x, added = _input(input, 1, op)
    k, s = _ints(kernel_size, 1, op, "kernel_size", 1), None if stride is None else _ints(stride, 1, op, "stride", 1)
    p = _ints(padding, 1, op, "padding", 0)
    y = _avg_pool(x.unsqueeze(2), (1,) + k, None if s is None else (1,) + s, (0,) + p, ceil_mode, count_include_pad,
                  None, op)
    return _squeeze(y, added, 2)


def _adaptive_sizes(output_size, shape, n, op):
    vals = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,) * n
    if len(vals) != n:
        raise EmberTypeError(f"[{op}] output_size must be an int or {n} ints (None keeps a size), got {output_size!r}")
    vals = tuple(shape[i] if v is None else v for i, v in enumerate(vals))
    return _ints(vals, n, op, "output_size", 1)


def _adaptive(x, out):
    """Adaptive average pooling of a 4-D x to ``out``: the pool kernel's variable windows."""
    return _pool(x, _ADAPTIVE, _geom(x, (1, 1), (1, 1), (0, 0), (1, 1), out))[0]


def adaptive_avg_pool2d(input, output_size):
    """Adaptive 2-D average pooling, as ``torch.nn.functional.adaptive_avg_pool2d``: output cell
    (i, j) averages rows [floor(i H / OH), ceil((i + 1) H / OH)) and likewise for columns.

    Args:
        input: (N, C, H, W) or (C, H, W), a float tensor.
        output_size: (OH, OW) or an int for both; None in the pair keeps that size.

    Returns:
        Tensor: (N, C, OH, OW), differentiable.

    Raises:
        ShapeError: a wrong input rank.
        EmberValueError: a non-positive output size.
        DTypeError: a non-float input.
    """
    op = "adaptive_avg_pool2d"
    x, added = _input(input, 2, op)
    out = _adaptive_sizes(output_size, x.shape[2:], 2, op)
    return _squeeze(_adaptive(x, out), added)


def adaptive_avg_pool1d(input, output_size):
    """Adaptive 1-D average pooling, as ``torch.nn.functional.adaptive_avg_pool1d``.

    Args:
        input: (N, C, L) or (C, L), a float tensor.
        output_size: the output length, an int.

    Returns:
        Tensor: (N, C, output_size), differentiable.

    Raises:
        ShapeError: a wrong input rank.
        EmberValueError: a non-positive output size.
        DTypeError: a non-float input.
    """
    op = "adaptive_avg_pool1d"
    x, added = _input(input, 1, op)
    (o,) = _adaptive_sizes(output_size, x.shape[2:], 1, op)
    return _squeeze(_adaptive(x.unsqueeze(2), (1, o)), added, 2)


# ----------------------------------------------------------------------------- modules
class MaxPool2d(Module):
    """``max_pool2d`` as a module, torch's ``nn.MaxPool2d``.

    Args:
        kernel_size: the window, an int or (kh, kw).
        stride: the step between windows (default: the kernel size).
        padding: implicit -inf padding, at most half the kernel.
        dilation: the spacing between window taps.
        return_indices: forward returns (values, indices).
        ceil_mode: round the output size up.
    """

    _fn = staticmethod(max_pool2d)

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x):
        """Pools ``x``.

        Args:
            x: the input tensor.

        Returns:
            The pooled tensor (and the indices with ``return_indices``).
        """
        return type(self)._fn(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                              self.return_indices)

    def extra_repr(self):
        stride = self.kernel_size if self.stride is None else self.stride  # torch stores the default
        return (f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(MaxPool2d):
    """``max_pool1d`` as a module, torch's ``nn.MaxPool1d``.

    Args:
        kernel_size: the window, an int.
        stride: the step between windows (default: the kernel size).
        padding: implicit -inf padding, at most half the kernel.
        dilation: the spacing between window taps.
        return_indices: forward returns (values, indices).
        ceil_mode: round the output length up.
    """

    _fn = staticmethod(max_pool1d)

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__(kernel_size, stride, padding, dilation, return_indices, ceil_mode)


class AvgPool2d(Module):
    """``avg_pool2d`` as a module, torch's ``nn.AvgPool2d``.

    Args:
        kernel_size: the window, an int or (kh, kw).
        stride: the step between windows (default: the kernel size).
        padding: implicit zero padding, at most half the kernel.
        ceil_mode: round the output size up.
        count_include_pad: the padding's zeros count in the divisor.
        divisor_override: divide every window sum by this instead.
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.ceil_mode = kernel_size, stride, padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, x):
        """Pools ``x``.

        Args:
            x: the input tensor.

        Returns:
            The pooled tensor.
        """
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                          self.divisor_override)

    def extra_repr(self):
        stride = self.kernel_size if self.stride is None else self.stride  # torch stores the default
        return f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}"


class AvgPool1d(Module):
    """``avg_pool1d`` as a module, torch's ``nn.AvgPool1d``.

    Args:
        kernel_size: the window, an int.
        stride: the step between windows (default: the kernel size).
        padding: implicit zero padding, at most half the kernel.
        ceil_mode: round the output length up.
        count_include_pad: the padding's zeros count in the divisor.
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.ceil_mode = kernel_size, stride, padding, ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, x):
        """Pools ``x``.

        Args:
            x: the input tensor.

        Returns:
            The pooled tensor.
        """
        return avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)

    def extra_repr(self):
        def one(v):  # torch's AvgPool1d keeps 1-tuples
            return tuple(v) if isinstance(v, (tuple, list)) else (v,)

        stride = self.kernel_size if self.stride is None else self.stride
        return f"kernel_size={one(self.kernel_size)}, stride={one(stride)}, padding={one(self.padding)}"


class AdaptiveAvgPool2d(Module):
    """``adaptive_avg_pool2d`` as a module, torch's ``nn.AdaptiveAvgPool2d``.

    Args:
        output_size: (OH, OW) or an int; None in the pair keeps that size.
    """

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        """Pools ``x``.

        Args:
            x: the input tensor.

        Returns:
            The pooled tensor.
        """
        return adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(AdaptiveAvgPool2d):
    """``adaptive_avg_pool1d`` as a module, torch's ``nn.AdaptiveAvgPool1d``.

    Args:
        output_size: the output length.
    """

    def __init__(self, output_size):
        super().__init__(output_size)

    def forward(self, x):
        """Pools ``x``.

        Args:
            x: the input tensor.

        Returns:
            The pooled tensor.
        """
        return adaptive_avg_pool1d(x, self.output_size)
