"""Pooling: max_pool1d/2d (with indices), avg_pool1d/2d and adaptive_avg_pool1d/2d, and their modules.

Nothing loops over elements or windows in Python. Max pooling that records a gradient takes every
window as a column of ``unfold`` (im2col, one C++ kernel on every device), then argmax and gather, so
the gradient goes to the first maximum as torch's; without a gradient it is a running maximum over the
kernel's taps, each a strided view. Average pooling is separable: a GEMM with an averaging matrix per
axis (unfold + sum for very wide axes). What depends only on the geometry (masks, divisors,
matrices) is built once per call with numpy.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..args import bool_arg
from ..backprop import is_grad_enabled, tracks
from ..errors import DTypeError, EmberTypeError, EmberValueError, ShapeError
from ..multi import maximum
from ..tensor import Tensor, arange, full, tensor
from .conv import _Unfold
from .layers import Module

__all__ = [
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AvgPool1d", "AvgPool2d", "MaxPool1d", "MaxPool2d",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "avg_pool1d", "avg_pool2d", "max_pool1d", "max_pool2d",
]


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
    """torch's pooled length: the last window must start inside the input or its left padding."""
    span = n + 2 * p - d * (k - 1) - 1
    if span < 0:
        raise ShapeError(f"[{op}] the kernel {k} with dilation {d} does not fit an input of size {n} with padding {p}")
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
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


def _windows(x, k, s, p, d, out):
    """(N, C, kh*kw, oh*ow): every window as a column, zeros where it reaches past the input."""
    n, c, h, w = x.shape
    cols = x.apply_op1(_Unfold((n, c, h, w, *k, *s, *p, *d, *out)))
    return cols.reshape(n, c, k[0] * k[1], out[0] * out[1])


def _inside(n, k, s, p, d, out):
    """(out, k) bool: whether window o's tap j reads an input position (not padding / overflow)."""
    pos = np.arange(out)[:, None] * s - p + np.arange(k)[None, :] * d
    return (pos >= 0) & (pos < n)


def _valid(n_in, n_out, s, p, off):
    """The outputs [lo, hi) whose tap at offset ``off`` reads an input position (not padding)."""
    first, last = p - off, n_in - 1 + p - off  # o * s must lie in [first, last]
    lo = 0 if first <= 0 else -(-first // s)
    hi = 0 if last < 0 else min(n_out, last // s + 1)
    return lo, max(lo, hi)


def _max_by_taps(x, k, s, p, d, out):
    """max_pool2d's values with nothing recorded: a running maximum over the kh * kw taps, each a
    strided view of x written into the outputs it reaches (no column matrix, no padded copy)."""
    n, c, h, w = x.shape
    y, lone, partial = None, False, []
    for ki in range(k[0]):
        ylo, yhi = _valid(h, out[0], s[0], p[0], ki * d[0])
        for kj in range(k[1]):
            xlo, xhi = _valid(w, out[1], s[1], p[1], kj * d[1])
            if ylo == yhi or xlo == xhi:
                continue
            r0, c0 = ylo * s[0] - p[0] + ki * d[0], xlo * s[1] - p[1] + kj * d[1]
            tap = x[:, :, r0 : r0 + (yhi - ylo - 1) * s[0] + 1 : s[0], c0 : c0 + (xhi - xlo - 1) * s[1] + 1 : s[1]]
            if (ylo, yhi, xlo, xhi) == (0, out[0], 0, out[1]):  # reaches every output: one maximum
                y, lone = (tap, True) if y is None else (maximum(y, tap), False)
            else:
                partial.append((ylo, yhi, xlo, xhi, tap))
    if y is None:
        y = full((n, c, *out), float("-inf"), dtype=x.dtype, device=x.device)
    elif lone:
        y = y.copy()  # a lone tap is a view of x: the result owns its storage (and the writes below go there)
    for ylo, yhi, xlo, xhi, tap in partial:  # taps that reach padding for some outputs: write their part
        dst = y.narrow(2, ylo, yhi - ylo).narrow(3, xlo, xhi - xlo)
        dst.slice_set(maximum(dst, tap), 3, 0)
    return y


def _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices, op):
    """max_pool2d over a 4-D x: (values (N, C, oh, ow), flat indices into H * W or None)."""
    k, s, p, d, out = _geometry(x, kernel_size, stride, padding, dilation, ceil_mode, op)
    return_indices = bool_arg(return_indices, op, "return_indices")
    n, c, h, w = x.shape
    if not return_indices and not (is_grad_enabled() and tracks(x)):
        return _max_by_taps(x, k, s, p, d, out), None
    cols = _windows(x, k, s, p, d, out)
    ih, iw = _inside(h, k[0], s[0], p[0], d[0], out[0]), _inside(w, k[1], s[1], p[1], d[1], out[1])
    if not (ih.all() and iw.all()):
        # An additive -inf where a tap falls into padding: im2col reads zeros there, which must never win.
        inside = ih.T[:, None, :, None] & iw.T[None, :, None, :]  # (kh, kw, oh, ow)
        mask = np.where(inside, 0.0, -np.inf).reshape(k[0] * k[1], out[0] * out[1])
        cols = cols + tensor(mask, dtype=x.dtype, device=x.device)
    # The tap of each window's first maximum, and the value gathered there: the gradient goes to that
    # one element, as torch's (a max reduction would split it among ties).
    a = cols.detach().argmax(2)  # (N, C, L)
    y = cols.gather(a.unsqueeze(2), 2).reshape(n, c, *out)
    if not return_indices:
        return y, None
    pos = arange(out[0] * out[1], device=x.device)
    row = a.floor_divide(k[1]) * d[0] + pos.floor_divide(out[1]) * s[0] - p[0]
    col = (a % k[1]) * d[1] + (pos % out[1]) * s[1] - p[1]
    return y, (row * w + col).reshape(n, c, *out)


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
        Tensor: (N, C, OH, OW), differentiable (the gradient goes to each window's maximum; ties share
        it evenly); with ``return_indices`` a pair (values, int64 indices into the flattened H * W
        plane, torch's convention).

    Raises:
        ShapeError: a window that does not fit, or a wrong input rank.
        EmberValueError: a non-positive kernel/stride/dilation, or padding over half the kernel.
        DTypeError: a non-float input.
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


# Up to this size an axis is pooled as a GEMM with a (out, n) averaging matrix: more flops than the
# windows need, but one BLAS call beats writing every window out as a column.
_DENSE_AXIS_MAX = 512


def _axis_matrix(n, k, s, p, o, count_include_pad, override):
    """(o, n): row i holds window i's weight on each input position (the 1 / count of an average)."""
    start = np.arange(o) * s - p
    end = np.minimum(start + k, n + p)  # a ceil_mode window's overflow past the padding never counts
    lo, hi = np.maximum(start, 0), np.minimum(end, n)
    cnt = np.ones(o) if override else (end - start if count_include_pad else hi - lo)
    j = np.arange(n)
    inside = (j[None, :] >= lo[:, None]) & (j[None, :] < hi[:, None])
    return inside / cnt[:, None]


def _apply_axis(x, dim, a):
    """Contracts dim -1 or -2 of x with the (out, n) matrix a (a tensor)."""
    return x @ a.t() if dim == -1 else a @ x


def _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, op):
    k, s, p, d, out = _geometry(x, kernel_size, stride, padding, 1, ceil_mode, op)
    count_include_pad = bool_arg(count_include_pad, op, "count_include_pad")
    if divisor_override is not None and (not isinstance(divisor_override, numbers.Integral) or
                                         isinstance(divisor_override, bool) or divisor_override <= 0):
        raise EmberValueError(f"[{op}] divisor_override must be a positive int, got {divisor_override!r}")
    n, c, h, w = x.shape
    override = divisor_override is not None
    if max(h, w) <= _DENSE_AXIS_MAX:  # separable: average the rows, then the columns, as two GEMMs
        y = x
        for dim, size, i in ((-1, w, 1), (-2, h, 0)):
            if size == 1 and k[i] == 1 and out[i] == 1 and p[i] == 0:
                continue
            a = _axis_matrix(size, k[i], s[i], p[i], out[i], count_include_pad, override)
            y = _apply_axis(y, dim, tensor(a, dtype=x.dtype, device=x.device))
        return y.affine(1.0 / int(divisor_override), 0.0) if override else y
    total = _windows(x, k, s, p, d, out).sum(2).reshape(n, c, *out)
    if override:
        return total.affine(1.0 / int(divisor_override), 0.0)

    def counts(size, ki, si, pi, o):
        start = np.arange(o) * si - pi
        end = np.minimum(start + ki, size + pi)
        if not count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, size)
        return end - start

    div = np.outer(counts(h, k[0], s[0], p[0], out[0]), counts(w, k[1], s[1], p[1], out[1]))
    if np.all(div == div.flat[0]):
        return total.affine(1.0 / float(div.flat[0]), 0.0)
    return total * tensor(1.0 / div, dtype=x.dtype, device=x.device)


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


def _adaptive_matrix(n, o):
    """(o, n): row i averages input [floor(i n / o), ceil((i + 1) n / o)), torch's adaptive windows."""
    i = np.arange(o)
    start, end = (i * n) // o, -((-(i + 1) * n) // o)
    j = np.arange(n)
    inside = (j[None, :] >= start[:, None]) & (j[None, :] < end[:, None])
    return inside / (end - start)[:, None]


def _adaptive_sizes(output_size, shape, n, op):
    vals = tuple(output_size) if isinstance(output_size, (tuple, list)) else (output_size,) * n
    if len(vals) != n:
        raise EmberTypeError(f"[{op}] output_size must be an int or {n} ints (None keeps a size), got {output_size!r}")
    vals = tuple(shape[i] if v is None else v for i, v in enumerate(vals))
    return _ints(vals, n, op, "output_size", 1)


def _adaptive_axis(x, dim, o):
    """Averages dim ``dim`` (-1 or -2) of x down to o adaptive windows."""
    n = x.shape[dim]
    if o == n:
        return x
    if n % o == 0:  # equal windows: a reshape and a mean, no matrix
        shape = list(x.shape)
        shape[dim:] = [o, n // o] + ([] if dim == -1 else [x.shape[-1]])
        return x.reshape(*shape).mean(dim)
    a = tensor(_adaptive_matrix(n, o), dtype=x.dtype, device=x.device)
    return x @ a.t() if dim == -1 else a @ x


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
    oh, ow = _adaptive_sizes(output_size, x.shape[2:], 2, op)
    n, c, h, w = x.shape
    if h % oh == 0 and w % ow == 0:  # equal windows on both axes (global pooling too): one mean
        return _squeeze(x.reshape(n, c, oh, h // oh, ow, w // ow).mean((3, 5)), added)
    return _squeeze(_adaptive_axis(_adaptive_axis(x, -1, ow), -2, oh), added)


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
    return _squeeze(_adaptive_axis(x, -1, o), added)


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
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
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
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


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
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


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
