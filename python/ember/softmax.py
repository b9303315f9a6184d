"""The fused softmax and log_softmax (one kernel each way, on every device) as custom ops, with their
composite references; below Tensor's methods (x.softmax) and nn.ops, which re-exports them."""
from __future__ import annotations

from . import _C
from .custom_op import CustomOp1
from .errors import EmberTypeError, ShapeError
from .fused_op import FusedOp
from .kernel_result import dense_like as _out
from .tensor_type import Tensor, _dim

_F = _C.fused


def _check_tensor(x, op, what="input"):
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor {what}, got {type(x).__name__}")


class _Softmax(FusedOp, CustomOp1):
    """The fused softmax over the last dim; its composite (over ``dim``) is also ``softmax_slow``."""

    name = "softmax_last_dim"
    log = False

    def __init__(self, dim=-1):
        self.dim = dim

    def cpu_fwd(self, storage, layout):
        return _F.softmax_fwd(storage, layout, self.log), layout.shape

    def bwd_kernel(self, x, y, g):
        return _out(_F.softmax_bwd(y._storage, y._layout, g._storage, g._layout, self.log), x.shape, x)

    def composite(self, x):
        d = self.dim
        if self.log:
            return x - x.logsumexp(d, keepdim=True)
        e = (x - x.max(d, keepdim=True).detach()).exp()
        return e / e.sum(d, keepdim=True)


class _LogSoftmax(_Softmax):
    name = "log_softmax_last_dim"
    log = True


def _last_dim_apply(x, dim, op_cls, name):
    """Runs a last-dim kernel over ``dim`` through a transposed view (no copy)."""
    _check_tensor(x, name)
    if x.ndim == 0:
        raise ShapeError(f"[{name}] expected at least 1 dim, got a scalar")
    d = _dim(dim, x.ndim, name)
    if d == x.ndim - 1:
        return x.apply_op1(op_cls())
    return x.transpose(d, -1).apply_op1(op_cls()).transpose(d, -1)


def softmax_last_dim(x: Tensor) -> Tensor:
    """``softmax(x, -1)``, candle's name: the softmax over the last dim, one fused kernel.

    Args:
        x: a float tensor.

    Returns:
        Tensor: same shape and dtype; differentiable.
    """
    return _last_dim_apply(x, -1, _Softmax, "softmax")


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """``exp(x) / sum(exp(x))`` over ``dim``, as one fused kernel (f16/bf16 accumulate in f32).

    Args:
        x: a float tensor (f32, f16, bf16, f64; any strides and offset).
        dim: the dim to normalise over (negative counts from the end).

    Returns:
        Tensor: same shape and dtype; differentiable (the backward is one fused kernel; under
        ``create_graph=True`` a composite, so second derivatives work).

    Raises:
        DTypeError: ``x`` is not a float tensor.
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _last_dim_apply(x, dim, _Softmax, "softmax")


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """``x - logsumexp(x)`` over ``dim``, as one fused kernel.

    Args:
        x: a float tensor (f32, f16, bf16, f64; any strides and offset).
        dim: the dim to normalise over (negative counts from the end).

    Returns:
        Tensor: same shape and dtype; differentiable (the backward is one fused kernel; under
        ``create_graph=True`` a composite, so second derivatives work).

    Raises:
        DTypeError: ``x`` is not a float tensor.
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _last_dim_apply(x, dim, _LogSoftmax, "log_softmax")


def softmax_slow(x: Tensor, dim: int = -1) -> Tensor:
    """Composite reference for tests: ``exp(x - max) / sum(exp(x - max))`` over ``dim``, in Tensor ops
    (the fused softmax's composite form, which its create_graph backward differentiates)."""
    return _Softmax(dim).composite(x)


def log_softmax_slow(x: Tensor, dim: int = -1) -> Tensor:
    """Composite reference for tests: ``x - logsumexp(x)`` over ``dim``, in Tensor ops (the fused
    log_softmax's composite form)."""
    return _LogSoftmax(dim).composite(x)
