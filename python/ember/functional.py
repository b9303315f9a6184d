"""The functional namespace (em.exp(x), em.sum(x, dim), em.matmul(a, b), ...): one function per
elementwise, reduction and shape op, taking tensors, numpy arrays and Python scalars like the methods."""
from __future__ import annotations

import numpy as np

from . import softmax as _softmax
from .composite import isclose as _isclose
from .creation import tensor
from .errors import EmberTypeError
from .tensor_type import Tensor

UNARY_NAMES = (
    "exp", "log", "sin", "cos", "tanh", "sqrt", "sqr", "abs", "neg", "recip", "relu", "gelu", "silu", "erf",
    "ceil", "floor", "round", "sign", "sigmoid", "log1p", "expm1", "rsqrt", "log2", "log10", "tan", "sinh",
    "cosh", "asin", "acos", "atan", "trunc", "isnan", "isinf", "isfinite", "square", "reciprocal",
    "bitwise_not", "logical_not",
)
BINARY_NAMES = ("add", "sub", "mul", "div", "pow", "floor_divide", "remainder", "eq", "ne", "lt", "le", "gt", "ge",
                "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or", "logical_xor")
REDUCE_NAMES = ("sum", "mean", "max", "min", "argmax", "argmin", "logsumexp", "any", "all")
_REVERSED = {"add": "__radd__", "sub": "__rsub__", "mul": "__rmul__", "div": "__rtruediv__", "pow": "__rpow__",
             "floor_divide": "__rfloordiv__", "remainder": "__rmod__", "eq": "eq", "ne": "ne", "lt": "gt",
             "le": "ge", "gt": "lt", "ge": "le", "bitwise_and": "__rand__", "bitwise_or": "__ror__",
             "bitwise_xor": "__rxor__", "logical_and": "logical_and", "logical_or": "logical_or",
             "logical_xor": "logical_xor"}


def as_tensor(x, op="as_tensor"):
    """x as a tensor: a Tensor as it is, anything else through ``em.tensor`` (a numpy array keeps its
    dtype, Python floats become float32, ints int64).

    Args:
        x: a Tensor, numpy array, nested list or Python scalar.
        op: the op name for error messages.

    Returns:
        A Tensor (x itself when it already is one).

    Raises:
        DTypeError: for data that cannot become a tensor.
    """
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (str, bytes, dict)) or x is None:
        raise EmberTypeError(f"[{op}] expected a tensor, array or number, got {type(x).__name__}")
    return tensor(x)


def _unary(name):
    def fn(x):
        return getattr(as_tensor(x, name), name)()

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"``{name}`` of x, elementwise, as ``Tensor.{name}``.\n\n"
                  "Args:\n    x: a tensor, numpy array, list or Python scalar.\n\n"
                  f"Returns:\n    A new tensor (differentiable where {name} has a gradient).\n\n"
                  f"Raises:\n    DTypeError: for an input {name} does not take (a float-only op on ints).\n")
    return fn


def _binary(name):
    rev = _REVERSED[name]

    def fn(a, b):
        if isinstance(a, Tensor):
            return getattr(a, name)(b)
        if isinstance(b, Tensor):
            return getattr(b, rev)(a)
        return getattr(as_tensor(a, name), name)(b)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"``{name}`` of a and b, elementwise with numpy broadcasting, as ``torch.{name}``.\n\n"
                  "Args:\n    a: a tensor, numpy array, list or Python scalar.\n    b: likewise.\n\n"
                  "Returns:\n    A new tensor in the promoted dtype (em.result_type); comparisons and logical_* give bool.\n\n"
                  "Raises:\n    DTypeError: for an unsupported operand.\n"
                  "    ShapeError: when the shapes do not broadcast.\n")
    return fn


def _reduce(name):
    def fn(x, dim=None, keepdim=False):
        return getattr(as_tensor(x, name), name)(dim, keepdim)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"``{name}`` of x over dim, as ``Tensor.{name}``.\n\n"
                  "Args:\n    x: a tensor, numpy array or list.\n"
                  "    dim: an int, a tuple of ints (negative ok) or None for every dim.\n"
                  "    keepdim: keep the reduced dims with size 1.\n\n"
                  "Returns:\n    A new tensor.\n\n"
                  "Raises:\n    IndexOutOfRange: for a dim out of range.\n"
                  "    DTypeError: for an input the reduction does not take.\n")
    return fn


_ns = globals()
for _n in UNARY_NAMES:
    _ns[_n] = _unary(_n)
for _n in BINARY_NAMES:
    _ns[_n] = _binary(_n)
for _n in REDUCE_NAMES:
    _ns[_n] = _reduce(_n)
del _ns, _n


def matmul(a, b):
    """Matrix product with broadcast batch dims (1-D to n-D), as ``torch.matmul``.

    Args:
        a: a tensor (or numpy array / list).
        b: a tensor (or numpy array / list) of the same dtype.

    Returns:
        A new tensor.

    Raises:
        ShapeError: when the inner dims differ or the batch dims do not broadcast.
        DTypeError: when the dtypes differ.
    """
    return as_tensor(a, "matmul").matmul(as_tensor(b, "matmul"))


def softmax(x, dim=-1):
    """Softmax over one dim (one fused kernel), as ``torch.softmax``.

    Args:
        x: a float tensor.
        dim: the dim to normalise over.

    Returns:
        A new tensor, differentiable.

    Raises:
        DTypeError: for a non-float input.
        IndexOutOfRange: for a dim out of range.
    """
    return _softmax.softmax(as_tensor(x, "softmax"), dim)


def log_softmax(x, dim=-1):
    """log(softmax(x)) over one dim, computed stably, as ``torch.log_softmax``.

    Args:
        x: a float tensor.
        dim: the dim to normalise over.

    Returns:
        A new tensor, differentiable.

    Raises:
        DTypeError: for a non-float input.
        IndexOutOfRange: for a dim out of range.
    """
    return _softmax.log_softmax(as_tensor(x, "log_softmax"), dim)


def clamp(x, min=None, max=None):  # noqa: A002  (torch's names)
    """x limited to [min, max] elementwise (either bound may be None), as ``torch.clamp``.

    Args:
        x: a tensor, numpy array or list.
        min: the lower bound, or None.
        max: the upper bound, or None (max wins when min > max, as in torch).

    Returns:
        A new tensor (float32 for an int tensor with a float bound).

    Raises:
        DTypeError: for a bound that is not a real number.
    """
    return as_tensor(x, "clamp").clamp(min=min, max=max)


def broadcast_to(x, shape):
    """A broadcast (stride-0) view of x with the given shape, as ``torch.broadcast_to``.

    Args:
        x: a tensor (or numpy array / list).
        shape: the target shape; -1 keeps a dim's size.

    Returns:
        A view sharing x's storage (a new tensor for a non-tensor x).

    Raises:
        ShapeError: when x's shape does not broadcast to shape.
    """
    return as_tensor(x, "broadcast_to").expand(*(shape if isinstance(shape, (tuple, list)) else (shape,)))


def transpose(x, dim0, dim1):
    """x with two dims swapped (a view), as ``torch.transpose``.

    Args:
        x: a tensor.
        dim0: one dim.
        dim1: the other.

    Returns:
        A view of x.

    Raises:
        IndexOutOfRange: for a dim out of range.
    """
    return as_tensor(x, "transpose").transpose(dim0, dim1)


def reshape(x, *shape):
    """x in a new shape (a view when the layout allows, else a copy), as ``torch.reshape``.

    Args:
        x: a tensor.
        *shape: the new shape (ints or one tuple); one dim may be -1.

    Returns:
        A tensor of that shape.

    Raises:
        ShapeError: when the element counts differ.
    """
    return as_tensor(x, "reshape").reshape(*shape)


def permute(x, *dims):
    """x with its dims reordered (a view), as ``torch.permute``.

    Args:
        x: a tensor.
        *dims: a permutation of the dims (ints or one tuple).

    Returns:
        A view of x.

    Raises:
        IndexOutOfRange: for a dim out of range.
        ShapeError: when dims is not a permutation.
    """
    return as_tensor(x, "permute").permute(*dims)


def flatten(x, start_dim=0, end_dim=-1):
    """x with dims start_dim..end_dim merged into one, as ``torch.flatten``.

    Args:
        x: a tensor.
        start_dim: the first dim to merge.
        end_dim: the last dim to merge.

    Returns:
        A tensor (a view when the layout allows).

    Raises:
        IndexOutOfRange: for a dim out of range.
    """
    return as_tensor(x, "flatten").flatten(start_dim, end_dim)


def squeeze(x, dim=None):
    """x without its size-1 dims (or only dim), as ``torch.squeeze``.

    Args:
        x: a tensor.
        dim: one dim, or None for every size-1 dim.

    Returns:
        A view of x.

    Raises:
        IndexOutOfRange: for a dim out of range.
        ShapeError: when dim does not have size 1.
    """
    return as_tensor(x, "squeeze").squeeze(dim)


def unsqueeze(x, dim):
    """x with a new size-1 dim at dim (a view), as ``torch.unsqueeze``.

    Args:
        x: a tensor.
        dim: where the new dim goes, in [-ndim - 1, ndim].

    Returns:
        A view of x.

    Raises:
        IndexOutOfRange: for a dim out of range.
    """
    return as_tensor(x, "unsqueeze").unsqueeze(dim)


def _method(name, what):
    def fn(x, *args, **kwargs):
        return getattr(as_tensor(x, name), name)(*args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"{what}, as ``Tensor.{name}`` (see its docstring for the arguments).\n\n"
                  f"Args:\n    x: a tensor (or numpy array / list).\n    *args: as ``Tensor.{name}``.\n"
                  f"    **kwargs: as ``Tensor.{name}``.\n\n"
                  f"Returns:\n    What ``Tensor.{name}`` returns.\n\n"
                  f"Raises:\n    EmberError: what ``Tensor.{name}`` raises, named [{name}].\n")
    return fn


narrow = _method("narrow", "A view of length elements of x from start along dim")
index_select = _method("index_select", "The slices of x at integer indices along dim")
gather = _method("gather", "Elements of x picked along dim by an index tensor")
tril = _method("tril", "The lower triangle of the last two dims of x (the rest zero)")
triu = _method("triu", "The upper triangle of the last two dims of x (the rest zero)")
chunk = _method("chunk", "x split into a number of nearly equal views along dim")
split = _method("split", "x split into views of given sizes along dim")
unbind = _method("unbind", "The slices of x along dim, each without that dim")
flip = _method("flip", "x with the order of elements reversed along dims (a copy)")
masked_fill = _method("masked_fill", "x with value where a mask is set")
var = _method("var", "The variance over dims, with Bessel's correction by default")
std = _method("std", "The standard deviation over dims, with Bessel's correction by default")
tile = _method("tile", "x repeated along each dim")
affine = _method("affine", "x * mul + add elementwise (one pass)")
powf = _method("powf", "x ** e elementwise for a Python float e")


def isclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    """Elementwise ``|a - b| <= atol + rtol * |b|``, as ``torch.isclose``.

    Args:
        a: a tensor, numpy array, list or scalar.
        b: likewise (broadcast against a).
        rtol: the relative tolerance.
        atol: the absolute tolerance.
        equal_nan: whether two NaNs count as close.

    Returns:
        A bool tensor (True where close); infinities are close only to themselves.

    Raises:
        ShapeError: when the shapes do not broadcast.
    """
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = as_tensor(a, "isclose")
    return _isclose(a, b, rtol, atol, equal_nan)


def allclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False) -> bool:
    """Whether every element of a is close to b (``isclose``), as ``torch.allclose``.

    Args:
        a: a tensor, numpy array, list or scalar.
        b: likewise.
        rtol: the relative tolerance.
        atol: the absolute tolerance.
        equal_nan: whether two NaNs count as close.

    Returns:
        A bool.

    Raises:
        ShapeError: when the shapes do not broadcast.
    """
    return bool(isclose(a, b, rtol, atol, equal_nan).all().item())


def numel(x) -> int:
    """The number of elements of x.

    Args:
        x: a tensor or numpy array.

    Returns:
        An int.

    Raises:
        DTypeError: for something that is not array-like.
    """
    return as_tensor(x, "numel").numel() if not isinstance(x, np.ndarray) else int(x.size)
