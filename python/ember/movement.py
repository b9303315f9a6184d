"""Data movement: pad (constant, reflect, replicate, circular), roll and meshgrid, as compositions of the
fast copy ops (a fill and one strided copy, cat of views, one index_select per padded dim, broadcast
views): no loop over elements, every device, differentiable."""
from __future__ import annotations

import numbers

import numpy as np

from . import _C
from .args import int_arg
from .backprop import record, rule
from .creation import _check_fits, full, tensor, zeros
from .errors import DeviceError, DTypeError, EmberTypeError, EmberValueError, ShapeError
from .multi import cat
from .tensor_type import Tensor, _dim

_MODES = ("constant", "reflect", "replicate", "circular")



def _check_tensor(x, op):
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor, got {type(x).__name__}")


def _int_seq(v, op, what):
    """An int or a sequence of ints as a tuple of Python ints."""
    if isinstance(v, (list, tuple)):
        return tuple(int_arg(i, op, what) for i in v)
    return (int_arg(v, op, what),)


def _source_rows(n, before, after, mode):
    """The positions along a dim of size n that the padded dim reads, for reflect/replicate/circular."""
    i = np.arange(-before, n + after, dtype=np.int64)
    if mode == "reflect":
        i = np.abs(i)
        i = np.where(i >= n, 2 * (n - 1) - i, i)
    elif mode == "replicate":
        i = np.clip(i, 0, n - 1)
    else:
        i = np.mod(i, n)
    return i


def pad(x, pad, mode="constant", value=0.0):
    """Pads ``x``, as ``torch.nn.functional.pad``: ``pad`` names the last dim first.

    ``pad = (left, right)`` pads the last dim, ``(left, right, top, bottom)`` the last two, and so on.
    ``"constant"`` fills with ``value`` (a negative amount crops); ``"reflect"`` mirrors without
    repeating the edge; ``"replicate"`` repeats the edge; ``"circular"`` wraps around. Any dim may be
    padded in any mode (torch limits the non-constant modes to the last 1-3 dims of 2-5-D inputs).
    With mixed signs, as in torch, ``"circular"`` first crops and then wraps within the cropped dim;
    ``"reflect"`` and ``"replicate"`` read the uncropped input's rows.

    Args:
        x: a tensor of any dtype the device holds.
        pad: a sequence of an even number of ints, at most 2 * x.ndim.
        mode: one of ``"constant"``, ``"reflect"``, ``"replicate"``, ``"circular"``.
        value: the fill of ``"constant"`` (converted to x's dtype).

    Returns:
        A new tensor of x's dtype with each padded dim grown by its two amounts; differentiable (the
        gradient of reflected and wrapped elements is summed back into their sources).

    Raises:
        EmberTypeError: ``x`` is not a tensor, or pad/value have the wrong type.
        EmberValueError: an odd-length or too long ``pad``, an unknown mode, a reflect amount not below
            the dim's size, a circular amount past the (cropped) size, a crop past the dim, a padded
            result of negative size, or a constant ``value`` x's dtype cannot hold (300 for uint8, as torch).
        OutOfMemory: a result larger than this machine's memory, before anything is allocated.
        ShapeError: replicate/reflect/circular padding of an empty dim.
    """
    op = "pad"
    _check_tensor(x, op)
    if not isinstance(pad, (list, tuple)):
        raise EmberTypeError(f"[{op}] pad must be a sequence of ints, got {type(pad).__name__}")
    amounts = _int_seq(pad, op, "pad")
    if len(amounts) % 2 or len(amounts) // 2 > x.ndim:
        raise EmberValueError(f"[{op}] pad must hold an even number of ints, at most 2 * ndim = {2 * x.ndim}, "
                              f"got {len(amounts)}")
    if mode not in _MODES:
        raise EmberValueError(f"[{op}] mode must be one of {list(_MODES)}, got {mode!r}")
    if mode == "constant" and (not isinstance(value, (numbers.Number, np.generic)) or isinstance(value, complex)):
        raise EmberTypeError(f"[{op}] value must be a number, got {type(value).__name__}")
    if mode == "constant":
        _check_fill(value, x._dtype, op)
    # outer dims first and the last dim last: the earlier passes then move whole rows (one memcpy each)
    pairs = [(x.ndim - 1 - k, amounts[2 * k], amounts[2 * k + 1]) for k in range(len(amounts) // 2)]
    shape = list(x.shape)
    for d, before, after in pairs:  # every size is checked before anything is built or allocated
        n = shape[d]
        if n + before + after < 0:
            raise EmberValueError(f"[{op}] padding ({before}, {after}) of dim {d} of size {n} leaves a negative size")
        if mode in ("constant", "circular") and max(-before, 0) + max(-after, 0) > n:  # these crop first
            raise EmberValueError(f"[{op}] padding ({before}, {after}) crops more than the size {n} of dim {d}")
        shape[d] = n + before + after
    numel = 1
    for v in shape:
        numel *= v
    _check_fits(numel * x._dtype.itemsize, op)
    out = x
    for d, before, after in reversed(pairs):
        n = out.shape[d]
        if before == 0 and after == 0:
            continue
        if mode == "replicate":  # output j reads row clamp(j - before, 0, n - 1), torch's rule for any signs
            start, stop = -before, n + after
            if stop <= start:  # nothing left of the dim
                out = out.narrow(d, 0, 0)
                continue
            if n == 0:
                raise ShapeError(f"[{op}] {mode} padding needs a non-empty dim {d}")
            parts, grown = [], list(out.shape)
            for lo_j, hi_j, src in ((start, min(stop, 0), 0), (max(start, n), stop, n - 1)):
                grown[d] = max(hi_j - lo_j, 0)
                parts.append(out.narrow(d, src, 1).broadcast_as(tuple(grown)))
            mid = out.narrow(d, min(max(start, 0), n), max(min(stop, n) - max(start, 0), 0))
            out = cat([p for p in (parts[0], mid, parts[1]) if p.shape[d]], d)
            continue
        if mode != "reflect":  # negative amounts crop first; circular then wraps within the cropped dim
            lo, hi = max(-before, 0), max(-after, 0)
            if lo or hi:
                out = out.narrow(d, lo, n - lo - hi)
                n, before, after = n - lo - hi, max(before, 0), max(after, 0)
            if mode == "constant" or (before == 0 and after == 0):
                continue
        if n == 0:
            raise ShapeError(f"[{op}] {mode} padding needs a non-empty dim {d}")
        if mode == "reflect":  # torch reflects about the uncropped input's edges, whatever the signs
            if max(before, after) >= n:
                raise EmberValueError(f"[{op}] reflect padding ({before}, {after}) must be less than the size {n} "
                                      f"of dim {d}")
            out = out.index_select(tensor(_source_rows(n, before, after, mode), device=x._device), d)
            continue
        if mode == "circular" and max(before, after) > n:
            raise EmberValueError(f"[{op}] circular padding ({before}, {after}) must not exceed the size {n} of "
                                  f"dim {d}")
        # the last `before` and the first `after` rows of the cropped dim wrap around
        head, tail = out.narrow(d, n - before, before), out.narrow(d, 0, after)
        out = cat([p for p in (head, out, tail) if p.shape[d]], d)
    if mode == "constant":
        return _pad_constant(out, [(d, max(b, 0), max(a, 0)) for d, b, a in pairs], value)
    return out.contiguous() if out is x else out


# The range of values each dtype holds: a constant pad's fill outside it is refused, as torch refuses it.
_FILL_RANGE = {"uint8": (0, 255), "int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1),
               "int64": (-(2**63), 2**63 - 1), "float16": 65504.0, "bfloat16": 3.3895313892515355e38,
               "float32": 3.4028234663852886e38}


def _check_fill(value, dtype, op):
    """A constant pad's value must fit x's dtype (torch: "value cannot be converted ... without
    overflow"); NaN and inf fit the float dtypes only, and any value fits bool."""
    rng = _FILL_RANGE.get(dtype.name)
    if rng is None:
        return
    v = float(value) if not isinstance(value, (numbers.Integral, np.integer)) else int(value)
    if isinstance(rng, tuple):
        ok = v == v and rng[0] <= v <= rng[1]  # NaN fails the first test, inf the second
    else:
        ok = v != v or abs(v) == float("inf") or abs(v) <= rng
    if not ok:
        raise EmberValueError(f"[{op}] value {value!r} cannot be converted to {dtype.name} without overflow")


def _pad_constant(x, grow, value):
    """x (already cropped) inside a tensor filled with value: one fill and one strided copy, recorded
    as pad_constant (its gradient is the window of g where x went)."""
    shape = list(x.shape)
    for d, b, a in grow:
        shape[d] += b + a
    out = full(tuple(shape), value, dtype=x._dtype, device=x._device)
    window = [(d, b, x.shape[d]) for d, b, _ in grow]
    inner = out._layout
    for d, b, n in window:
        inner = inner.narrow(d, b, n)
    _C.copy_into(x._storage, x._layout, out._storage, inner, "pad")
    return record(out, "pad_constant", (x,), tuple(window))


@rule("pad_constant", ())
def _pad_constant_rule(n, out, g):
    for d, b, size in n.saved:
        g = g.narrow(d, b, size)
    return (g,)


def roll(x, shifts, dims=None):
    """Rolls ``x`` along dims, as ``torch.roll``: element i moves to (i + shift) mod size.

    Args:
        x: a tensor of any dtype.
        shifts: an int or a sequence of ints (negative rolls the other way).
        dims: an int or a sequence of ints as long as ``shifts``; None rolls the flattened tensor and
            restores its shape.

    Returns:
        A new tensor of x's shape and dtype, differentiable.

    Raises:
        EmberTypeError: ``x`` is not a tensor, or shifts/dims are not ints.
        EmberValueError: shifts and dims differ in length, or a dim repeats.
        IndexOutOfRange: a dim is out of range.
    """
    op = "roll"
    _check_tensor(x, op)
    sh = _int_seq(shifts, op, "shifts")
    if dims is None:
        if len(sh) != 1:
            raise EmberValueError(f"[{op}] without dims, shifts must be one int, got {len(sh)}")
        return roll(x.reshape(-1), sh, 0).reshape(*x.shape)
    ds = _int_seq(dims, op, "dims")
    if len(ds) != len(sh):
        raise EmberValueError(f"[{op}] shifts and dims must have the same length, got {len(sh)} and {len(ds)}")
    ds = tuple(_dim(d, x.ndim, op) for d in ds)
    moves = {}  # torch applies a repeated dim's shifts one after the other: they add up
    for d, s in zip(ds, sh):
        moves[d] = moves.get(d, 0) + s
    moves = {d: s % x.shape[d] for d, s in moves.items() if x.shape[d] and s % x.shape[d]}
    if not moves:
        return x.copy()
    return _roll(x, moves)


def _roll(x, moves):
    """x rolled by moves {dim: shift in (0, size)}: the 2^k blocks of x copied once each into their
    places in a fresh tensor (one pass over the data for any number of dims), recorded as roll."""
    out = zeros(x.shape, dtype=x._dtype, device=x._device)
    dims = sorted(moves)
    for corner in range(1 << len(dims)):
        src, dst = x._layout, out._layout
        for k, d in enumerate(dims):
            n, s = x.shape[d], moves[d]
            if corner >> k & 1:  # the first n - s elements move up by s
                src, dst = src.narrow(d, 0, n - s), dst.narrow(d, s, n - s)
            else:  # the last s wrap around to the front
                src, dst = src.narrow(d, n - s, s), dst.narrow(d, 0, s)
        _C.copy_into(x._storage, src, out._storage, dst, "roll")
    return record(out, "roll", (x,), moves)


@rule("roll", ())
def _roll_rule(n, out, g):
    return (_roll(g, {d: out.shape[d] - s for d, s in n.saved.items()}),)


def meshgrid(*tensors, indexing="ij"):
    """Coordinate grids from 1-D tensors, as ``torch.meshgrid``.

    Args:
        *tensors: 1-D (or 0-d) tensors of one dtype and device, or a single list/tuple of them.
        indexing: ``"ij"`` (output dim k runs along tensors[k]) or ``"xy"`` (the first two swapped,
            numpy's Cartesian default).

    Returns:
        A tuple of len(tensors) tensors, each of the grid's shape: broadcast (stride-0) views of the
        inputs, sharing their storage (copy before writing into one), differentiable.

    Raises:
        EmberTypeError: an argument is not a tensor.
        EmberValueError: no tensors, a tensor with more than one dim, or an unknown indexing.
        DTypeError: the tensors' dtypes differ.
        DeviceError: the tensors' devices differ.
    """
    op = "meshgrid"
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not tensors:
        raise EmberValueError(f"[{op}] expected at least one tensor")
    for t in tensors:
        _check_tensor(t, op)
        if t.ndim > 1:
            raise EmberValueError(f"[{op}] expected 0-d or 1-D tensors, got shape {t.shape}")
    if indexing not in ("ij", "xy"):
        raise EmberValueError(f"[{op}] indexing must be 'ij' or 'xy', got {indexing!r}")
    t0 = tensors[0]
    for t in tensors[1:]:
        if t._dtype is not t0._dtype:
            raise DTypeError(f"[{op}] expected tensors of one dtype, got {t0._dtype.name} and {t._dtype.name}")
        if t._device != t0._device:
            raise DeviceError(f"[{op}] expected tensors on one device, got {t0._device} and {t._device}")
    n = len(tensors)
    where = list(range(n))
    if indexing == "xy" and n >= 2:
        where[0], where[1] = 1, 0
    sizes = [t.numel() for t in tensors]
    shape = [0] * n
    for k in range(n):
        shape[where[k]] = sizes[k]
    out = []
    for k, t in enumerate(tensors):
        view = [1] * n
        view[where[k]] = sizes[k]
        out.append(t.reshape(*view).broadcast_as(tuple(shape)))
    return tuple(out)


__all__ = ["meshgrid", "pad", "roll"]
