"""Resampling: ``interpolate`` (nearest, nearest-exact, linear, bilinear; align_corners both ways) and the
``Upsample`` module, one axis at a time: nearest is an index_select of source rows/columns, linear a
GEMM with a two-taps-per-row matrix (or, on very long axes, two index_selects blended by their
weights); the source indices and weights depend only on the sizes and are computed with numpy."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..args import bool_arg
from ..errors import DTypeError, EmberTypeError, EmberValueError, ShapeError
from ..tensor import Tensor, tensor
from .layers import Module
from .pooling import _DENSE_AXIS_MAX, _apply_axis

__all__ = ["Upsample", "interpolate"]

_MODES = {"nearest": None, "nearest-exact": None, "linear": 3, "bilinear": 4}


def _sizes(x, size, scale_factor, recompute, op):
    """(output sizes, the scale per dim used for the source index: in / out, or 1 / scale_factor)."""
    spatial = x.shape[2:]
    n = len(spatial)
    if (size is None) == (scale_factor is None):
        raise EmberValueError(f"[{op}] give exactly one of size and scale_factor")
    if size is not None:
        out = tuple(size) if isinstance(size, (tuple, list)) else (size,) * n
        if len(out) != n or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in out):
            raise EmberTypeError(f"[{op}] size must be an int or {n} ints for input {x.shape}, got {size!r}")
        if any(v < 1 for v in out):
            raise EmberValueError(f"[{op}] size must be positive, got {size!r}")
        return tuple(int(v) for v in out), tuple(i / o for i, o in zip(spatial, out))
    sf = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * n
    if len(sf) != n or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in sf):
        raise EmberTypeError(f"[{op}] scale_factor must be a number or {n} numbers, got {scale_factor!r}")
    if not all(v > 0 and math.isfinite(v) for v in sf):
        raise EmberValueError(f"[{op}] scale_factor must be positive and finite, got {scale_factor!r}")
    out = tuple(int(math.floor(i * float(f))) for i, f in zip(spatial, sf))
    if any(v < 1 for v in out):
        raise ShapeError(f"[{op}] scale_factor {scale_factor!r} leaves no output for input {x.shape}")
    if recompute:
        return out, tuple(i / o for i, o in zip(spatial, out))
    return out, tuple(1.0 / float(f) for f in sf)


def _nearest_index(n_in, n_out, scale, exact):
    """torch's nearest source index (computed in float32 as torch's CPU kernel does)."""
    dst = np.arange(n_out, dtype=np.float32)
    s = np.float32(scale)
    src = np.floor(((dst + np.float32(0.5)) if exact else dst) * s).astype(np.int64)
    return np.minimum(src, n_in - 1)


def _linear_taps(n_in, n_out, scale, align_corners):
    """(i0, i1, w0, w1) of linear interpolation along one axis, torch's source-index rule."""
    dst = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = dst * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        src = np.maximum((dst + 0.5) * scale - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    w1 = src - i0
    return i0, i1, 1.0 - w1, w1


def _along(x, dim, idx):
    return x.index_select(tensor(idx, device=x.device), dim)


def _weights(w, dim, x):
    """Per-position weights shaped to broadcast along ``dim`` of x."""
    shape = [1] * x.ndim
    shape[dim] = w.shape[0]
    return tensor(w.reshape(shape), dtype=x.dtype, device=x.device)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None):
    """Resamples (N, C, L) or (N, C, H, W) inputs, as ``torch.nn.functional.interpolate``.

    Args:
        input: (N, C, L) for "nearest"/"nearest-exact"/"linear", (N, C, H, W) for
            "nearest"/"nearest-exact"/"bilinear"; a float tensor with any strides.
        size: the output size, an int or one int per spatial dim.
        scale_factor: a multiplier (or one per spatial dim); the output is floor(in * scale_factor).
        mode: "nearest" (torch's, floor(dst * scale)), "nearest-exact", "linear" or "bilinear".
        align_corners: linear modes only: map the corner pixels' centres onto each other (True) or
            their outer edges (False, the default).
        recompute_scale_factor: with scale_factor, compute the source index from the sizes instead of
            the given factor.

    Returns:
        Tensor: (N, C) + the output size, differentiable with respect to input.

    Raises:
        EmberValueError: an unknown mode, both or neither of size and scale_factor, align_corners
            with a nearest mode, or a non-positive size.
        ShapeError: an input rank the mode does not take.
        DTypeError: a non-float input.
    """
    op = "interpolate"
    if not isinstance(input, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor input, got {type(input).__name__}")
    if not input.dtype.is_float:
        raise DTypeError(f"[{op}] expected a float tensor, got {input.dtype.name}")
    if mode not in _MODES:
        raise EmberValueError(f"[{op}] unknown mode {mode!r} (expected one of {', '.join(_MODES)})")
    rank = _MODES[mode]
    if rank is None:
        if align_corners is not None:
            raise EmberValueError(f"[{op}] align_corners applies to the linear modes only, not {mode!r}")
        if input.ndim not in (3, 4):
            raise ShapeError(f"[{op}] mode {mode!r} expects input (N, C, L) or (N, C, H, W), got {input.shape}")
    elif input.ndim != rank:
        want = "(N, C, L)" if rank == 3 else "(N, C, H, W)"
        raise ShapeError(f"[{op}] mode {mode!r} expects input {want}, got {input.shape}")
    align = False if align_corners is None else bool_arg(align_corners, op, "align_corners")
    recompute = False if recompute_scale_factor is None else bool_arg(recompute_scale_factor, op,
                                                                     "recompute_scale_factor")
    if any(s == 0 for s in input.shape[2:]):
        raise ShapeError(f"[{op}] input {input.shape} has an empty spatial dim")
    out, scales = _sizes(input, size, scale_factor, recompute, op)
    y = input
    for i in reversed(range(len(out))):  # the last dim first: the larger reads stay contiguous longer
        dim, n_in, n_out = 2 + i, input.shape[2 + i], out[i]
        if rank is None:
            if n_in != n_out or scales[i] != 1.0:
                y = _along(y, dim, _nearest_index(n_in, n_out, scales[i], mode == "nearest-exact"))
            continue
        i0, i1, w0, w1 = _linear_taps(n_in, n_out, scales[i], align)
        if n_in == 1:  # every tap reads the one position
            y = _along(y, dim, i0)
        elif n_in <= _DENSE_AXIS_MAX and dim >= y.ndim - 2:
            a = np.zeros((n_out, n_in))  # two taps per row: one GEMM beats two gathers and a blend here
            np.add.at(a, (np.arange(n_out), i0), w0)
            np.add.at(a, (np.arange(n_out), i1), w1)
            y = _apply_axis(y, dim - y.ndim, tensor(a, dtype=y.dtype, device=y.device))
        else:
            y = _along(y, dim, i0) * _weights(w0, dim, y) + _along(y, dim, i1) * _weights(w1, dim, y)
    return y


class Upsample(Module):
    """``interpolate`` as a module, torch's ``nn.Upsample``.

    Args:
        size: the output size, an int or one per spatial dim.
        scale_factor: a multiplier, or one per spatial dim.
        mode: "nearest", "nearest-exact", "linear" or "bilinear".
        align_corners: for the linear modes, as in ``interpolate``.
        recompute_scale_factor: as in ``interpolate``.
    """

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None):
        super().__init__()
        if mode not in _MODES:
            raise EmberValueError(f"[Upsample] unknown mode {mode!r} (expected one of {', '.join(_MODES)})")
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x):
        """Resamples ``x``.

        Args:
            x: (N, C, L) or (N, C, H, W).

        Returns:
            The resampled tensor.
        """
        return interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                           self.recompute_scale_factor)

    def extra_repr(self):
        return f"size={self.size}, scale_factor={self.scale_factor}, mode={self.mode!r}"
