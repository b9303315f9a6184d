"""Fused recurrent cells (LSTM, GRU, Elman RNN): everything after the two gate GEMMs in one kernel per device,
forward and backward, with their composite references (the create_graph path and the tests' oracle)."""
from __future__ import annotations

from .. import _C
from ..creation import zeros
from ..custom_op import CustomOp
from ..custom_op_n import apply_op
from ..errors import EmberTypeError, EmberValueError
from ..fused_op import FusedOp
from ..kernel_result import dense_like as _dense
from ..tensor_type import Tensor

_F = _C.fused

__all__ = ["gru_cell", "gru_cell_slow", "lstm_cell", "lstm_cell_slow", "rnn_cell", "rnn_cell_slow"]


def _check(op, **tensors):
    for what, t in tensors.items():
        if t is not None and not isinstance(t, Tensor):
            raise EmberTypeError(f"[{op}] expected a Tensor {what}, got {type(t).__name__}")


def _rows(t: Tensor) -> Tensor:
    """t itself when its rows have unit column stride (what the kernels read in place), else a dense copy."""
    if t.ndim == 2 and (t.shape[1] <= 1 or t._layout.stride[1] == 1):
        return t
    return t.contiguous()


def _grad(g, like):
    """An output's gradient with unit column stride, zeros where none arrives."""
    return zeros(*like.shape, dtype=like.dtype, device=like.device) if g is None else _rows(g)


def _pre(xg, hg, bias):
    z = xg + hg
    return z if bias is None else z + bias


class _Cell(FusedOp, CustomOp):
    """One recurrent cell over the gates (xg, hg), the state (LSTM: c, GRU: h) and the optional bias b_hh.
    The forward's workspace (the activated gates) stays on the op for the fused backward; each cell's
    composite form (its ``*_cell_slow``) gives the create_graph backward."""

    kind = ""
    has_state = True
    saved = "ws"

    def __init__(self, has_bias):
        self.has_bias = has_bias
        self.ws = None

    def cpu_fwd(self, inputs):
        (xs, xl), (hs, hl) = inputs[0], inputs[1]
        s = inputs[2] if self.has_state else (None, None)
        b = inputs[-1] if self.has_bias else (None, None)
        h, c, self.ws = _F.rnn_cell_fwd(self.kind, xs, xl, hs, hl, b[0], b[1], s[0], s[1])
        n, g = xl.shape
        hid = g // (4 if self.kind == "lstm" else 3 if self.kind == "gru" else 1)
        self.ws_layout = _C.Layout.contiguous([n, hid * (4 if self.has_state else 1)])  # the workspace's (N, W)
        return [(h, (n, hid))] + ([(c, (n, hid))] if c is not None else [])

    def bwd_kernel(self, inputs, outputs, grads):
        xg, s = inputs[0], (inputs[2] if self.has_state else None)
        dh = _grad(grads[0], outputs[0])
        dc = _grad(grads[1], outputs[1]) if self.kind == "lstm" else None
        dxg, dhg, ds = _F.rnn_cell_bwd(self.kind, self.ws, self.ws_layout, s._storage if s is not None else None,
                                       s._layout if s is not None else None, dh._storage, dh._layout,
                                       dc._storage if dc is not None else None, dc._layout if dc is not None else None)
        dx = _dense(dxg, xg.shape, xg)
        dy = dx if dhg is None else _dense(dhg, xg.shape, xg)
        res = [dx, dy] + ([_dense(ds, s.shape, s)] if self.has_state else [])
        if self.has_bias:
            res.append(dy.sum(0))
        return res


class _Lstm(_Cell):
    name = "lstm_cell"
    kind = "lstm"

    def composite(self, xg, hg, c, b=None):
        z, hs = _pre(xg, hg, b), c.shape[-1]
        i, f = z.narrow(-1, 0, hs).sigmoid(), z.narrow(-1, hs, hs).sigmoid()
        g, o = z.narrow(-1, 2 * hs, hs).tanh(), z.narrow(-1, 3 * hs, hs).sigmoid()
        c = f * c + i * g
        return o * c.tanh(), c


class _Gru(_Cell):
    name = "gru_cell"
    kind = "gru"

    def composite(self, xg, hg, h, b=None):
        hp, hs = (hg if b is None else hg + b), h.shape[-1]
        r = (xg.narrow(-1, 0, hs) + hp.narrow(-1, 0, hs)).sigmoid()
        z = (xg.narrow(-1, hs, hs) + hp.narrow(-1, hs, hs)).sigmoid()
        n = (xg.narrow(-1, 2 * hs, hs) + r * hp.narrow(-1, 2 * hs, hs)).tanh()
        return n + z * (h - n)


class _Rnn(_Cell):
    name = "rnn_cell"
    has_state = False

    def __init__(self, has_bias, nonlinearity):
        super().__init__(has_bias)
        self.kind = "rnn_" + nonlinearity

    def composite(self, xg, hg, b=None):
        z = _pre(xg, hg, b)
        return z.tanh() if self.kind == "rnn_tanh" else z.relu()


def _run(op, xg, hg, state, bias):
    ins = [_rows(xg), _rows(hg)] + ([_rows(state)] if state is not None else []) + ([bias] if bias is not None else [])
    return apply_op(op, *ins)


def lstm_cell(xg: Tensor, hg: Tensor, c: Tensor, bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """One LSTM step after its two gate GEMMs, as one fused kernel (forward and backward): with
    ``z = xg + hg + bias`` split into gates i, f, g, o (torch's order), ``c' = sigmoid(f) * c + sigmoid(i) *
    tanh(g)`` and ``h' = sigmoid(o) * tanh(c')``.

    Args:
        xg: ``x @ W_ih.T + b_ih``, (N, 4H), float (f32, f16, bf16, f64).
        hg: ``h @ W_hh.T``, (N, 4H), same dtype.
        c: the previous cell state (N, H).
        bias: ``b_hh`` (4H,), or None.

    Returns:
        tuple: (h' (N, H), c' (N, H)); differentiable in every input (under ``create_graph`` through
        ``lstm_cell_slow``).

    Raises:
        ShapeError: the shapes do not fit (N, 4H) / (N, H) / (4H,).
        DTypeError: the dtypes differ or are not float.
    """
    _check("lstm_cell", xg=xg, hg=hg, c=c, bias=bias)
    return _run(_Lstm(bias is not None), xg, hg, c, bias)


def gru_cell(xg: Tensor, hg: Tensor, h: Tensor, bias: Tensor | None = None) -> Tensor:
    """One GRU step after its two gate GEMMs, as one fused kernel (forward and backward), torch's
    formulation: gates r, z, n; ``r = sigmoid(xr + hr + br)``, ``z = sigmoid(xz + hz + bz)``,
    ``n = tanh(xn + r * (hn + bn))``, ``h' = (1 - z) * n + z * h``.

    Args:
        xg: ``x @ W_ih.T + b_ih``, (N, 3H), float.
        hg: ``h @ W_hh.T``, (N, 3H), same dtype (without ``b_hh``: the reset gate scales ``hn + bn``).
        h: the previous hidden state (N, H).
        bias: ``b_hh`` (3H,), or None.

    Returns:
        Tensor: h' (N, H); differentiable in every input.

    Raises:
        ShapeError: the shapes do not fit.
        DTypeError: the dtypes differ or are not float.
    """
    _check("gru_cell", xg=xg, hg=hg, h=h, bias=bias)
    return _run(_Gru(bias is not None), xg, hg, h, bias)


def rnn_cell(xg: Tensor, hg: Tensor, bias: Tensor | None = None, nonlinearity: str = "tanh") -> Tensor:
    """One Elman RNN step after its two GEMMs, as one fused kernel: ``h' = act(xg + hg + bias)``.

    Args:
        xg: ``x @ W_ih.T + b_ih``, (N, H), float.
        hg: ``h @ W_hh.T``, (N, H), same dtype.
        bias: ``b_hh`` (H,), or None.
        nonlinearity: "tanh" or "relu".

    Returns:
        Tensor: h' (N, H); differentiable in every input.

    Raises:
        EmberValueError: an unknown nonlinearity.
        ShapeError: the shapes do not fit.
        DTypeError: the dtypes differ or are not float.
    """
    _check("rnn_cell", xg=xg, hg=hg, bias=bias)
    if nonlinearity not in ("tanh", "relu"):
        raise EmberValueError(f"[rnn_cell] nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
    return _run(_Rnn(bias is not None, nonlinearity), xg, hg, None, bias)


# ----------------------------------------------------------------------------- composite references
def lstm_cell_slow(xg: Tensor, hg: Tensor, c: Tensor, bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Composite reference of ``lstm_cell`` in Tensor ops (differentiable to any order): the cell's
    composite form, which its create_graph backward differentiates."""
    return _Lstm(bias is not None).composite(xg, hg, c, bias)


def gru_cell_slow(xg: Tensor, hg: Tensor, h: Tensor, bias: Tensor | None = None) -> Tensor:
    """Composite reference of ``gru_cell`` in Tensor ops (differentiable to any order): the cell's
    composite form."""
    return _Gru(bias is not None).composite(xg, hg, h, bias)


def rnn_cell_slow(xg: Tensor, hg: Tensor, bias: Tensor | None = None, nonlinearity: str = "tanh") -> Tensor:
    """Composite reference of ``rnn_cell`` in Tensor ops (differentiable to any order): the cell's
    composite form."""
    return _Rnn(bias is not None, nonlinearity).composite(xg, hg, bias)
