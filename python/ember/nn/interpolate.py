"""Resampling: ``interpolate`` (nearest, nearest-exact, linear, bilinear; align_corners both ways) and the
``Upsample`` module. Each mode is one C++ kernel per device (``_C.upsample``, the upsample family behind
the backend trait; 1-D is the h == 1 case) with torch's source-index formulas, and its backward another
(``_C.upsample_bwd``, the adjoint); both are recorded ops, so second order works. Python checks the
arguments and derives the output size as torch does."""
from __future__ import annotations

import math
import numbers

from .. import _C
from ..args import bool_arg
from ..backprop import record
from ..backprop import rule as _rule
from ..creation import _check_fits
from ..errors import DTypeError, EmberTypeError, EmberValueError, ShapeError
from ..kernel_result import from_kernel
from ..tensor_type import Tensor
from .layers import Module

__all__ = ["Upsample", "interpolate"]

# mode -> (the input rank it takes, None for either; cpp/backend.h's UpsampleMode)
_MODES = {"nearest": (None, 0), "nearest-exact": (None, 1), "linear": (3, 2), "bilinear": (4, 2)}


def _sizes(x, size, scale_factor, recompute, op):
    """(output sizes, the scale factors the kernel's source index uses: the given ones, or 0 for in / out)."""
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
        return tuple(int(v) for v in out), (0.0,) * n
    sf = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * n
    if len(sf) != n or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in sf):
        raise EmberTypeError(f"[{op}] scale_factor must be a number or {n} numbers, got {scale_factor!r}")
    if not all(v > 0 and math.isfinite(v) for v in sf):
        raise EmberValueError(f"[{op}] scale_factor must be positive and finite, got {scale_factor!r}")
    out = tuple(int(math.floor(i * float(f))) for i, f in zip(spatial, sf))
    if any(v < 1 for v in out):
        raise ShapeError(f"[{op}] scale_factor {scale_factor!r} leaves no output for input {x.shape}")
    return out, ((0.0,) * n if recompute else tuple(float(f) for f in sf))


def _upsample(x, mode, geom, sf, align):
    s, layout = _C.upsample(mode, x._storage, x._layout, geom, sf[0], sf[1], align)
    return record(from_kernel(s, layout, x._dtype, x._device), "upsample", (x,), (mode, geom, sf, align))


@_rule("upsample", ())
def _upsample_grad(n, out, g):
    mode, geom, sf, align = n.saved
    s, layout = _C.upsample_bwd(mode, g._storage, g._layout, geom, sf[0], sf[1], align)
    return (record(from_kernel(s, layout, g._dtype, g._device), "upsample_bwd", (g,), n.saved),)


@_rule("upsample_bwd", ())
def _upsample_bwd_grad(n, out, g):
    return (_upsample(g, *n.saved),)  # the backward is linear: its adjoint is the forward


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
        DTypeError: a non-float input, or one the device lacks.
    """
    op = "interpolate"
    if not isinstance(input, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor input, got {type(input).__name__}")
    if not input.dtype.is_float:
        raise DTypeError(f"[{op}] expected a float tensor, got {input.dtype.name}")
    if mode not in _MODES:
        raise EmberValueError(f"[{op}] unknown mode {mode!r} (expected one of {', '.join(_MODES)})")
    rank, code = _MODES[mode]
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
    out, sf = _sizes(input, size, scale_factor, recompute, op)
    x = input if input.ndim == 4 else input.unsqueeze(2)  # 1-D is the h == 1 case
    if input.ndim == 3:
        out, sf = (1,) + out, (0.0,) + sf
    n, c, h, w = x.shape
    # refused before anything is allocated: the result, and the kernel's per-axis source tables (two
    # indices and two weights per output row and column), must fit this machine's memory
    _check_fits(n * c * out[0] * out[1] * x.dtype.itemsize + 32 * (out[0] + out[1]), op)
    y = _upsample(x, code, (n, c, h, w, out[0], out[1]), sf, align)
    return y if input.ndim == 4 else y.squeeze(2)


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
        if self.scale_factor is not None:  # torch's wording: the scale (as floats) or else the size
            sf = self.scale_factor
            sf = tuple(float(v) for v in sf) if isinstance(sf, (tuple, list)) else float(sf)
            return f"scale_factor={sf!r}, mode={self.mode!r}"
        return f"size={self.size!r}, mode={self.mode!r}"
