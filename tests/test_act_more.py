"""relu6 hardtanh softsign softshrink hardshrink celu logsigmoid prelu glu softmin threshold vs torch."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import ember as em
from ember import nn

from conftest import FLOATS, TOL, WIDE

_W = np.random.default_rng(3).standard_normal(6)

# (name, ember fn, torch fn, output shape changes)
_FNS = [
    ("relu6", nn.relu6, TF.relu6),
    ("hardtanh", lambda a: nn.hardtanh(a, -0.5, 2.0), lambda a: TF.hardtanh(a, -0.5, 2.0)),
    ("softsign", nn.softsign, TF.softsign),
    ("softshrink", nn.softshrink, TF.softshrink),
    ("softshrink0", lambda a: nn.softshrink(a, 0.0), lambda a: TF.softshrink(a, 0.0)),
    ("hardshrink", lambda a: nn.hardshrink(a, 0.3), lambda a: TF.hardshrink(a, 0.3)),
    ("celu", lambda a: nn.celu(a, 0.7), lambda a: TF.celu(a, 0.7)),
    ("celu1", nn.celu, TF.celu),
    ("logsigmoid", nn.logsigmoid, TF.logsigmoid),
    ("glu", lambda a: nn.glu(a, 1), lambda a: TF.glu(a, 1)),
    ("glu_last", lambda a: nn.functional.glu(a, -1), lambda a: TF.glu(a, -1)),
    ("softmin", lambda a: nn.softmin(a, 2), lambda a: TF.softmin(a, 2)),
    ("threshold", lambda a: nn.threshold(a, 0.5, -3.0), lambda a: TF.threshold(a, 0.5, -3.0)),
    ("prelu", lambda a: nn.prelu(a, em.tensor(_W, dtype=a.dtype, device=a.device)),
     lambda a: TF.prelu(a, torch.tensor(_W, dtype=a.dtype))),
    ("prelu1", lambda a: nn.prelu(a, em.full((1,), 0.2, dtype=a.dtype, device=a.device)),
     lambda a: TF.prelu(a, torch.full((1,), 0.2, dtype=a.dtype))),
]


def _data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6, 6)) * 4
    # the interesting points: each function's ends, thresholds and zero
    x[0, 0, :] = [0.5, -0.5, 6.0, 0.0, -1.0, 2.0]
    x[0, 1, :] = [0.3, -0.3, 1.0, -40.0, 40.0, 1e-3]
    return x


@pytest.mark.parametrize("name,ef,tf", _FNS, ids=[f[0] for f in _FNS])
def test_values_and_gradients_like_torch(device, name, ef, tf):
    x = _data()
    up = np.cos(x)
    if name.startswith("glu"):
        up = up[:, :3] if name == "glu" else up[..., :3]
    v = em.Var(em.tensor(x, dtype=WIDE, device=device))
    y = ef(v)
    g = (y * em.tensor(up, dtype=WIDE, device=device)).sum().backward()[v]
    t = torch.tensor(x, requires_grad=True)
    yt = tf(t)
    (yt * torch.tensor(up)).sum().backward()
    rtol, atol = TOL[WIDE.name]
    if name.startswith("celu"):  # torch's celu backward takes 1/alpha in float32; ember's is exact
        rtol, atol = max(rtol, 1e-7), max(atol, 1e-7)
    assert y.shape == tuple(yt.shape) and y.dtype == WIDE
    np.testing.assert_allclose(y.to_device("cpu").numpy(), yt.detach().numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(g.to_device("cpu").numpy(), t.grad.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name,ef,tf", _FNS, ids=[f[0] for f in _FNS])
@pytest.mark.parametrize("dtype", FLOATS)
def test_dtypes(device, name, ef, tf, dtype):
    x = _data()
    y = ef(em.tensor(x, dtype=dtype, device=device))
    assert y.dtype == dtype
    want = tf(torch.tensor(x)).numpy()
    rtol, atol = TOL[dtype.name]
    np.testing.assert_allclose(y.to_device("cpu").to_dtype(em.float64).numpy(), want, rtol=rtol * 20,
                               atol=atol * 20 + (1e-2 if dtype.name == "bfloat16" else 2e-3 * (dtype != em.float32)))


@pytest.mark.parametrize("name,fn", [("softsign", nn.softsign), ("celu", lambda a: nn.celu(a, 0.7)),
                                     ("logsigmoid", nn.logsigmoid), ("glu", lambda a: nn.glu(a, 0)),
                                     ("softmin", lambda a: nn.softmin(a, 1)),
                                     ("softshrink", nn.softshrink)])
def test_gradcheck(name, fn):
    x = em.tensor(np.random.default_rng(1).standard_normal((4, 5)) * 2 + 0.05, dtype=em.float64, device="cpu")
    assert em.testing.gradcheck(fn, [x])


def test_prelu_weight_gradient_like_torch(device):
    x = _data()
    m = nn.PReLU(6, init=0.1, dtype=WIDE, device=device)
    tm = torch.nn.PReLU(6, init=0.1, dtype=torch.float64)
    v = em.tensor(x, dtype=WIDE, device=device)
    g = (m(v) ** 2).sum().backward()[m.weight]
    (tm(torch.tensor(x)) ** 2).sum().backward()
    rtol, atol = TOL[WIDE.name]
    np.testing.assert_allclose(g.to_device("cpu").numpy(), tm.weight.grad.numpy(), rtol=rtol * 10, atol=atol * 10)
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in tm.named_parameters()]


_MODS = [("ReLU6", (), {}), ("ReLU6", (True,), {}), ("Hardtanh", (), {}), ("Hardtanh", (-2.0, 3.0), {}),
         ("Softsign", (), {}), ("Softshrink", (), {}), ("Hardshrink", (0.3,), {}), ("CELU", (), {}),
         ("CELU", (0.5, True), {}), ("LogSigmoid", (), {}), ("PReLU", (), {}), ("PReLU", (6,), {}),
         ("GLU", (), {}), ("GLU", (1,), {}), ("Softmin", (1,), {}), ("Softmin", (), {}),
         ("Threshold", (0.1, 20.0), {}), ("Threshold", (0.1, 20.0, True), {})]


@pytest.mark.parametrize("cls,args,kwargs", _MODS, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(_MODS)])
def test_modules_like_torch(device, cls, args, kwargs):
    m, t = getattr(nn, cls)(*args, **kwargs), getattr(torch.nn, cls)(*args, **kwargs)
    assert repr(m) == repr(t)
    m.to(device)
    x = _data()
    if cls == "Softmin" and not args:
        with pytest.warns(UserWarning, match="implicit dim"):
            y = m(em.tensor(x, dtype=em.float32, device=device))
        with pytest.warns(UserWarning):
            yt = t(torch.tensor(x, dtype=torch.float32))
    else:
        y = m(em.tensor(x, dtype=em.float32, device=device))
        yt = t(torch.tensor(x, dtype=torch.float32))
    np.testing.assert_allclose(y.to_device("cpu").numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_errors():
    x = em.ones(2, 3)
    with pytest.raises(em.EmberValueError, match=r"\[hardtanh\] max_val"):
        nn.hardtanh(x, 1.0, 0.0)
    with pytest.raises(em.EmberValueError, match=r"\[softshrink\] lambd"):
        nn.softshrink(x, -0.1)
    with pytest.raises(em.EmberValueError, match=r"\[Hardshrink\] lambd"):
        nn.Hardshrink(-1)
    with pytest.raises(em.EmberValueError, match=r"\[celu\] alpha"):
        nn.celu(x, 0.0)
    with pytest.raises(em.ShapeError, match=r"\[glu\] halving dim"):
        nn.glu(x, 1)
    with pytest.raises(em.ShapeError, match=r"\[glu\]"):
        nn.glu(em.tensor(1.0))
    with pytest.raises(em.ShapeError, match=r"\[prelu\] weight"):
        nn.prelu(x, em.ones(2))
    with pytest.raises(em.EmberTypeError, match=r"\[prelu\]"):
        nn.prelu(x, 0.25)
    with pytest.raises(em.DTypeError, match=r"\[relu6\]"):
        nn.relu6(em.ones(3, dtype=em.int64))
    with pytest.raises(em.EmberTypeError, match=r"\[softsign\]"):
        nn.softsign([1.0])
    with pytest.raises(em.EmberValueError, match=r"\[PReLU\]"):
        nn.PReLU(0)
