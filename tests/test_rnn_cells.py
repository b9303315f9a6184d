"""The fused recurrent cells (lstm_cell, gru_cell, rnn_cell): forward and gradients against torch's LSTMCell /
GRUCell / RNNCell and against the composite references, finite differences, every dtype, strides, errors."""
import zlib

import numpy as np
import pytest
import torch
from devcheck import gradcheck

import ember as em
from ember import _C
from ember.nn import rnn_cells as rc

from conftest import FLOATS, TOL, WIDE

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def _np(t):
    return t.to_device("cpu").to_dtype(em.float64).numpy()


def _t(a, device, dtype=None):
    return em.tensor(np.asarray(a, dtype=np.float64), dtype=dtype or WIDE, device=device)


def _cell(kind, xg, hg, state, bias, fused=True):
    """The cell's outputs as a list: fused or composite."""
    if kind == "lstm":
        return list((rc.lstm_cell if fused else rc.lstm_cell_slow)(xg, hg, state, bias))
    if kind == "gru":
        return [(rc.gru_cell if fused else rc.gru_cell_slow)(xg, hg, state, bias)]
    return [(rc.rnn_cell if fused else rc.rnn_cell_slow)(xg, hg, bias, kind[4:])]


def _operands(rng, kind, n, h, device, dtype=None, scale=1.0):
    g = GATES[kind] * h
    xg = _t(rng.standard_normal((n, g)) * scale, device, dtype)
    hg = _t(rng.standard_normal((n, g)) * scale, device, dtype)
    s = _t(rng.standard_normal((n, h)), device, dtype) if kind in ("lstm", "gru") else None
    b = _t(rng.standard_normal(g) * 0.5, device, dtype)
    return xg, hg, s, b


def _tol():
    r, a = TOL[WIDE.name]
    return (1e-10, 1e-12) if WIDE == em.float64 else (r * 20, a * 20 + 1e-6)


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("bias", [True, False])
def test_like_torch_cells(device, kind, bias):
    """x and h through the two GEMMs, then the fused cell, against torch.nn.*Cell in float64: outputs and
    the gradients of x, h, c and every parameter."""
    rng = np.random.default_rng(GATES[kind] + bias)
    n, din, h = 5, 4, 7
    if kind == "lstm":
        tc = torch.nn.LSTMCell(din, h, bias=bias, dtype=torch.float64)
    elif kind == "gru":
        tc = torch.nn.GRUCell(din, h, bias=bias, dtype=torch.float64)
    else:
        tc = torch.nn.RNNCell(din, h, bias=bias, nonlinearity=kind[4:], dtype=torch.float64)
    x, h0, c0 = rng.standard_normal((n, din)), rng.standard_normal((n, h)), rng.standard_normal((n, h))
    tx, th = torch.tensor(x, requires_grad=True), torch.tensor(h0, requires_grad=True)
    tcc = torch.tensor(c0, requires_grad=True)
    touts = list(tc(tx, (th, tcc))) if kind == "lstm" else [tc(tx, th)]
    params = {k: em.Var(_t(v.detach().numpy(), device)) for k, v in tc.named_parameters()}
    xv, hv, cv = em.Var(_t(x, device)), em.Var(_t(h0, device)), em.Var(_t(c0, device))
    xg = xv @ params["weight_ih"].t()
    if bias:
        xg = xg + params["bias_ih"]
    hg = hv @ params["weight_hh"].t()
    state = cv if kind == "lstm" else hv if kind == "gru" else None
    outs = _cell(kind, xg, hg, state, params.get("bias_hh"))
    rtol, atol = _tol()
    loss, tloss = None, 0
    for i, (o, to) in enumerate(zip(outs, touts)):
        np.testing.assert_allclose(_np(o), to.detach().numpy(), rtol=rtol, atol=atol)
        w = np.cos(np.arange(o.numel()).reshape(o.shape) + i)
        term = (o * _t(w, device)).sum()
        loss = term if loss is None else loss + term
        tloss = tloss + (to * torch.tensor(w)).sum()
    grads = loss.backward()
    tloss.backward()
    for k, p in params.items():
        np.testing.assert_allclose(_np(grads[p]), dict(tc.named_parameters())[k].grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=k)
    np.testing.assert_allclose(_np(grads[xv]), tx.grad.numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(_np(grads[hv]), th.grad.numpy(), rtol=rtol, atol=atol)
    if kind == "lstm":
        np.testing.assert_allclose(_np(grads[cv]), tcc.grad.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_fused_matches_composite(device, kind, dtype):
    """Random shapes in every float dtype: the fused forward and backward against the composite's."""
    rng = np.random.default_rng(zlib.crc32(f"{kind}{dtype.name}".encode()))  # the same seed every run
    for _ in range(3):
        n, h = int(rng.integers(1, 9)), int(rng.integers(1, 40))
        ops = _operands(rng, kind, n, h, device, dtype)
        bias = ops[3] if rng.random() < 0.7 else None
        res = []
        for fused in (True, False):
            vs = [em.Var(t) if t is not None else None for t in ops[:3]] + ([em.Var(bias)] if bias is not None else [None])
            outs = _cell(kind, vs[0], vs[1], vs[2], vs[3], fused)
            loss = None
            for i, o in enumerate(outs):
                w = _t(np.sin(np.arange(o.numel()).reshape(o.shape) * 0.7 + i), device, dtype)
                loss = (o * w).sum() if loss is None else loss + (o * w).sum()
            g = loss.backward()
            res.append(([_np(o) for o in outs], [_np(g[v]) if v is not None and g.get(v) is not None else None
                                                 for v in vs]))
        r, a = TOL[dtype.name]
        r, a = (1e-12, 1e-12) if dtype == em.float64 else (r * 10, a * 30)
        for got, want in zip(res[0][0], res[1][0]):
            np.testing.assert_allclose(got, want, rtol=r, atol=a)
        for i, (got, want) in enumerate(zip(res[0][1], res[1][1])):
            if want is None:
                assert got is None or not np.any(got), i
                continue
            np.testing.assert_allclose(got, want, rtol=r, atol=a * (1 + n), err_msg=f"input {i}")


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
def test_gradcheck(device, kind):
    rng = np.random.default_rng(GATES[kind] + 10)
    xg, hg, s, b = _operands(rng, kind, 3, 5, device)
    if kind == "rnn_relu":  # keep the pre-activations away from relu's kink, where differences straddle it
        z = _np(xg) + _np(hg) + _np(b)
        xg = _t(_np(xg) + np.where(np.abs(z) < 0.05, 0.2, 0.0), device)
    if kind in ("lstm", "gru"):
        gradcheck(lambda a, bb, c, d: _cell(kind, a, bb, c, d), [xg, hg, s, b])
        gradcheck(lambda a, bb, c: _cell(kind, a, bb, c, None), [xg, hg, s])
    else:
        gradcheck(lambda a, bb, d: _cell(kind, a, bb, None, d), [xg, hg, b])


def test_backward_is_fused_and_second_order(device, monkeypatch):
    """An ordinary backward calls the fused kernel (not the composite); create_graph differentiates the
    composite, so a second derivative matches the composite's."""
    rng = np.random.default_rng(3)
    xg, hg, c, b = _operands(rng, "lstm", 2, 3, device)
    calls = []
    real = _C.fused.rnn_cell_bwd

    class Spy:
        def __getattr__(self, name):
            if name == "rnn_cell_bwd":
                return lambda *a, **k: (calls.append(a[0]), real(*a, **k))[1]
            return getattr(_C.fused, name)

    monkeypatch.setattr(rc, "_F", Spy())
    xv = em.Var(xg)
    h, c2 = rc.lstm_cell(xv, hg, c, b)
    (h.sum() + c2.sum()).backward()
    assert calls == ["lstm"]
    # second order: d/dxg of sum(d(sum h^2)/dxg), fused vs composite
    got = []
    for fn in (rc.lstm_cell, rc.lstm_cell_slow):
        xv = em.Var(xg)
        h, _ = fn(xv, hg, c, b)
        g1 = (h * h).sum().backward(create_graph=True)[xv]
        assert calls == ["lstm"]  # create_graph took the composite, not the fused kernel
        got.append(_np(g1.sum().backward()[xv]))
        del calls[1:]  # (the second backward reaches the first op through h's seed 2h: fused, rightly)
    np.testing.assert_allclose(got[0], got[1], rtol=1e-9 if WIDE == em.float64 else 1e-4, atol=1e-6)


def test_strided_and_offset_operands(device):
    """Transposed gates (copied to unit column stride), row-strided slices read in place, a stepped bias."""
    rng = np.random.default_rng(4)
    n, h = 4, 6
    big = _t(rng.standard_normal((n, 4 * h + 5)), device)
    xg = big.narrow(1, 3, 4 * h)  # rows of stride 4h + 5, offset 3
    hg = _t(rng.standard_normal((4 * h, n)), device).t()  # column stride n
    c = _t(rng.standard_normal((2 * n, h)), device)[::2]
    b = _t(rng.standard_normal(8 * h), device)[::2]
    dense = [_t(_np(t), device) for t in (xg, hg, c, b)]
    for got, want in zip(rc.lstm_cell(xg, hg, c, b), rc.lstm_cell_slow(*dense)):
        np.testing.assert_allclose(_np(got), _np(want), rtol=1e-5, atol=1e-6)
    g = _t(rng.standard_normal((n, 3 * h)), device)
    hv = _t(rng.standard_normal((n, h)), device)
    np.testing.assert_allclose(_np(rc.gru_cell(g.t().contiguous().t(), g, hv)),
                               _np(rc.gru_cell_slow(g, g, hv)), rtol=1e-5, atol=1e-6)


def test_empty_and_saturated(device):
    z = em.zeros(0, 8, dtype=WIDE, device=device)
    h, c = rc.lstm_cell(z, z, em.zeros(0, 2, dtype=WIDE, device=device))
    assert h.shape == (0, 2) and c.shape == (0, 2)
    big = _t(np.full((2, 4), 200.0), device)
    h, c = rc.lstm_cell(big, big, _t(np.ones((2, 1)), device))
    np.testing.assert_allclose(_np(c), 2.0)  # sigmoid(400) = tanh(400) = 1: f c + i g = 2
    np.testing.assert_allclose(_np(h), np.tanh(2.0), rtol=1e-6)
    nan = _t(np.full((1, 2), np.nan), device)
    assert np.isnan(_np(rc.rnn_cell(nan, nan, nonlinearity="relu"))).all()  # relu lets NaN through


def test_errors(device):
    x8, x6 = em.zeros(2, 8, device=device), em.zeros(2, 6, device=device)
    c2 = em.zeros(2, 2, device=device)
    with pytest.raises(em.EmberTypeError, match=r"\[lstm_cell\] expected a Tensor c"):
        rc.lstm_cell(x8, x8, 1.0)
    with pytest.raises(em.ShapeError, match=r"\[lstm_cell\] expected input gates of shape \(N, 4 \* hidden\)"):
        rc.lstm_cell(x6, x6, c2)
    with pytest.raises(em.ShapeError, match=r"\[lstm_cell\] expected hidden gates of shape \(2, 8\)"):
        rc.lstm_cell(x8, em.zeros(3, 8, device=device), c2)
    with pytest.raises(em.ShapeError, match=r"\[lstm_cell\] expected cell state of shape \(2, 2\)"):
        rc.lstm_cell(x8, x8, em.zeros(2, 3, device=device))
    with pytest.raises(em.ShapeError, match=r"\[gru_cell\] expected bias of shape \(6,\), got \(5,\)"):
        rc.gru_cell(x6, x6, c2, em.zeros(5, device=device))
    with pytest.raises(em.DTypeError, match=r"\[gru_cell\] hidden gates has dtype float16"):
        rc.gru_cell(x6, x6.half(), c2)
    with pytest.raises(em.DTypeError, match=r"\[rnn_cell\] expected float gates"):
        rc.rnn_cell(em.zeros(2, 3, dtype=em.int32, device=device), em.zeros(2, 3, dtype=em.int32, device=device))
    with pytest.raises(em.EmberValueError, match=r"\[rnn_cell\] nonlinearity"):
        rc.rnn_cell(x6, x6, nonlinearity="gelu")
    with pytest.raises(em.ShapeError, match=r"\[rnn_cell\] expected input gates"):
        rc.rnn_cell(em.zeros(6, device=device), em.zeros(6, device=device))
    # the kernels' own entry points
    F = _C.fused
    s, lay = x8._storage, x8._layout
    with pytest.raises(em.EmberValueError, match=r"\[rnn_cell\] kind must be"):
        F.rnn_cell_fwd("elman", s, lay, s, lay)
    with pytest.raises(em.EmberValueError, match=r"\[lstm_cell\] needs the previous cell state"):
        F.rnn_cell_fwd("lstm", s, lay, s, lay)
    with pytest.raises(em.EmberValueError, match=r"\[rnn_cell\] takes no previous state"):
        F.rnn_cell_fwd("rnn_tanh", s, lay, s, lay, None, None, s, lay)
    with pytest.raises(em.EmberValueError, match=r"\[lstm_cell\] input gates must have contiguous rows"):
        t = em.zeros(8, 2, device=device).t()
        F.rnn_cell_fwd("lstm", t._storage, t._layout, t._storage, t._layout, None, None, c2._storage, c2._layout)
    h, c, ws = F.rnn_cell_fwd("lstm", s, lay, s, lay, None, None, c2._storage, c2._layout)
    wl = em.zeros(2, 8, device=device)._layout
    with pytest.raises(em.EmberValueError, match=r"\[lstm_cell_bwd\] needs the cell state's grad"):
        F.rnn_cell_bwd("lstm", ws, wl, c2._storage, c2._layout, c2._storage, c2._layout)
    with pytest.raises(em.ShapeError, match=r"\[gru_cell_bwd\] expected a contiguous workspace of shape \(2, 8\)"):
        F.rnn_cell_bwd("gru", ws, em.zeros(8, 2, device=device)._layout, c2._storage, c2._layout, c2._storage,
                       c2._layout)
    with pytest.raises(em.DTypeError, match=r"\[rnn_cell_bwd\] the workspace must be float32"):
        F.rnn_cell_bwd("rnn_tanh", c2.half()._storage, c2._layout, None, None, c2._storage, c2._layout)
