"""nn.init against torch's formulas (fans, gains, bounds, moments), em.Generator streams, dropout2d."""
import math

import numpy as np
import pytest
import torch

import ember as em
from ember import nn
from ember.nn import init

from conftest import FLOATS, WIDE

_SHAPES = [(3, 5), (7, 2, 3), (4, 6, 3, 3), (16, 1, 5), (2, 3, 2, 2, 2), (1, 1), (9, 4, 1, 7)]


@pytest.mark.parametrize("shape", _SHAPES)
def test_fans_like_torch(shape):
    want = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    assert init._calculate_fan_in_and_fan_out(em.zeros(*shape)) == want


def test_fan_errors():
    with pytest.raises(em.ShapeError, match=r"\[init\] fan in and fan out"):
        init._calculate_fan_in_and_fan_out(em.zeros(4))
    with pytest.raises(em.ShapeError, match=r"\[init\]"):
        init.xavier_uniform_(em.Var(em.zeros(4)))
    with pytest.raises(em.EmberValueError, match=r"\[kaiming_normal_\] mode"):
        init.kaiming_normal_(em.Var(em.zeros(4, 4)), mode="fan")


@pytest.mark.parametrize("nl,param", [("linear", None), ("conv2d", None), ("sigmoid", None), ("tanh", None),
                                      ("relu", None), ("leaky_relu", None), ("leaky_relu", 0.2), ("leaky_relu", 1),
                                      ("selu", None), ("conv_transpose1d", None)])
def test_gain_like_torch(nl, param):
    assert init.calculate_gain(nl, param) == pytest.approx(torch.nn.init.calculate_gain(nl, param), rel=1e-15)


def test_gain_errors():
    with pytest.raises(em.EmberValueError, match=r"\[calculate_gain\] unsupported"):
        init.calculate_gain("swish")
    with pytest.raises(em.EmberValueError, match=r"\[calculate_gain\] negative_slope"):
        init.calculate_gain("leaky_relu", True)


def _var(shape, device, dtype=em.float32):
    return em.Var(em.zeros(*shape, dtype=dtype, device=device))


def _f64(t):
    return t.to_device("cpu").to_dtype(em.float64).numpy()


def _check_uniform(x, bound):
    assert x.min() >= -bound and x.max() <= bound
    n = x.size
    # the mean and variance of U(-b, b) within 5 standard errors
    assert abs(x.mean()) < 5 * bound / math.sqrt(3 * n)
    assert abs(x.var() - bound**2 / 3) < 5 * bound**2 * math.sqrt(4 / 45 / n)


def _check_normal(x, std):
    n = x.size
    assert abs(x.mean()) < 5 * std / math.sqrt(n)
    assert abs(x.std() / std - 1) < 5 / math.sqrt(2 * n)


@pytest.mark.parametrize("shape", [(64, 128), (32, 16, 3, 3), (200, 40, 5)])
@pytest.mark.parametrize("mode", ["fan_in", "fan_out"])
def test_kaiming_bounds_and_moments(device, shape, mode):
    em.manual_seed(1)
    fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    fan = fan_in if mode == "fan_in" else fan_out
    for a, nl in [(0, "relu"), (math.sqrt(5), "leaky_relu"), (0.1, "leaky_relu")]:
        gain = torch.nn.init.calculate_gain(nl, a)
        w = _var(shape, device)
        assert init.kaiming_uniform_(w, a=a, mode=mode, nonlinearity=nl) is w
        _check_uniform(_f64(w), math.sqrt(3.0) * gain / math.sqrt(fan))
        init.kaiming_normal_(w, a=a, mode=mode, nonlinearity=nl)
        _check_normal(_f64(w), gain / math.sqrt(fan))


@pytest.mark.parametrize("shape", [(64, 128), (32, 16, 3, 3)])
def test_xavier_bounds_and_moments(device, shape):
    em.manual_seed(2)
    fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    for gain in (1.0, 5 / 3):
        w = _var(shape, device)
        init.xavier_uniform_(w, gain=gain)
        _check_uniform(_f64(w), gain * math.sqrt(6.0 / (fan_in + fan_out)))
        init.xavier_normal_(w, gain=gain)
        _check_normal(_f64(w), gain * math.sqrt(2.0 / (fan_in + fan_out)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_uniform_normal_constant(device, dtype):
    em.manual_seed(3)
    w = _var((100, 50), device, dtype)
    init.uniform_(w, -0.5, 2.0)
    x = _f64(w)
    assert x.min() >= -0.5 and x.max() <= 2.0 and abs(x.mean() - 0.75) < 0.05
    init.normal_(w, 1.5, 0.25)
    x = _f64(w)
    assert abs(x.mean() - 1.5) < 0.02 and abs(x.std() - 0.25) < 0.02
    init.constant_(w, 0.375)
    assert (_f64(w) == 0.375).all()
    init.zeros_(w)
    assert (_f64(w) == 0).all()
    init.ones_(w)
    assert (_f64(w) == 1).all()
    assert w.dtype == dtype and w.is_variable


def test_trunc_normal_like_torch(device):
    em.manual_seed(4)
    w = _var((400, 250), device)
    for mean, std, a, b in [(0.0, 1.0, -2.0, 2.0), (0.0, 0.02, -0.04, 0.04), (1.0, 2.0, 0.0, 5.0),
                            (0.0, 1.0, -0.5, 3.0)]:
        init.trunc_normal_(w, mean, std, a, b)
        x = _f64(w)
        assert x.min() >= a and x.max() <= b
        # the truncated normal's moments, computed by torch's own sampler in float64 on 10^6 draws
        t = torch.empty(10**6, dtype=torch.float64)
        torch.nn.init.trunc_normal_(t, mean, std, a, b, generator=torch.Generator().manual_seed(0))
        assert abs(x.mean() - t.mean().item()) < 5 * t.std().item() / math.sqrt(x.size) + 1e-4
        assert abs(x.std() / t.std().item() - 1) < 5 / math.sqrt(2 * x.size) + 1e-3


def test_erfinv_accuracy(device):
    y = em.tensor(np.linspace(-0.999999, 0.999999, 20001), dtype=WIDE, device=device)
    x = _f64(init._erfinv(y))
    want = torch.special.erfinv(torch.tensor(_f64(y))).numpy()
    tol = (1e-10, 1e-12) if WIDE == em.float64 else (2e-5, 2e-6)
    np.testing.assert_allclose(x, want, rtol=tol[0], atol=tol[1])


@pytest.mark.parametrize("shape", [(6, 6), (10, 4), (4, 10), (8, 3, 3, 3), (5, 2, 7)])
def test_orthogonal(device, shape):
    em.manual_seed(5)
    w = _var(shape, device)
    init.orthogonal_(w, gain=2.0)
    q = _f64(w).reshape(shape[0], -1)
    rows, cols = q.shape
    gram = q @ q.T if rows <= cols else q.T @ q
    np.testing.assert_allclose(gram, 4.0 * np.eye(min(rows, cols)), atol=1e-5)
    with pytest.raises(em.ShapeError, match=r"\[orthogonal_\]"):
        init.orthogonal_(_var((4,), device))


def test_eye_and_errors():
    w = em.Var(em.zeros(3, 4))
    init.eye_(w)
    np.testing.assert_array_equal(w.numpy(), np.eye(3, 4))
    with pytest.raises(em.DTypeError, match=r"\[normal_\]"):
        init.normal_(em.zeros(3, dtype=em.int64))
    with pytest.raises(em.EmberTypeError, match=r"\[uniform_\]"):
        init.uniform_(np.zeros(3))
    with pytest.raises(em.EmberValueError, match=r"\[uniform_\]"):
        init.uniform_(em.Var(em.zeros(3)), 1.0, 0.0)
    with pytest.raises(em.EmberValueError, match=r"\[trunc_normal_\]"):
        init.trunc_normal_(em.Var(em.zeros(3)), a=1.0, b=0.0)
    with pytest.warns(UserWarning, match="zero-element"):
        init.kaiming_uniform_(em.Var(em.zeros(0, 3)))


def test_in_place_bumps_version_and_keeps_identity():
    w = em.Var(em.ones(3, 3))
    storage, v0 = w.storage, w.storage.version
    y = (w * w).sum()  # saves w for backward
    init.normal_(w)
    assert w.storage is storage and w.storage.version > v0
    with pytest.raises(em.InplaceModifiedError):
        y.backward()


def test_seeded_from_manual_seed_and_generator(device):
    em.manual_seed(9)
    a = init.kaiming_uniform_(_var((8, 8), device))
    em.manual_seed(9)
    b = init.kaiming_uniform_(_var((8, 8), device))
    np.testing.assert_array_equal(_f64(a), _f64(b))
    g = em.Generator().manual_seed(9)
    c = init.kaiming_uniform_(_var((8, 8), device), generator=g)
    np.testing.assert_array_equal(_f64(a), _f64(c))  # a Generator seeded n is manual_seed(n)'s stream


# ----------------------------------------------------------------------------- Generator
def test_generator_streams_are_independent(device):
    g1, g2 = em.Generator().manual_seed(42), em.Generator().manual_seed(42)
    em.manual_seed(0)
    a = em.randn(5, device=device, generator=g1)
    em.rand(100, device=device)  # the global stream moves; g2 does not see it
    b = em.randn(5, device=device, generator=g2)
    np.testing.assert_array_equal(_f64(a), _f64(b))
    # draws from a generator leave the global stream alone
    em.manual_seed(0)
    x1 = em.rand(4, device=device)
    em.manual_seed(0)
    em.rand(50, device=device, generator=g1)
    x2 = em.rand(4, device=device)
    np.testing.assert_array_equal(_f64(x1), _f64(x2))


def test_generator_state_and_ops(device):
    g = em.Generator()
    assert g.initial_seed() == torch.Generator().initial_seed()
    g.manual_seed(7)
    st = g.get_state()
    a = em.randint(0, 100, (20,), device=device, generator=g)
    p = em.multinomial(em.ones(10, device=device), 4, generator=g)
    d = nn.functional.dropout(em.ones(50, device=device), 0.5, generator=g)
    g.set_state(st)
    np.testing.assert_array_equal(em.randint(0, 100, (20,), device=device, generator=g).numpy(), a.numpy())
    np.testing.assert_array_equal(em.multinomial(em.ones(10, device=device), 4, generator=g).numpy(), p.numpy())
    np.testing.assert_array_equal(_f64(nn.functional.dropout(em.ones(50, device=device), 0.5, generator=g)), _f64(d))
    assert isinstance(g.seed(), int)
    with pytest.raises(em.EmberTypeError, match=r"\[rand\] generator must be an em.Generator"):
        em.rand(3, generator=torch.Generator())
    with pytest.raises(em.EmberTypeError, match=r"\[multinomial\] generator"):
        em.multinomial(em.ones(3), 1, generator=1)
    with pytest.raises(em.EmberTypeError, match=r"\[Generator.set_state\]"):
        g.set_state(5)


# ----------------------------------------------------------------------------- dropout2d
@pytest.mark.parametrize("shape", [(4, 6, 5, 3), (6, 5, 3)])
def test_dropout2d_drops_whole_channels(device, shape):
    em.manual_seed(0)
    x = em.rand(*shape, device=device, lo=1.0, hi=2.0)
    m = nn.Dropout2d(0.4)
    em.manual_seed(1)
    y = _f64(m(x))
    ratio = y / _f64(x)
    planes = ratio.reshape(-1, shape[-2] * shape[-1])
    for row in planes:  # each channel plane is all dropped or all scaled by 1 / (1 - p)
        assert np.allclose(row, 0) or np.allclose(row, 1 / 0.6, rtol=1e-6)
    xv = em.Var(x)
    em.manual_seed(1)  # the same mask again
    g = m(xv).sum().backward()
    np.testing.assert_allclose(_f64(g[xv]), ratio, rtol=1e-6)
    assert m.eval()(x) is x
    assert repr(m) == repr(torch.nn.Dropout2d(0.4))
    with pytest.raises(em.ShapeError, match=r"\[dropout2d\]"):
        nn.functional.dropout2d(em.ones(3, 4, device=device))
    with pytest.raises(em.EmberValueError, match=r"\[dropout2d\] p"):
        nn.functional.dropout2d(em.ones(3, 4, 4, device=device), 1.5)
