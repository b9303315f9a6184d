"""RNN, LSTM and GRU against torch's with copied weights: outputs, final states and every gradient."""
import numpy as np
import pytest
import torch

import ember as em
from ember import nn

from conftest import TOL, WIDE


def _np(t):
    return t.to_device("cpu").to_dtype(em.float64).numpy()


def _tol():
    r, a = TOL[WIDE.name]
    return (1e-9, 1e-11) if WIDE == em.float64 else (r * 100, a * 100 + 2e-5)


def _pair(cls, device, **kw):
    t = getattr(torch.nn, cls)(5, 6, dtype=torch.float64, **kw)
    m = getattr(nn, cls)(5, 6, dtype=WIDE, device=device, **kw)
    assert list(m.state_dict()) == list(t.state_dict())
    assert repr(m) == repr(t)
    m.load_state_dict({k: em.tensor(v.detach().numpy(), dtype=WIDE, device=device) for k, v in t.state_dict().items()})
    return m, t


@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("num_layers,bidirectional", [(1, False), (2, False), (1, True), (3, True)])
@pytest.mark.parametrize("batch_first", [False, True])
def test_like_torch(device, cls, num_layers, bidirectional, batch_first):
    torch.manual_seed(num_layers)
    m, t = _pair(cls, device, num_layers=num_layers, bidirectional=bidirectional, batch_first=batch_first)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 5))
    dirs = 2 if bidirectional else 1
    h0 = rng.standard_normal((dirs * num_layers, 3 if batch_first else 4, 6))
    xv, h0v = em.Var(em.tensor(x, dtype=WIDE, device=device)), em.Var(em.tensor(h0, dtype=WIDE, device=device))
    tx, th0 = torch.tensor(x, requires_grad=True), torch.tensor(h0, requires_grad=True)
    if cls == "LSTM":
        c0 = rng.standard_normal(h0.shape)
        c0v, tc0 = em.Var(em.tensor(c0, dtype=WIDE, device=device)), torch.tensor(c0, requires_grad=True)
        out, (hn, cn) = m(xv, (h0v, c0v))
        tout, (thn, tcn) = t(tx, (th0, tc0))
        finals, tfinals = [hn, cn], [thn, tcn]
    else:
        out, hn = m(xv, h0v)
        tout, thn = t(tx, th0)
        finals, tfinals = [hn], [thn]
    rtol, atol = _tol()
    np.testing.assert_allclose(_np(out), tout.detach().numpy(), rtol=rtol, atol=atol)
    for f, tf in zip(finals, tfinals):
        np.testing.assert_allclose(_np(f), tf.detach().numpy(), rtol=rtol, atol=atol)
    ups = [np.sin(np.arange(y.numel()).reshape(tuple(y.shape))) for y in tfinals]
    uo = np.cos(np.arange(tout.numel()).reshape(tuple(tout.shape)))
    loss = (out * em.tensor(uo, dtype=WIDE, device=device)).sum()
    tloss = (tout * torch.tensor(uo)).sum()
    for f, tf, u in zip(finals, tfinals, ups):
        loss = loss + (f * em.tensor(u, dtype=WIDE, device=device)).sum()
        tloss = tloss + (tf * torch.tensor(u)).sum()
    g = loss.backward()
    tloss.backward()
    for (n, p), tp in zip(m.named_parameters(), t.parameters()):
        np.testing.assert_allclose(_np(g[p]), tp.grad.numpy(), rtol=rtol, atol=atol, err_msg=n)
    np.testing.assert_allclose(_np(g[xv]), tx.grad.numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(_np(g[h0v]), th0.grad.numpy(), rtol=rtol, atol=atol)
    if cls == "LSTM":
        np.testing.assert_allclose(_np(g[c0v]), tc0.grad.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
def test_default_state_unbatched_and_no_bias(device, cls):
    torch.manual_seed(5)
    kw = dict(bias=False, num_layers=2)
    if cls == "RNN":
        kw["nonlinearity"] = "relu"
    m, t = _pair(cls, device, **kw)
    x = np.random.default_rng(1).standard_normal((7, 5))  # unbatched (L, H_in)
    out, st = m(em.tensor(x, dtype=WIDE, device=device))
    tout, tst = t(torch.tensor(x))
    rtol, atol = _tol()
    np.testing.assert_allclose(_np(out), tout.detach().numpy(), rtol=rtol, atol=atol)
    st, tst = (st, tst) if cls == "LSTM" else ((st,), (tst,))
    for a, b in zip(st, tst):
        assert a.shape == tuple(b.shape)
        np.testing.assert_allclose(_np(a), b.detach().numpy(), rtol=rtol, atol=atol)


def test_dropout_between_layers_and_init():
    em.manual_seed(0)
    m = nn.LSTM(4, 8, num_layers=2, dropout=0.5)
    assert np.abs(m.weight_hh_l1.numpy()).max() <= 1 / np.sqrt(8)
    x = em.randn(5, 2, 4)
    assert not np.allclose(m(x)[0].numpy(), m(x)[0].numpy())  # training: dropout between the layers
    m.eval()
    np.testing.assert_array_equal(m(x)[0].numpy(), m(x)[0].numpy())
    m.to(em.float16)
    assert m(x.half())[0].dtype == em.float16


def test_errors():
    m = nn.GRU(4, 3)
    with pytest.raises(em.ShapeError, match=r"\[GRU\] expected input_size 4"):
        m(em.ones(2, 1, 5))
    with pytest.raises(em.ShapeError, match=r"\[GRU\] expected h_0 of shape"):
        m(em.ones(2, 1, 4), em.zeros(2, 1, 3))
    with pytest.raises(em.ShapeError, match=r"\[GRU\] expected a 3-D"):
        m(em.ones(4))
    with pytest.raises(em.DTypeError, match=r"\[GRU\] input has dtype"):
        m(em.ones(2, 1, 4, dtype=em.float16))
    with pytest.raises(em.EmberTypeError, match=r"\[LSTM\] hx must be a tuple"):
        nn.LSTM(4, 3)(em.ones(2, 1, 4), em.zeros(1, 1, 3))
    with pytest.raises(em.EmberValueError, match=r"\[RNN\] nonlinearity"):
        nn.RNN(4, 3, nonlinearity="gelu")
    with pytest.raises(em.EmberValueError, match=r"\[LSTM\] proj_size"):
        nn.LSTM(4, 3, proj_size=2)
    with pytest.raises(em.EmberValueError, match=r"\[RNN\] input_size"):
        nn.RNN(0, 3)
    with pytest.raises(em.EmberValueError, match=r"\[GRU\] dropout"):
        nn.GRU(4, 3, dropout=2.0)
