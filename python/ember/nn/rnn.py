"""RNN, LSTM and GRU as torch's (multi-layer, bidirectional, batch_first, inter-layer dropout, torch's parameter
names): one GEMM projects every step's input, then per step one GEMM and one fused cell kernel (nn/rnn_cells.py)."""
from __future__ import annotations

import math

from ..args import bool_arg, float_arg, int_arg
from ..creation import rand, zeros
from ..dtypes import to_device, to_dtype
from ..errors import DTypeError, EmberTypeError, EmberValueError, ShapeError
from ..multi import cat, stack
from ..tensor_type import Tensor
from ..variable import Var
from .functional import dropout
from .module import Module
from .rnn_cells import gru_cell, lstm_cell, rnn_cell

__all__ = ["GRU", "LSTM", "RNN"]


def _linear_steps(x, w, b):
    """x (L, N, in) @ w.T + b as one 2-D GEMM: (L, N, G)."""
    seq, n, width = x.shape
    y = x.reshape(seq * n, width) @ w.t()
    if b is not None:
        y = y + b
    return y.reshape(seq, n, w.shape[0])


class _RNNBase(Module):
    """The parameters and the layer/direction loop shared by RNN, LSTM and GRU."""

    _gates = 1
    _mode = "RNN"

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        op = self._mode
        self.input_size = int_arg(input_size, op, "input_size")
        self.hidden_size = int_arg(hidden_size, op, "hidden_size")
        self.num_layers = int_arg(num_layers, op, "num_layers")
        if min(self.input_size, self.hidden_size, self.num_layers) < 1:
            raise EmberValueError(f"[{op}] input_size, hidden_size and num_layers must be positive, got "
                                  f"{self.input_size}, {self.hidden_size}, {self.num_layers}")
        if int_arg(proj_size, op, "proj_size") != 0:
            raise EmberValueError(f"[{op}] proj_size is not supported (only 0)")
        self.bias = bool_arg(bias, op, "bias")
        self.batch_first = bool_arg(batch_first, op, "batch_first")
        self.dropout = float_arg(dropout, op, "dropout")
        if not 0.0 <= self.dropout <= 1.0:
            raise EmberValueError(f"[{op}] dropout must be in [0, 1], got {self.dropout}")
        self.bidirectional = bool_arg(bidirectional, op, "bidirectional")
        self.proj_size = 0
        dtype, device = to_dtype(dtype or "float32"), to_device(device)
        h, g = self.hidden_size, self._gates * self.hidden_size
        bound = 1.0 / math.sqrt(h)  # torch: every weight and bias U(-1/sqrt(H), 1/sqrt(H))

        def param(*shape):
            return Var(rand(*shape, lo=-bound, hi=bound, device=device).to_dtype(dtype))

        dirs = 2 if self.bidirectional else 1
        self._names = []
        for layer in range(self.num_layers):
            width = self.input_size if layer == 0 else h * dirs
            for d in range(dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                names = [f"weight_ih{sfx}", f"weight_hh{sfx}"]
                setattr(self, names[0], param(g, width))
                setattr(self, names[1], param(g, h))
                if self.bias:
                    names += [f"bias_ih{sfx}", f"bias_hh{sfx}"]
                    setattr(self, names[2], param(g))
                    setattr(self, names[3], param(g))
                self._names.append(names)

    def _own_parameters(self):  # torch's order: per layer and direction, w_ih, w_hh, b_ih, b_hh
        for names in self._names:
            for n in names:
                yield n, getattr(self, n)

    def _weights(self, layer, d):
        names = self._names[layer * (2 if self.bidirectional else 1) + d]
        w = [getattr(self, n) for n in names]
        return (w[0], w[1], w[2], w[3]) if self.bias else (w[0], w[1], None, None)

    def _state_shape(self, n):
        return ((2 if self.bidirectional else 1) * self.num_layers, n, self.hidden_size)

    def _check_state(self, s, n, unbatched, what):
        shape = self._state_shape(n)
        want = (shape[0], shape[2]) if unbatched else shape
        if not isinstance(s, Tensor):
            raise EmberTypeError(f"[{self._mode}] {what} must be a Tensor, got {type(s).__name__}")
        if s.shape != want:
            raise ShapeError(f"[{self._mode}] expected {what} of shape {want}, got {s.shape}")
        return s.unsqueeze(1) if unbatched else s

    def _cell(self, xp, st, w_hh, b_hh):
        """One step: the hidden GEMM, then the cell family's fused kernel; returns the new states."""
        return self._fused(xp, st[0] @ w_hh.t(), st, b_hh)

    def _run(self, x, states):
        """x (L, N, in); states: a list of (D * layers, N, H) tensors. Returns (output, final states)."""
        dirs = 2 if self.bidirectional else 1
        finals = [[] for _ in states]
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                w_ih, w_hh, b_ih, b_hh = self._weights(layer, d)
                xp = _linear_steps(x, w_ih, b_ih)  # every step's input projection in one GEMM
                st = [s[layer * dirs + d] for s in states]
                steps = range(x.shape[0] - 1, -1, -1) if d else range(x.shape[0])
                ys = [None] * x.shape[0]
                for t in steps:
                    st = self._cell(xp[t], st, w_hh, b_hh)
                    ys[t] = st[0]
                outs.append(stack(ys, 0))
                for i, s in enumerate(st):
                    finals[i].append(s)
            x = outs[0] if dirs == 1 else cat(outs, -1)
            if self.dropout > 0.0 and self.training and layer < self.num_layers - 1:
                x = dropout(x, self.dropout, True)
        return x, [stack(f, 0) for f in finals]

    def forward(self, input, hx=None):
        """Runs the sequence.

        Args:
            input: (L, N, input_size) ((N, L, input_size) with batch_first), or (L, input_size).
            hx: the initial hidden state (D * num_layers, N, H), default zeros.

        Returns:
            tuple: (output (L, N, D * H), h_n (D * num_layers, N, H)).
        """
        return self._forward(input, hx, 1)

    def _forward(self, input, hx, n_states):
        op = self._mode
        if not isinstance(input, Tensor):
            raise EmberTypeError(f"[{op}] expected a Tensor input, got {type(input).__name__}")
        w0 = self.weight_ih_l0
        if input.dtype is not w0.dtype:
            raise DTypeError(f"[{op}] input has dtype {input.dtype.name}, the parameters {w0.dtype.name}")
        if input.ndim not in (2, 3):
            raise ShapeError(f"[{op}] expected a 3-D (batched) or 2-D (unbatched) input, got shape {input.shape}")
        unbatched = input.ndim == 2
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)
        if x.shape[2] != self.input_size:
            raise ShapeError(f"[{op}] expected input_size {self.input_size}, got input of shape {input.shape}")
        n = x.shape[1]
        if hx is None:
            states = [zeros(*self._state_shape(n), dtype=w0.dtype, device=x.device) for _ in range(n_states)]
        else:
            hs = [hx] if n_states == 1 else hx
            if n_states > 1 and (not isinstance(hx, (tuple, list)) or len(hx) != n_states):
                raise EmberTypeError(f"[{op}] hx must be a tuple (h_0, c_0)")
            names = ("h_0", "c_0")
            states = [self._check_state(s, n, unbatched, names[i]) for i, s in enumerate(hs)]
        out, finals = self._run(x, states)
        if unbatched:
            out, finals = out.squeeze(1), [f.squeeze(1) for f in finals]
        elif self.batch_first:
            out = out.transpose(0, 1)
        return out, (finals[0] if n_states == 1 else tuple(finals))

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(_RNNBase):
    """An Elman RNN, ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)``, as ``torch.nn.RNN``.

    Args:
        input_size: the input width.
        hidden_size: H.
        num_layers: stacked layers.
        nonlinearity: "tanh" or "relu".
        bias: learn the biases.
        batch_first: input and output are (N, L, ...) instead of (L, N, ...).
        dropout: dropout on each layer's output but the last, while training.
        bidirectional: also run each layer backwards and concatenate.
        device: where the parameters live.
        dtype: their dtype (default float32).
    """

    _mode = "RNN"

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise EmberValueError(f"[RNN] nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0, device,
                         dtype)

    def _fused(self, xp, hg, st, b_hh):
        return [rnn_cell(xp, hg, b_hh, self.nonlinearity)]


class LSTM(_RNNBase):
    """A long short-term memory network, as ``torch.nn.LSTM``: gates i, f, g, o (in that order in the
    weights), ``c_t = f * c_{t-1} + i * g``, ``h_t = o * tanh(c_t)``.

    Args:
        input_size: the input width.
        hidden_size: H.
        num_layers: stacked layers.
        bias: learn the biases.
        batch_first: input and output are (N, L, ...) instead of (L, N, ...).
        dropout: dropout on each layer's output but the last, while training.
        bidirectional: also run each layer backwards and concatenate.
        proj_size: must be 0 (projections are not supported).
        device: where the parameters live.
        dtype: their dtype (default float32).
    """

    _gates = 4
    _mode = "LSTM"

    def _fused(self, xp, hg, st, b_hh):
        return list(lstm_cell(xp, hg, st[1], b_hh))

    def forward(self, input, hx=None):
        """Runs the sequence.

        Args:
            input: (L, N, input_size) ((N, L, input_size) with batch_first), or (L, input_size).
            hx: a tuple (h_0, c_0), each (D * num_layers, N, H); default zeros.

        Returns:
            tuple: (output (L, N, D * H), (h_n, c_n)).
        """
        return self._forward(input, hx, 2)


class GRU(_RNNBase):
    """A gated recurrent unit network, as ``torch.nn.GRU``: gates r, z, n (in that order),
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h_t = (1 - z) * n + z * h_{t-1}``.

    Args:
        input_size: the input width.
        hidden_size: H.
        num_layers: stacked layers.
        bias: learn the biases.
        batch_first: input and output are (N, L, ...) instead of (L, N, ...).
        dropout: dropout on each layer's output but the last, while training.
        bidirectional: also run each layer backwards and concatenate.
        device: where the parameters live.
        dtype: their dtype (default float32).
    """

    _gates = 3
    _mode = "GRU"

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, device=None, dtype=None):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0, device,
                         dtype)

    def _fused(self, xp, hg, st, b_hh):
        return [gru_cell(xp, hg, st[0], b_hh)]
