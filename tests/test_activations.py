"""elu, leaky_relu, softplus, mish, hardswish, hardsigmoid and gelu's tanh form against torch: values and
gradients on strided inputs in every float dtype, finite differences in float64, the modules, the
overflow-prone ends of the range, and bad arguments."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from devcheck import gradcheck, wide
from nn_check import KINDS, compare

import ember as em

from conftest import FLOATS, TOL, expect_error

ACTS = {
    "elu": (lambda x: em.nn.elu(x), lambda x: F.elu(x)),
    "elu_alpha": (lambda x: em.nn.elu(x, 0.4), lambda x: F.elu(x, 0.4)),
    "leaky_relu": (lambda x: em.nn.leaky_relu(x), lambda x: F.leaky_relu(x)),
    "leaky_relu_slope": (lambda x: em.nn.leaky_relu(x, 0.2), lambda x: F.leaky_relu(x, 0.2)),
    "softplus": (lambda x: em.nn.softplus(x), lambda x: F.softplus(x)),
    "softplus_beta": (lambda x: em.nn.softplus(x, 2.0, 3.0), lambda x: F.softplus(x, 2.0, 3.0)),
    "softplus_neg_beta": (lambda x: em.nn.softplus(x, -1.5), lambda x: F.softplus(x, -1.5)),
    "mish": (lambda x: em.nn.mish(x), lambda x: F.mish(x)),
    "hardswish": (lambda x: em.nn.hardswish(x), lambda x: F.hardswish(x)),
    "hardsigmoid": (lambda x: em.nn.hardsigmoid(x), lambda x: F.hardsigmoid(x)),
    "gelu_tanh": (lambda x: em.nn.functional.gelu(x, approximate="tanh"), lambda x: F.gelu(x, approximate="tanh")),
    "gelu": (lambda x: em.nn.functional.gelu(x), lambda x: F.gelu(x)),
}


@pytest.mark.parametrize("name", list(ACTS))
@pytest.mark.parametrize("kind", KINDS)
def test_activation_matches_torch_f64(name, kind, rng, device):
    ef, tf = ACTS[name]
    # torch's hardsigmoid backward multiplies by a float32 1/6 even in float64 (gradcheck checks ours).
    scale = (1e5, 1e5) if name == "hardsigmoid" else (20, 50)
    compare(ef, tf, [(3, 4, 7)], em.float64, kind, rng, device, lo=-5.0, hi=5.0, scale=scale)


@pytest.mark.parametrize("name", list(ACTS))
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_activation_every_dtype(name, dt, rng, device):
    ef, tf = ACTS[name]
    scale = (1e5, 1e5) if name == "hardsigmoid" and dt is em.float64 else (20, 50)
    compare(ef, tf, [(5, 6)], dt, "transposed", rng, device, lo=-5.0, hi=5.0, scale=scale)


@pytest.mark.parametrize("name", list(ACTS))
def test_activation_gradcheck(name, rng):
    ef, _ = ACTS[name]
    x = rng.uniform(-5, 5, size=(4, 5))
    x[np.abs(x) < 1e-3] = 0.5  # away from the kinks at 0 and +-3 of the piecewise ones
    x[np.abs(np.abs(x) - 3) < 1e-3] = 1.0
    assert gradcheck(ef, [em.tensor(x, dtype=wide())])


def test_extreme_inputs_give_finite_values_and_gradients():
    dt = wide()
    rtol, atol = (1e-12, 1e-12) if dt is em.float64 else TOL[dt.name]
    x = em.Var(em.tensor([-1000.0, -60.0, -20.0, 0.0, 25.0, 60.0, 1000.0], dtype=dt))
    t = torch.tensor(x.numpy().astype(np.float64), requires_grad=True)
    for name in ("elu", "softplus", "softplus_beta", "mish", "gelu_tanh"):
        ef, tf = ACTS[name]
        y = ef(x)
        g = y.sum().backward()[x].numpy()
        (gt,) = torch.autograd.grad(tf(t).sum(), t)
        assert np.isfinite(y.numpy()).all() and np.isfinite(g).all(), name
        np.testing.assert_allclose(y.numpy(), tf(t).detach().numpy(), rtol=rtol, atol=atol, err_msg=name)
        np.testing.assert_allclose(g, gt.numpy(), rtol=rtol * 100, atol=atol, err_msg=name)


def test_activation_modules(rng):
    x = em.tensor(rng.uniform(-4, 4, size=(3, 8)).astype(np.float32))
    t = torch.tensor(x.numpy())
    pairs = [
        (em.nn.ELU(0.5), torch.nn.ELU(0.5)), (em.nn.LeakyReLU(0.3), torch.nn.LeakyReLU(0.3)),
        (em.nn.Softplus(2.0, 1.0), torch.nn.Softplus(2.0, 1.0)), (em.nn.Mish(), torch.nn.Mish()),
        (em.nn.Hardswish(), torch.nn.Hardswish()), (em.nn.Hardsigmoid(), torch.nn.Hardsigmoid()),
        (em.nn.GELU("tanh"), torch.nn.GELU("tanh")), (em.nn.GELU(), torch.nn.GELU()),
    ]
    for mine, ref in pairs:
        np.testing.assert_allclose(mine(x).numpy(), ref(t).numpy(), rtol=2e-6, atol=2e-6, err_msg=repr(mine))
    model = em.nn.Sequential(em.nn.Linear(8, 4), em.nn.Mish(), em.nn.Linear(4, 2), em.nn.Hardswish())
    assert model(x).shape == (3, 2)
    assert "alpha=0.5" in repr(em.nn.ELU(0.5))


def test_activation_errors():
    ints = em.ones(3, dtype="int64")
    for fn, op in ((em.nn.elu, "elu"), (em.nn.leaky_relu, "leaky_relu"), (em.nn.softplus, "softplus"),
                   (em.nn.mish, "mish"), (em.nn.hardswish, "hardswish"), (em.nn.hardsigmoid, "hardsigmoid")):
        expect_error(lambda f=fn: f(ints), op, em.DTypeError)
        expect_error(lambda f=fn: f([1.0, 2.0]), op, em.EmberTypeError)
    expect_error(lambda: em.nn.softplus(em.ones(3), beta=0), "softplus", em.EmberValueError)
    expect_error(lambda: em.nn.elu(em.ones(3), alpha="a"), "elu", em.EmberTypeError)
    expect_error(lambda: em.nn.functional.gelu(em.ones(3), approximate="fast"), "gelu", em.EmberValueError)
    expect_error(lambda: em.nn.GELU("fast"), "GELU", em.EmberValueError)
    expect_error(lambda: em.nn.Softplus(beta=0.0), "Softplus", em.EmberValueError)
