"""Small ops built from existing kernels (chunk, split, unbind, tril/triu, masked_fill, var/std,
any/all, isnan/isinf/isfinite, isclose, repeat/tile, flip, linspace) and the new unary math methods.
Each is differentiable through the ops it uses."""
from __future__ import annotations

import math
import numbers

from . import _C
from . import dtypes as _dt
from .args import bool_arg, float_arg, int_arg
from .backprop import no_grad
from .creation import _check_holds, arange, full, tensor
from .errors import DTypeError, EmberTypeError, EmberValueError, ShapeError
from .multi import maximum, where
from .operands import _operands, _scalar
from .tensor_type import Tensor, _broadcast_shape, _dim, _dims


def _dims_arg(dims, op):
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    return tuple(int_arg(d, op, "dim") for d in dims)


def _tri(x, diagonal, upper):
    op = "triu" if upper else "tril"
    if x.ndim < 2:
        raise ShapeError(f"[{op}] expected at least 2 dims, got shape {x.shape}")
    k = int_arg(diagonal, op, "diagonal")
    n, m = x.shape[-2:]
    # col - row for every position of the last two dims: one small int64 grid, broadcast over the rest
    diff = arange(m, device=x.device).reshape(1, m) - arange(n, device=x.device).reshape(n, 1)
    keep = diff.ge(k) if upper else diff.le(k)
    return where(keep, x, _scalar(0, x.dtype, x.device))


def isclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    """Elementwise closeness ``|a - b| <= atol + rtol * |b|`` (infinities close only to themselves), as
    ``torch.isclose``; ints compare in float64 (float32 on a device without float64, such as Metal).

    Args:
        a: a tensor (or, with b a tensor, an array, list or scalar).
        b: a tensor, array, list or scalar, broadcast against a.
        rtol: the relative tolerance (>= 0).
        atol: the absolute tolerance (>= 0).
        equal_nan: whether two NaNs count as close.

    Returns:
        A bool tensor, True where close.

    Raises:
        EmberValueError: for a negative tolerance.
        ShapeError: when the shapes do not broadcast.
    """
    rtol, atol = float_arg(rtol, "isclose", "rtol"), float_arg(atol, "isclose", "atol")
    equal_nan = bool_arg(equal_nan, "isclose", "equal_nan")
    if not (rtol >= 0 and atol >= 0):
        raise EmberValueError(f"[isclose] rtol and atol must be >= 0, got {rtol} and {atol}")
    if not isinstance(a, Tensor):
        a, b = b, a
    a, b = _operands(a, b, "isclose")
    if not a.dtype.is_float:
        # the widest float the tensors' device holds: Metal refuses float64
        wide = _dt.float64 if _C.device_supports(a.device.kind, a.device.index, _dt.float64.code) else _dt.float32
        a, b = a.to_dtype(wide), b.to_dtype(wide)
    with no_grad():
        close = (a - b).abs().le(b.abs() * rtol + atol) * b.isfinite()
        close = maximum(close, a.eq(b))
        if equal_nan:
            close = maximum(close, a.isnan() * b.isnan())
    return close


def _unary_method(name, what, ints=False):
    """A Tensor method running the C++ unary functor ``name`` (vectorised; float32 within a few ulp)."""

    def method(self):
        return self._unary(name)

    method.__name__ = method.__qualname__ = name
    raises = "    None (integer tensors come back unchanged).\n" if ints else \
        "    DTypeError: for an integer tensor (a float-only op).\n"
    method.__doc__ = (f"{what}, elementwise, as ``torch.{name}``.\n\n"
                      "Returns:\n    A new tensor of the same shape and dtype"
                      f"{'' if ints else ', differentiable'}.\n\nRaises:\n{raises}")
    return method


log1p = _unary_method("log1p", "log(1 + x), accurate for small x")
expm1 = _unary_method("expm1", "exp(x) - 1, accurate for small x")
rsqrt = _unary_method("rsqrt", "1 / sqrt(x)")
log2 = _unary_method("log2", "The base-2 logarithm (exact at powers of two)")
log10 = _unary_method("log10", "The base-10 logarithm")
tan = _unary_method("tan", "The tangent")
sinh = _unary_method("sinh", "The hyperbolic sine")
cosh = _unary_method("cosh", "The hyperbolic cosine")
asin = _unary_method("asin", "The arcsine (NaN outside [-1, 1])")
acos = _unary_method("acos", "The arccosine (NaN outside [-1, 1])")
atan = _unary_method("atan", "The arctangent")
trunc = _unary_method("trunc", "Rounds toward zero (ints unchanged; no gradient)", ints=True)

def chunk(self, chunks, dim=0):
    """Splits into ``chunks`` views of ceil(n / chunks) along dim (the last may be smaller, and
    fewer come back when n is small), as ``torch.chunk``.

    Args:
        chunks: the number of pieces, >= 1.
        dim: the dim to split.

    Returns:
        A tuple of views.

    Raises:
        EmberValueError: for chunks < 1.
        IndexOutOfRange: for a dim out of range.
    """
    chunks = int_arg(chunks, "chunk", "chunks")
    if chunks < 1:
        raise EmberValueError(f"[chunk] chunks must be at least 1, got {chunks}")
    d = _dim(dim, self.ndim, "chunk")
    if self.ndim == 0:
        raise ShapeError("[chunk] cannot chunk a 0-d tensor")
    n = self.shape[d]
    size = max(1, -(-n // chunks))
    return self.split(size, d) if n else tuple(self.narrow(d, 0, 0) for _ in range(chunks))

def split(self, split_size_or_sections, dim=0):
    """Splits into views along dim, as ``torch.split``.

    Args:
        split_size_or_sections: an int (every piece that size, the last smaller) or a list of
            sizes summing to the dim's size.
        dim: the dim to split.

    Returns:
        A tuple of views.

    Raises:
        EmberValueError: for a size below 1 (0 allowed in a list) or sections not summing to the size.
        IndexOutOfRange: for a dim out of range.
    """
    d = _dim(dim, self.ndim, "split")
    if self.ndim == 0:
        raise ShapeError("[split] cannot split a 0-d tensor")
    n = self.shape[d]
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [int_arg(s, "split", "section") for s in split_size_or_sections]
        if any(s < 0 for s in sizes) or sum(sizes) != n:
            raise EmberValueError(f"[split] sections {sizes} do not sum to the size {n} of dim {d}")
    else:
        size = int_arg(split_size_or_sections, "split", "split_size")
        if size < 1 and not (size == 0 and n == 0):
            raise EmberValueError(f"[split] split_size must be at least 1, got {size}")
        sizes = [min(size, n - s) for s in range(0, n, size)] if n else [0]
    out, off = [], 0
    for s in sizes:
        out.append(self.narrow(d, off, s))
        off += s
    return tuple(out)

def unbind(self, dim=0):
    """The slices along dim, each without that dim (views), as ``torch.unbind``.

    Args:
        dim: the dim to remove.

    Returns:
        A tuple of views.

    Raises:
        IndexOutOfRange: for a dim out of range (or a 0-d tensor).
    """
    d = _dim(dim, self.ndim, "unbind")
    if self.ndim == 0:
        raise ShapeError("[unbind] cannot unbind a 0-d tensor")
    return tuple(self.narrow(d, i, 1).squeeze(d) for i in range(self.shape[d]))

def tril(self, diagonal=0):
    """The lower triangle of the last two dims (elements with col - row <= diagonal), the rest
    zero, as ``torch.tril``.

    Args:
        diagonal: which diagonal bounds the triangle (0 the main one, > 0 above it).

    Returns:
        A new tensor, differentiable.

    Raises:
        ShapeError: below 2 dims.
    """
    return _tri(self, diagonal, False)

def triu(self, diagonal=0):
    """The upper triangle of the last two dims (col - row >= diagonal), the rest zero, as
    ``torch.triu``.

    Args:
        diagonal: which diagonal bounds the triangle.

    Returns:
        A new tensor, differentiable.

    Raises:
        ShapeError: below 2 dims.
    """
    return _tri(self, diagonal, True)

def masked_fill(self, mask, value):
    """A copy with ``value`` where ``mask`` is set, as ``torch.masked_fill`` (the dtype stays).

    Args:
        mask: a bool tensor (a comparison's result), a uint8 0/1 tensor, or a bool numpy array,
            broadcast to self.
        value: a Python scalar or a 0-d tensor, cast to self's dtype.

    Returns:
        A new tensor of self's shape and dtype, differentiable in self (and a tensor value).

    Raises:
        DTypeError: for a mask that is not bool / uint8, or a value that is not a number.
        ShapeError: when the mask does not broadcast to self's shape.
    """
    if not isinstance(mask, Tensor):
        mask = tensor(mask, device=self._device)  # a list or array goes where self is
    if mask.dtype is not _dt.bool and mask.dtype is not _dt.uint8:
        raise DTypeError(f"[masked_fill] mask must be bool (a comparison's result) or uint8, got {mask.dtype.name}")
    if _broadcast_shape(mask.shape, self.shape) != self.shape or mask.ndim > self.ndim:
        raise ShapeError(f"[masked_fill] mask of shape {mask.shape} does not broadcast to {self.shape}")
    if isinstance(value, Tensor):
        if value.ndim:
            raise ShapeError(f"[masked_fill] value must be a scalar or a 0-d tensor, got shape {value.shape}")
        value = value.to_dtype(self.dtype)
    elif isinstance(value, numbers.Real):
        value = _scalar(value if self.dtype.is_float else int(value), self.dtype, self.device)
    else:
        raise EmberTypeError(f"[masked_fill] value must be a number or a 0-d tensor, got {type(value).__name__}")
    return where(mask, value, self)

def var(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """The variance over dims: sum((x - mean)^2) / max(0, N - correction), as ``torch.var``.

    Args:
        dim: an int, a tuple of ints or None for every dim.
        unbiased: torch's older flag (True: correction 1, False: 0).
        keepdim: keep the reduced dims with size 1.
        correction: subtracted from the count (default 1, Bessel's correction).

    Returns:
        A new float tensor, differentiable (NaN or inf when N <= correction, as torch).

    Raises:
        DTypeError: for a non-float tensor.
        EmberValueError: for both unbiased and correction.
    """
    return self._var("var", dim, unbiased, keepdim, correction)

def _var(self, op, dim, unbiased, keepdim, correction):
    """var's body; ``op`` names the public op (var or std) in its errors."""
    if not self.dtype.is_float:
        raise DTypeError(f"[{op}] expected a float dtype, got {self.dtype.name}")
    if unbiased is not None and correction is not None:
        raise EmberValueError(f"[{op}] give unbiased or correction, not both")
    c = (1.0 if bool_arg(unbiased, op, "unbiased") else 0.0) if unbiased is not None else (
        1.0 if correction is None else float_arg(correction, op, "correction"))
    dims = _dims(dim, self.ndim, op)
    keepdim = bool_arg(keepdim, op, "keepdim")
    n = 1
    for d in dims:
        n *= self.shape[d]
    dev = self - self.mean(dims, keepdim=True)
    return (dev * dev).sum(dims, keepdim) / max(0.0, n - c)

def std(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """The standard deviation, sqrt(var(...)), as ``torch.std`` (same arguments as ``var``).

    Args:
        dim: an int, a tuple of ints or None for every dim.
        unbiased: torch's older flag (True: correction 1, False: 0).
        keepdim: keep the reduced dims with size 1.
        correction: subtracted from the count (default 1).

    Returns:
        A new float tensor, differentiable.

    Raises:
        DTypeError: for a non-float tensor.
        EmberValueError: for both unbiased and correction.
    """
    return self._var("std", dim, unbiased, keepdim, correction).sqrt()

def _any(self, dim=None, keepdim=False):
    """Whether any element over dims is nonzero (NaN counts as true), as ``torch.any``.

    Args:
        dim: an int, a tuple of ints or None for every dim.
        keepdim: keep the reduced dims with size 1.

    Returns:
        A bool tensor (False for an empty reduction).

    Raises:
        IndexOutOfRange: for a dim out of range.
    """
    dims, keepdim = _dims(dim, self.ndim, "any"), bool_arg(keepdim, "any", "keepdim")
    return self.ne(0).sum(dims, keepdim).gt(0)

def _all(self, dim=None, keepdim=False):
    """Whether every element over dims is nonzero (NaN counts as true), as ``torch.all``.

    Args:
        dim: an int, a tuple of ints or None for every dim.
        keepdim: keep the reduced dims with size 1.

    Returns:
        A bool tensor (True for an empty reduction).

    Raises:
        IndexOutOfRange: for a dim out of range.
    """
    dims, keepdim = _dims(dim, self.ndim, "all"), bool_arg(keepdim, "all", "keepdim")
    return self.eq(0).sum(dims, keepdim).eq(0)

def isnan(self):
    """Where the elements are NaN, as ``torch.isnan``.

    Returns:
        A bool tensor (all False for ints).
    """
    return self.ne(self)

def isinf(self):
    """Where the elements are +-inf, as ``torch.isinf``.

    Returns:
        A bool tensor (all False for ints).
    """
    if not self.dtype.is_float:
        return self.ne(self)
    return self.abs().eq(math.inf)

def isfinite(self):
    """Where the elements are neither inf nor NaN, as ``torch.isfinite``.

    Returns:
        A bool tensor (all True for ints).
    """
    if not self.dtype.is_float:
        return self.eq(self)
    return (self - self).eq(0)

def _isclose(self, other, rtol=1e-5, atol=1e-8, equal_nan=False):
    """Elementwise closeness to other, as ``torch.isclose``.

    Args:
        other: a tensor, array, list or scalar, broadcast against self.
        rtol: the relative tolerance.
        atol: the absolute tolerance.
        equal_nan: whether two NaNs count as close.

    Returns:
        A bool tensor, True where ``|self - other| <= atol + rtol * |other|``.

    Raises:
        EmberValueError: for a negative tolerance.
        ShapeError: when the shapes do not broadcast.
    """
    return isclose(self, other, rtol, atol, equal_nan)

def allclose(self, other, rtol=1e-5, atol=1e-8, equal_nan=False) -> bool:
    """Whether every element is close to other (``isclose``), as ``torch.allclose``.

    Args:
        other: a tensor, array, list or scalar, broadcast against self.
        rtol: the relative tolerance.
        atol: the absolute tolerance.
        equal_nan: whether two NaNs count as close.

    Returns:
        A bool.

    Raises:
        EmberValueError: for a negative tolerance.
        ShapeError: when the shapes do not broadcast.
    """
    return bool(isclose(self, other, rtol, atol, equal_nan).all().item())

def repeat(self, *sizes):
    """The tensor tiled ``sizes[i]`` times along each dim (new leading dims when sizes is longer),
    as ``torch.Tensor.repeat``; a copy.

    Args:
        *sizes: one count per dim (ints or one tuple), at least ndim of them, each >= 0.

    Returns:
        A new tensor, differentiable.

    Raises:
        ShapeError: for fewer counts than dims.
        EmberValueError: for a negative count.
    """
    reps = _dims_arg(sizes, "repeat")
    if len(reps) < self.ndim:
        raise ShapeError(f"[repeat] got {len(reps)} repeat counts for a tensor with {self.ndim} dims")
    if any(r < 0 for r in reps):
        raise EmberValueError(f"[repeat] repeat counts must be >= 0, got {reps}")
    shape = (1,) * (len(reps) - self.ndim) + self.shape
    x = self.reshape(shape) if shape != self.shape else self
    inter = tuple(v for s in shape for v in (1, s))  # (1, s0, 1, s1, ...): broadcast the 1s to the counts
    big = tuple(v for r, s in zip(reps, shape) for v in (r, s))
    return x.reshape(inter).broadcast_as(big).reshape(tuple(r * s for r, s in zip(reps, shape)))

def tile(self, *dims):
    """Like repeat, with missing leading counts taken as 1 (``torch.tile``).

    Args:
        *dims: repeat counts (ints or one tuple).

    Returns:
        A new tensor, differentiable.

    Raises:
        EmberValueError: for a negative count.
    """
    reps = _dims_arg(dims, "tile")
    return self.repeat((1,) * (self.ndim - len(reps)) + reps)

def flip(self, *dims):
    """A copy with the order of elements reversed along dims, as ``torch.flip``.

    Args:
        *dims: the dims to reverse (ints or one tuple; negative ok).

    Returns:
        A new tensor, differentiable.

    Raises:
        IndexOutOfRange: for a dim out of range.
        EmberValueError: for a dim named twice.
    """
    ds = _dims(_dims_arg(dims, "flip"), self.ndim, "flip")
    out = self
    for d in ds:
        n = self.shape[d]
        if n > 1:
            out = out.index_select(arange(n - 1, -1, -1, device=self.device), d)
    return out.copy() if out is self else out


def linspace(start, end, steps, dtype=None, device=None):
    """``steps`` values evenly spaced from start to end inclusive, as ``torch.linspace`` (computed in
    float64, the second half counted back from end, so both ends are exact).

    Args:
        start: the first value.
        end: the last value.
        steps: how many values, >= 0.
        dtype: the dtype (default float32).
        device: the device (default: the default device).

    Returns:
        A new 1-D tensor.

    Raises:
        EmberValueError: for negative steps or a non-finite bound.
        DTypeError: for a non-number argument, or a dtype the device does not hold (float64 on Metal).
    """
    lo, hi = float_arg(start, "linspace", "start"), float_arg(end, "linspace", "end")
    steps = int_arg(steps, "linspace", "steps")
    if steps < 0:
        raise EmberValueError(f"[linspace] steps must be >= 0, got {steps}")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise EmberValueError(f"[linspace] start and end must be finite, got {lo} and {hi}")
    dtype, device = _dt.to_dtype(dtype or _dt.float32), _dt.to_device(device)
    _check_holds(device, dtype, "linspace")
    # Computed in float64 on the CPU (a device may lack float64), then converted and moved.
    if steps <= 1:
        return full((steps,), lo, dtype=_dt.float64, device=_dt.cpu).to_dtype(dtype).to_device(device)
    step = (hi - lo) / (steps - 1)
    i = arange(steps, dtype=_dt.float64, device=_dt.cpu)
    half = steps // 2
    out = where(i.lt(half), i.affine(step, lo), i.affine(-1.0, steps - 1.0).affine(-step, hi))  # end - j * step
    return out.to_dtype(dtype).to_device(device)


METHODS = {  # bound onto Tensor by tensor_methods.py
    "log1p": log1p, "expm1": expm1, "rsqrt": rsqrt, "log2": log2, "log10": log10, "tan": tan, "sinh": sinh,
    "cosh": cosh, "asin": asin, "acos": acos, "atan": atan, "trunc": trunc, "chunk": chunk, "split": split,
    "unbind": unbind, "tril": tril, "triu": triu, "masked_fill": masked_fill, "var": var, "_var": _var, "std": std,
    "any": _any, "all": _all, "isnan": isnan, "isinf": isinf, "isfinite": isfinite, "isclose": _isclose,
    "allclose": allclose, "repeat": repeat, "tile": tile, "flip": flip,
}
