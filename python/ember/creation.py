"""Creation functions: em.tensor / from_numpy from data, and zeros, ones, full, arange, rand, randn, randint."""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from . import _C
from . import dtypes as _dt
from .args import float_arg, int_arg
from .errors import (
    DLPackCopyWarning,
    DTypeError,
    EmberTypeError,
    EmberValueError,
    GradientsInStore,
    OutOfMemory,
    ShapeError,
)
from .generator import drawing
from .interop import from_dlpack
from .memory import _physical_memory
from .tensor_type import Tensor, _check_tensor_arg, _from_array, _shape_arg, _wrap


def _no_requires_grad(flag, op):
    """torch's requires_grad=True: ember marks what to differentiate by type (em.Var), so it says so."""
    if flag:
        raise GradientsInStore(f"[{op}] ember has no requires_grad flag: wrap the tensor in em.Var(...) (a leaf that "
                               "tracks gradients); g = loss.backward() returns the gradients, g[v]")


def _check_holds(device, dtype, op):
    """Raises DTypeError naming ``op`` when ``device`` (available) cannot hold ``dtype`` (float64 on
    Metal), before anything is made, so the refusal names the function the user called."""
    if device.type != "cpu" and _C.device_available(device.kind, device.index) \
            and not _C.device_supports(device.kind, device.index, dtype.code):
        raise DTypeError(f"[{op}] {dtype.name} is not supported on {device}")


def _tensor_to(t, dtype, device, op):
    """Tensor ``t`` converted to ``dtype`` (None: its own) on ``device`` (None: its own); the cast runs
    on whichever of the two devices holds both dtypes, so a float64 CPU tensor can become float32 on Metal."""
    device = t._device if device is None else device
    dtype = t._dtype if dtype is None else _dt.to_dtype(dtype)
    _check_holds(device, dtype, op)
    if device == t._device:
        return t.to_dtype(dtype)
    if _C.device_supports(device.kind, device.index, t._dtype.code):
        return t.to_device(device).to_dtype(dtype)
    return t.to_dtype(dtype).to_device(device)


def tensor(data, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A new tensor holding a copy of ``data``.

    Args:
        data: a Python scalar, nested lists, a numpy array, a Tensor, or an object with
            ``__dlpack__``. Python floats become float32 and Python ints int64 (with ``dtype``
            given, Python floats are rounded once, straight to it); a numpy array keeps its dtype
            (float64 stays float64, int32 and bool stay; int8, int16 and uint16 widen to int64).
        dtype: convert to this dtype (an ``em.DType``, its name or a numpy dtype).
        device: put the tensor on this device (default: the default device; for a Tensor or a
            DLPack object, its own device).
        requires_grad: must be False: ember marks what to differentiate by type (``em.Var``); True
            raises GradientsInStore saying so.

    Returns:
        Tensor: a new tensor; it never shares memory with ``data``.

    Raises:
        DTypeError: ragged or non-numeric data, or a dtype unknown or not held by the device
            (float64 on Metal), named ``[tensor]``.
    """
    _no_requires_grad(requires_grad, "tensor")
    if isinstance(data, Tensor):
        out = _tensor_to(data.detach(), dtype, None if device is None else _dt.to_device(device), "tensor")
        return out.copy().detach() if out is data or out._storage is data._storage else out
    explicit_device, device = device is not None, _dt.to_device(device)
    arr = data if isinstance(data, np.ndarray) else None
    if arr is None:
        if hasattr(data, "__dlpack__") and not isinstance(data, (list, tuple)):
            with warnings.catch_warnings():  # em.tensor copies anyway: widening is no surprise here
                warnings.simplefilter("ignore", DLPackCopyWarning)
                src = from_dlpack(data)
            out = _tensor_to(src, dtype, device if explicit_device else None, "tensor")
            return out if out._storage is not src._storage else out.copy().detach()
        else:
            try:
                arr = np.asarray(data)
            except ValueError as e:  # ragged nesting
                raise DTypeError(f"[tensor] cannot build a tensor from ragged or non-numeric data: {e}") from None
            if arr.dtype == np.float64 and not isinstance(data, np.generic) and (
                    dtype is None or _dt.to_dtype(dtype) is _dt.float32):
                arr = arr.astype(np.float32)  # Python floats default to float32 (another dtype: one rounding to it)
            elif arr.dtype.kind in "iu" and not isinstance(data, np.generic) and arr.dtype != np.int64:
                arr = arr.astype(np.int64)
            elif arr.dtype == object:
                raise DTypeError("[tensor] cannot build a tensor from ragged or non-numeric data")
    if not arr.dtype.isnative:  # byte-swapped data (e.g. read from a big-endian file): swap to native
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype == np.bool_:  # a bool array's bytes may be any value (a view of other data): ember's are 0 or 1
        arr = arr.view(np.uint8) != 0
    src_dt = _dt.from_numpy_dtype(arr.dtype)
    target = _dt.to_dtype(dtype) if dtype is not None else src_dt
    _check_holds(device, target, "tensor")
    out = _from_array(arr, src_dt, _dt.cpu)
    if target is not src_dt:
        out = out.to_dtype(target)
    return out.to_device(device)


def from_numpy(arr) -> Tensor:
    """A new tensor holding a copy of the numpy array ``arr`` in its dtype; the same as ``em.tensor(arr)``."""
    return tensor(arr)


def _full_storage(device, dtype, n, value):
    """n copies of value; integers beyond 2**53 skip the double the C++ fill takes, so no bit is lost."""
    if not dtype.is_float and isinstance(value, numbers.Integral) and abs(int(value)) > 2**53:
        arr = np.full(n, int(value) & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64).view(np.int64)  # wraps like a C cast
        return tensor(arr).to_dtype(dtype).to_device(device)._storage
    return _C.full(device.kind, device.index, dtype.code, n, float(value))


def _checked_numel(shape, op):
    """The element count of a requested shape; negative dims, and counts an int64 cannot hold (the
    C++ side would otherwise see a wrapped, tiny count), raise ShapeError."""
    n = big = 1
    for d in shape:
        if d < 0:
            raise ShapeError(f"[{op}] negative dimension in shape {shape}")
        n *= d
        big *= max(d, 1)  # zero dims too: the strides of (2**40, 2**40, 0) would overflow
    if big >= 2**63:
        raise ShapeError(f"[{op}] shape {shape} has more elements than an int64 can count")
    return n


def _check_fits(nbytes, op):
    """Refuses, before anything is allocated, a result larger than this machine's memory (a device's
    memory included: Metal's is the host's), with an OutOfMemory naming ``op``."""
    total = _physical_memory()
    if total and nbytes > total:
        raise OutOfMemory(f"[{op}] the result needs {nbytes} bytes ({nbytes / 2**30:.1f} GiB), more than this "
                          f"machine's {total / 2**30:.1f} GiB of memory")


def _alloc_full(shape, value, dtype, device, op="full"):
    n = _checked_numel(shape, "full")  # shape errors keep the name the shape parser gives them
    _check_holds(device, dtype, op)
    exact_int = isinstance(value, (numbers.Integral, np.integer))  # kept exact (past 2**53) for int dtypes
    if dtype.is_float or not exact_int:
        v = float_arg(value, "full", "value")
        if not dtype.is_float and not math.isfinite(v):  # like torch: no int holds nan or inf
            raise EmberValueError(f"[{op}] cannot fill a {dtype.name} tensor with {v}")
        value = value if exact_int else v
    s = _full_storage(device, dtype, n, value)
    return _wrap(s, _C.Layout.contiguous(list(shape)), dtype, device)


def zeros(*shape, dtype=None, device=None, requires_grad=False):
    """A new tensor of zeros.

    Args:
        shape: the sizes, as separate ints (``zeros(2, 3)``) or one tuple (``zeros((2, 3))``).
        dtype: the element type (default float32).
        device: where the tensor lives (default the CPU).
        requires_grad: must be False: ember marks what to differentiate by type (``em.Var``); True
            raises GradientsInStore saying so.

    Raises:
        ShapeError: a negative dim, or more elements than an int64 counts.
        DTypeError: a dtype the device does not hold (float64 on Metal).
    """
    _no_requires_grad(requires_grad, "zeros")
    return _alloc_full(_shape_arg(shape, "full"), 0, _dt.to_dtype(dtype or _dt.float32), _dt.to_device(device), "zeros")


def ones(*shape, dtype=None, device=None, requires_grad=False):
    """A new tensor of ones.

    Args:
        shape: the sizes, as separate ints (``zeros(2, 3)``) or one tuple (``zeros((2, 3))``).
        dtype: the element type (default float32).
        device: where the tensor lives (default the CPU).
        requires_grad: must be False: ember marks what to differentiate by type (``em.Var``); True
            raises GradientsInStore saying so.

    Raises:
        ShapeError: a negative dim, or more elements than an int64 counts.
        DTypeError: a dtype the device does not hold (float64 on Metal).
    """
    _no_requires_grad(requires_grad, "ones")
    return _alloc_full(_shape_arg(shape, "full"), 1, _dt.to_dtype(dtype or _dt.float32), _dt.to_device(device), "ones")


def full(shape, value, dtype=None, device=None, requires_grad=False):
    """A new tensor with every element set to ``value``.

    Args:
        shape: the sizes, a tuple of ints (or one int).
        value: the fill value, a Python number.
        dtype: the element type (default int64 for an int value, else float32).
        device: where the tensor lives (default the CPU).
        requires_grad: must be False: ember marks what to differentiate by type (``em.Var``); True
            raises GradientsInStore saying so.

    Raises:
        EmberValueError: a NaN or infinite value for an integer dtype.
        DTypeError: a dtype the device does not hold (float64 on Metal).
    """
    _no_requires_grad(requires_grad, "full")
    if isinstance(shape, np.ndarray):
        shape = shape.tolist()
    shape = _shape_arg(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), "full")
    if dtype is None:
        dtype = _dt.int64 if isinstance(value, numbers.Integral) and not isinstance(value, bool) else _dt.float32
    return _alloc_full(shape, value, _dt.to_dtype(dtype), _dt.to_device(device))


def zeros_like(t, dtype=None):
    """A new tensor of zeros with the shape and device of tensor ``t``.

    Args:
        t: the tensor whose shape and device the result takes.
        dtype: the element type (default ``t``'s).

    Returns:
        Tensor: a new contiguous tensor.

    Raises:
        EmberTypeError: ``t`` is not a Tensor.
        DTypeError: a dtype ``t``'s device does not hold (float64 on Metal).
    """
    _check_tensor_arg(t, "zeros_like", "input")
    return _alloc_full(t.shape, 0, _dt.to_dtype(dtype or t._dtype), t._device, "zeros_like")


def ones_like(t, dtype=None):
    """A new tensor of ones with the shape and device of tensor ``t``.

    Args:
        t: the tensor whose shape and device the result takes.
        dtype: the element type (default ``t``'s).

    Returns:
        Tensor: a new contiguous tensor.

    Raises:
        EmberTypeError: ``t`` is not a Tensor.
        DTypeError: a dtype ``t``'s device does not hold (float64 on Metal).
    """
    _check_tensor_arg(t, "ones_like", "input")
    return _alloc_full(t.shape, 1, _dt.to_dtype(dtype or t._dtype), t._device, "ones_like")


def full_like(t, value, dtype=None):
    """A new tensor filled with ``value``, with the shape and device of tensor ``t``.

    Args:
        t: the tensor whose shape and device the result takes.
        value: the fill value, a Python number.
        dtype: the element type (default ``t``'s).

    Returns:
        Tensor: a new contiguous tensor.

    Raises:
        EmberTypeError: ``t`` is not a Tensor.
        EmberValueError: a NaN or infinite value for an integer dtype.
        DTypeError: a dtype ``t``'s device does not hold (float64 on Metal).
    """
    _check_tensor_arg(t, "full_like", "input")
    return _alloc_full(t.shape, value, _dt.to_dtype(dtype or t._dtype), t._device, "full_like")


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    """The values ``start, start + step, ...`` below ``end`` (above it for a negative step).

    Args:
        start: the first value; with ``end`` None, the end (and the start is 0).
        end: the bound, not included.
        step: the spacing, nonzero.
        dtype: the element type (default int64 when every argument is an int, else float32).
        device: where the tensor lives (default the CPU).
        requires_grad: must be False: ember marks what to differentiate by type (``em.Var``); True
            raises GradientsInStore saying so.

    Returns:
        Tensor: 1-D.

    Raises:
        EmberValueError: a zero step, a count that is not finite, or a fractional step for an
            integer dtype (as torch refuses it).
        DTypeError: a dtype the device does not hold (float64 on Metal).
    """
    _no_requires_grad(requires_grad, "arange")
    if end is None:
        start, end = 0, start
    if step == 0:
        raise EmberValueError("[arange] step must be nonzero")
    if not all(isinstance(v, numbers.Real) for v in (start, end, step)):
        raise EmberTypeError(f"[arange] start, end and step must be real numbers, got {start!r}, {end!r}, {step!r}")
    all_int = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    dtype = _dt.to_dtype(dtype or (_dt.int64 if all_int else _dt.float32))
    if not dtype.is_float and not all(float(v).is_integer() for v in (start, end, step) if not isinstance(v, numbers.Integral)):
        # numpy's answer (arange(0, 3, 0.2, int64) is fifteen zeros) follows from casting its first two
        # values; torch refuses. Neither is a useful integer range, so refuse with the reason.
        raise EmberValueError(f"[arange] an integer dtype ({dtype.name}) needs integral start, end and step, got "
                              f"arange({start}, {end}, {step}); use a float dtype and cast, or integer arguments")
    if all_int:
        n = max(0, -((int(start) - int(end)) // int(step)))  # exact ceil, even past 2**53
    else:
        q = (float(end) - float(start)) / float(step)
        if not math.isfinite(q):
            raise EmberValueError(f"[arange] the count of arange({start}, {end}, {step}) is not finite")
        n = max(0, math.ceil(q))
    if n >= 2**62:  # beyond any memory; would wrap int64 element and byte counts
        raise EmberValueError(f"[arange] arange({start}, {end}, {step}) has {n} elements, too many")
    device = _dt.to_device(device)
    _check_holds(device, dtype, "arange")
    s = _C.arange(device.kind, device.index, dtype.code, float(start), float(step), n)
    return _wrap(s, _C.Layout.contiguous([n]), dtype, device)


def rand(*shape, dtype=None, device=None, lo=0.0, hi=1.0, requires_grad=False, generator=None):
    """A new tensor of uniform random values in ``[lo, hi)``; ``em.manual_seed`` makes it reproducible.

    Args:
        shape: the sizes, as separate ints (``zeros(2, 3)``) or one tuple (``zeros((2, 3))``).
        dtype: the element type (default float32).
        device: where the tensor lives (default the CPU).
        lo: the lower bound.
        hi: the upper bound.
        requires_grad: must be False: ember marks what to differentiate by type (``em.Var``); True
            raises GradientsInStore saying so.
        generator: an ``em.Generator`` to draw from instead of the global stream.
    """
    _no_requires_grad(requires_grad, "rand")
    shape = _shape_arg(shape, "rand")
    dtype, device = _dt.to_dtype(dtype or _dt.float32), _dt.to_device(device)
    n = _checked_numel(shape, "rand")  # np.prod would wrap silently
    lo, hi = float_arg(lo, "rand", "lo"), float_arg(hi, "rand", "hi")
    with drawing(generator, "rand"):
        s = _C.rand_uniform(device.kind, device.index, dtype.code, n, lo, hi)
    return _wrap(s, _C.Layout.contiguous(list(shape)), dtype, device)


def randn(*shape, dtype=None, device=None, mean=0.0, std=1.0, requires_grad=False, generator=None):
    """A new tensor of normally distributed random values; ``em.manual_seed`` makes it reproducible.

    Args:
        shape: the sizes, as separate ints (``zeros(2, 3)``) or one tuple (``zeros((2, 3))``).
        dtype: the element type (default float32).
        device: where the tensor lives (default the CPU).
        mean: the mean of the distribution.
        std: its standard deviation.
        requires_grad: must be False: ember marks what to differentiate by type (``em.Var``); True
            raises GradientsInStore saying so.
        generator: an ``em.Generator`` to draw from instead of the global stream.
    """
    _no_requires_grad(requires_grad, "randn")
    shape = _shape_arg(shape, "randn")
    dtype, device = _dt.to_dtype(dtype or _dt.float32), _dt.to_device(device)
    n = _checked_numel(shape, "randn")
    mean, std = float_arg(mean, "randn", "mean"), float_arg(std, "randn", "std")
    with drawing(generator, "randn"):
        s = _C.rand_normal(device.kind, device.index, dtype.code, n, mean, std)
    return _wrap(s, _C.Layout.contiguous(list(shape)), dtype, device)


# The values each integer dtype holds: randint's bounds are checked against them.
_INT_RANGE = {"int64": (-(2**63), 2**63 - 1), "int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1),
              "uint8": (0, 255), "bool": (0, 1)}


def randint(*args, size=None, dtype=None, device=None, requires_grad=False, generator=None):
    """A new tensor of integers drawn uniformly from ``[low, high)``, as ``torch.randint``;
    ``em.manual_seed`` makes it reproducible.

    Called as ``randint(high, size)`` or ``randint(low, high, size)`` (``size`` may also be given by
    keyword). The integers are drawn directly from 64-bit random values (without bias, for any range
    up to 2**64 wide, every low bit random), on the CPU's generator, in the result's integer dtype;
    the same seed gives the same values on every device.

    Args:
        *args: ``high`` or ``low, high`` (ints), then the shape as a tuple.
        size: the shape (a tuple of ints), when not given positionally.
        dtype: the element type (default int64; int32, uint32, uint8, bool and the floats also work).
        device: where the tensor lives (default: the default device).
        requires_grad: must be False (integers never take gradients).
        generator: an ``em.Generator`` to draw from instead of the global stream.

    Returns:
        Tensor: a new tensor of the given shape and dtype.

    Raises:
        EmberValueError: ``high <= low``, bounds outside what the dtype holds, or a bad argument list.
        DTypeError: non-integer bounds, or a dtype the device does not hold.
    """
    _no_requires_grad(requires_grad, "randint")
    if size is None and args and isinstance(args[-1], (tuple, list)):
        args, size = args[:-1], args[-1]
    if len(args) not in (1, 2) or size is None:
        raise EmberValueError("[randint] expected randint(high, size) or randint(low, high, size)")
    low, high = (0, args[0]) if len(args) == 1 else args
    low, high = int_arg(low, "randint", "low"), int_arg(high, "randint", "high")
    if high <= low:
        raise EmberValueError(f"[randint] expected low < high, got low={low}, high={high}")
    dtype, device = _dt.to_dtype(dtype or _dt.int64), _dt.to_device(device)
    _check_holds(device, dtype, "randint")
    lo_ok, hi_ok = _INT_RANGE.get(dtype.name, (-(2**63), 2**63))
    if low < lo_ok or high - 1 > hi_ok:
        raise EmberValueError(f"[randint] [{low}, {high}) is outside the values {dtype.name} holds")
    shape = _shape_arg(tuple(size), "randint")
    n = _checked_numel(shape, "randint")
    draw = dtype if not dtype.is_float else _dt.int64  # floats: exact integers, then one rounding each
    _check_fits(n * draw.itemsize, "randint")
    with drawing(generator, "randint"):
        s = _C.rand_int_host(draw.code, n, low, high - low - 1)
    out = _wrap(s, _C.Layout.contiguous(list(shape)), draw, _dt.cpu)
    return _tensor_to(out, dtype, device, "randint")


def manual_seed(n: int):
    """Seeds the generator behind ``rand`` / ``randn``: the same seed ``n`` gives the same values on
    any thread count."""
    _C.manual_seed(int_arg(n, "manual_seed", "seed") & 0xFFFFFFFFFFFFFFFF)


def eye(n, m=None, dtype=None, device=None):
    """The n x m identity matrix (ones on the main diagonal), as ``torch.eye``.

    Args:
        n: the number of rows, >= 0.
        m: the number of columns (default n).
        dtype: the dtype (default float32).
        device: the device (default: the default device).

    Returns:
        A new tensor of shape (n, m).

    Raises:
        ShapeError: for a negative size.
        DTypeError: for a non-integer size, or a dtype the device does not hold (float64 on Metal).
    """
    n = int_arg(n, "eye", "n")
    m = n if m is None else int_arg(m, "eye", "m")
    if n < 0 or m < 0:
        raise ShapeError(f"[eye] sizes must be >= 0, got ({n}, {m})")
    dtype, device = _dt.to_dtype(dtype or _dt.float32), _dt.to_device(device)
    _check_holds(device, dtype, "eye")
    rows, cols = arange(n, device=device).reshape(n, 1), arange(m, device=device).reshape(1, m)
    return rows.eq(cols).to_dtype(dtype)

