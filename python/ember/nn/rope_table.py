"""RoPE with caller-supplied cos/sin tables, candle's three layouts (rope, rope_i, rope_thd): the fused
rope kernel reading the angles from the table; a composite when the tables themselves need a gradient."""
from __future__ import annotations

from .. import _C
from ..backprop import is_grad_enabled, tracks
from ..custom_op import CustomOp1
from ..errors import DeviceError, DTypeError, EmberTypeError, ShapeError
from ..fused_op import FusedOp
from ..kernel_result import dense_like
from ..multi import cat, stack
from ..tensor_type import Tensor

__all__ = ["rope_tables", "rope_i", "rope_thd"]


class _RopeTable(FusedOp, CustomOp1):
    """The fused rotation by a (1 or B, L, dims) (cos | sin) table; its adjoint (the backward) is the
    rotation with the sines negated, itself recorded when the graph is kept (rope is linear in x, so
    higher derivatives need no composite). Its composite form is ``_composite``'s."""

    name = "rope"

    def __init__(self, table, traditional, inverse=False):
        self.table, self.traditional, self.inverse = table, traditional, inverse

    def _run(self, s, l, inverse):
        t = self.table
        return _C.fused.rope(s, l, t.shape[-1], self.traditional, inverse=inverse, table=t._storage,
                             ltable=t._layout)

    def cpu_fwd(self, storage, layout):
        return self._run(storage, layout, self.inverse), layout.shape

    def bwd(self, x, y, g):
        if not is_grad_enabled():
            return dense_like(self._run(g._storage, g._layout, not self.inverse), x.shape, x)
        return g.apply_op1(_RopeTable(self.table, self.traditional, not self.inverse))

    def composite(self, x):
        t = self.table if self.table.shape[0] > 1 else self.table.squeeze(0)
        n = t.shape[-1] // 2
        sin = t.narrow(-1, n, n)
        return _composite(x, t.narrow(-1, 0, n), -sin if self.inverse else sin, self.traditional)


def _check(x, cos, sin, op):
    for t, what in ((x, "input"), (cos, "cos"), (sin, "sin")):
        if not isinstance(t, Tensor):
            raise EmberTypeError(f"[{op}] expected a Tensor {what}, got {type(t).__name__}")
        if not t.dtype.is_float:
            raise DTypeError(f"[{op}] {what} must be a float tensor, got {t.dtype.name}")
        if t.device != x.device:
            raise DeviceError(f"[{op}] {what} is on {t.device}, input on {x.device}")
    if x.ndim < 2:
        raise ShapeError(f"[{op}] expected an input of shape (..., T, D), got {x.shape}")
    if cos.shape != sin.shape:
        raise ShapeError(f"[{op}] cos {cos.shape} and sin {sin.shape} differ")
    t, d = x.shape[-2], x.shape[-1]
    lead_ok = cos.ndim == 2 or (cos.ndim == 3 and x.ndim >= 3 and cos.shape[0] in (1, x.shape[0]))
    if not lead_ok or cos.shape[-2] != t or 2 * cos.shape[-1] > d or cos.shape[-1] == 0:
        raise ShapeError(f"[{op}] expected cos/sin of shape ({t}, n) or (batch, {t}, n) with 2n <= {d} for input "
                         f"{x.shape}, got {cos.shape}")


def _composite(x, cos, sin, interleaved):
    """The rotation in Tensor ops: differentiable with respect to the tables as well."""
    half = cos.shape[-1]
    if cos.ndim == 3 and x.ndim > 3:  # (B, T, n) against (B, H.., T, D)
        cos = cos.reshape(cos.shape[0], *([1] * (x.ndim - 3)), *cos.shape[1:])
        sin = sin.reshape(cos.shape)
    cos, sin = cos.to_dtype(x.dtype), sin.to_dtype(x.dtype)
    rot = x.narrow(-1, 0, 2 * half)
    if interleaved:
        pairs = rot.reshape(*x.shape[:-1], half, 2)
        a, b = pairs.narrow(-1, 0, 1).squeeze(-1), pairs.narrow(-1, 1, 1).squeeze(-1)
        out = stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(*x.shape[:-1], 2 * half)
    else:
        a, b = rot.narrow(-1, 0, half), rot.narrow(-1, half, half)
        out = cat([a * cos - b * sin, a * sin + b * cos], -1)
    if 2 * half == x.shape[-1]:
        return out
    return cat([out, x.narrow(-1, 2 * half, x.shape[-1] - 2 * half)], -1)


def rope_tables(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False, op: str = "rope") -> Tensor:
    """Rotary embedding with the caller's angles (candle's ``rope`` / ``rope_i``): the feature pairs ``i <
    n`` of the row at position ``t`` become ``(a cos[t, i] - b sin[t, i], a sin[t, i] + b cos[t, i])``, with
    ``(a, b) = (x[i], x[i + n])`` (Llama's ``rotate_half`` layout) or, ``interleaved``, ``(x[2i], x[2i + 1])``;
    features from ``2n`` on pass through. One fused kernel forward and one backward, on every device.

    Args:
        x: a float tensor (..., T, D), any strides and offset.
        cos: (T, n) or (B, T, n) float cosines, ``2n <= D``; B is dim 0 of ``x`` (for per-sequence positions).
        sin: the sines, shaped as ``cos``.
        interleaved: the pairs ``(2i, 2i + 1)`` (GPT-J) instead of ``(i, i + n)``.
        op: the name errors use.

    Returns:
        Tensor: x's shape and dtype; differentiable with respect to ``x``, and to ``cos``/``sin`` when they
        track a gradient (then the rotation runs as Tensor ops).

    Raises:
        EmberTypeError, DTypeError, DeviceError, ShapeError: for inputs that do not fit together.
    """
    _check(x, cos, sin, op)
    if is_grad_enabled() and (tracks(cos) or tracks(sin)):
        return _composite(x, cos, sin, interleaved)
    sdt = "float64" if x.dtype.name == "float64" else "float32"
    table = cat([cos.detach().to_dtype(sdt), sin.detach().to_dtype(sdt)], -1)
    table = table.reshape(1 if table.ndim == 2 else table.shape[0], *table.shape[-2:]).contiguous()
    return x.apply_op1(_RopeTable(table, bool(interleaved)))


def rope_i(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """candle's ``rope_i``: ``rope_tables`` with interleaved pairs ``(x[2i], x[2i + 1])``.

    Args:
        x: (B, H, T, D) (any leading dims; T second to last).
        cos: (T, D / 2) or (B, T, D / 2) cosines.
        sin: the sines, shaped as ``cos``.

    Returns:
        Tensor: x's shape and dtype, differentiable.

    Raises:
        EmberTypeError, DTypeError, DeviceError, ShapeError: as ``rope_tables``.
    """
    return rope_tables(x, cos, sin, interleaved=True, op="rope_i")


def rope_thd(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """candle's ``rope_thd``: the ``rotate_half`` rotation of an input laid out (B, T, H, D) (positions
    before heads), without moving any data (the kernel reads the transposed view).

    Args:
        x: (B, T, H, D).
        cos: (T, D / 2) or (B, T, D / 2) cosines.
        sin: the sines, shaped as ``cos``.

    Returns:
        Tensor: (B, T, H, D), x's dtype, differentiable (a transposed view of a dense result).

    Raises:
        EmberTypeError, DTypeError, DeviceError, ShapeError: as ``rope_tables``; ``x`` not 4-D.
    """
    if isinstance(x, Tensor) and x.ndim != 4:
        raise ShapeError(f"[rope_thd] expected an input of shape (B, T, H, D), got {x.shape}")
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[rope_thd] expected a Tensor input, got {type(x).__name__}")
    return rope_tables(x.transpose(1, 2), cos, sin, op="rope_thd").transpose(1, 2)
