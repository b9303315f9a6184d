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

from conftest import FLOATS, TOL, expect_error, npdt

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
    "gelu_tanh": (lambda x: em.nn.gelu(x, approximate="tanh"), lambda x: F.gelu(x, approximate="tanh")),
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


# ----------------------------------------------------------------------------- the kernels themselves
# name -> (ember function, torch function, the op's kernel name, p0, p1)
KERNELS = {
    "elu": (lambda x: em.nn.elu(x, 0.7), lambda x: F.elu(x, 0.7), "elu", 0.7, 0.0),
    "leaky_relu": (lambda x: em.nn.leaky_relu(x, 0.2), lambda x: F.leaky_relu(x, 0.2), "leaky_relu", 0.2, 0.0),
    "softplus": (lambda x: em.nn.softplus(x), lambda x: F.softplus(x), "softplus", 1.0, 20.0),
    "softplus_neg_beta": (lambda x: em.nn.softplus(x, -1.5, 3.0), lambda x: F.softplus(x, -1.5, 3.0), "softplus",
                          -1.5, 3.0),
    "mish": (em.nn.mish, F.mish, "mish", 0.0, 0.0),
    "hardswish": (em.nn.hardswish, F.hardswish, "hardswish", 0.0, 0.0),
    "hardsigmoid": (em.nn.hardsigmoid, F.hardsigmoid, "hardsigmoid", 0.0, 0.0),
    "gelu_tanh": (lambda x: em.nn.functional.gelu(x, approximate="tanh"), lambda x: F.gelu(x, approximate="tanh"),
                  "gelu_tanh", 0.0, 0.0),
}
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, -3.0, 3.0, 2.5, -2.5, 20.0, 20.5, -20.0, 88.0, -88.0, 1e30, -1e30,
           1e-30, -1e-30, 0.5, -0.5, 7.0, -7.0, 100.0, -100.0]
# Where ember's gradient is not torch's, on purpose: NaN at a NaN x (torch's float32 and float64 kernels
# disagree there), and the limit at +-inf where torch computes inf * 0.
OWN_GRAD = {"elu": {np.nan: np.nan}, "hardswish": {np.nan: np.nan}, "mish": {np.inf: 1.0},
            "gelu_tanh": {np.inf: 1.0, -np.inf: 0.0}}


def _fused_bwd(kernel, x, g, p0, p1):
    st = getattr(em._C.fused, kernel + "_bwd")(x._storage, x._layout, g._storage, g._layout, p0, p1)
    return em.nn.ops._out(st, x.shape, x)


@pytest.mark.parametrize("name", list(KERNELS))
def test_each_activation_is_one_kernel_forward_and_one_backward(name, rng, device):
    ef, _, kernel, p0, p1 = KERNELS[name]
    x = em.Var(em.tensor(rng.uniform(-5, 5, size=(6, 7)).astype(np.float32), device=device))
    y = ef(x)
    assert y.op.name == kernel and len(y.op.inputs) == 1 and y.op.inputs[0] is x  # one recorded op
    g = em.tensor(rng.uniform(0.5, 1.5, size=(6, 7)).astype(np.float32), device=device)
    got = (y * g).sum().backward()[x]
    # the gradient is exactly the fused kernel's result for that upstream gradient
    np.testing.assert_array_equal(got.numpy(), _fused_bwd(kernel, x, g, p0, p1).numpy())


# gelu's tanh form in float64 as x sigmoid(2z): torch's 0.5 x (1 + tanh(z)) cancels far left (x = -7 keeps
# two digits), which the special values reach.
_B = 2.0 * np.sqrt(2.0 / np.pi)
ACCURATE = {"gelu_tanh": lambda x: x * torch.sigmoid(x * (_B + _B * 0.044715 * x * x))}
# torch's hardsigmoid backward multiplies by a float32 1/6, also in float64 (the derivative is exact here).
F64_RTOL = {"hardsigmoid": 1e-7}


@pytest.mark.parametrize("name", list(KERNELS))
def test_special_values_match_torch(name, device):
    ef, tf, _, _, _ = KERNELS[name]
    tf = ACCURATE.get(name, tf)
    dts = [em.float32, wide(device)] if wide(device) is not em.float32 else [em.float32]
    for dt in dts:
        xs = np.array(SPECIAL).astype(npdt(dt))
        x = em.Var(em.tensor(xs, device=device))
        y = ef(x)
        g = y.sum().backward()[x].numpy().astype(np.float64)
        t = torch.tensor(xs.astype(np.float64), requires_grad=True)
        ty = tf(t)
        (tg,) = torch.autograd.grad(ty.sum(), t)
        want_g = tg.numpy().copy()
        for v, own in OWN_GRAD.get(name, {}).items():
            want_g[np.isnan(xs) if np.isnan(v) else xs == v] = own
        rtol = F64_RTOL.get(name, 1e-12) if dt is em.float64 else 4e-6
        tiny = float(np.finfo(npdt(dt)).tiny)  # subnormal results carry fewer digits
        np.testing.assert_allclose(y.numpy().astype(np.float64), ty.detach().numpy(), rtol=rtol, atol=tiny,
                                   err_msg=f"{name} {dt.name} forward")
        np.testing.assert_allclose(g, want_g, rtol=rtol, atol=tiny, err_msg=f"{name} {dt.name} gradient")


def test_piecewise_edges_follow_torch(device):
    # hardswish' is linear strictly inside (-3, 3), 0 from -3 down and 1 from 3 up; hardsigmoid' 1/6
    # strictly inside; elu' is alpha at 0, leaky_relu' the slope at 0; softplus is x itself above the threshold.
    x = em.Var(em.tensor([-3.0, 3.0, -2.75, 2.75, 0.0, 0.0], device=device))
    np.testing.assert_allclose(em.nn.hardswish(x).sum().backward()[x].numpy(), [0, 1, -2.75 / 3 + 0.5,
                               2.75 / 3 + 0.5, 0.5, 0.5], rtol=1e-6)
    np.testing.assert_allclose(em.nn.hardsigmoid(x).sum().backward()[x].numpy(), [0, 0, 1 / 6, 1 / 6, 1 / 6, 1 / 6],
                               rtol=1e-6)
    z = em.Var(em.tensor([0.0, -0.0], device=device))
    np.testing.assert_allclose(em.nn.elu(z, 0.7).sum().backward()[z].numpy(), [0.7, 0.7], rtol=1e-6)
    np.testing.assert_allclose(em.nn.leaky_relu(z, 0.2).sum().backward()[z].numpy(), [0.2, 0.2], rtol=1e-6)
    s = em.Var(em.tensor([1.5, 1.5000002, 1.4999998], device=device))
    out = em.nn.softplus(s, 2.0, 3.0)
    gs = out.sum().backward()[s].numpy()
    assert out.numpy()[1] == np.float32(1.5000002) and gs[1] == 1.0 and gs[0] < 1.0 and gs[2] < 1.0
    t = torch.tensor([1.5, 1.4999998], dtype=torch.float64)
    np.testing.assert_allclose(out.numpy()[[0, 2]], F.softplus(t, 2.0, 3.0).numpy(), rtol=1e-6)


def test_softplus_never_overflows_with_a_raised_threshold(device):
    # torch's log1p(exp(beta x)) is inf in float32 from beta x = 89 on; ember's stable form is not
    x = em.Var(em.tensor([95.0, 150.0, -150.0, 0.0], device=device))
    y = em.nn.softplus(x, 1.0, 1000.0)
    g = y.sum().backward()[x].numpy()
    t = torch.tensor([95.0, 150.0, -150.0, 0.0], dtype=torch.float64)
    tiny = float(np.finfo(np.float32).tiny)  # softplus(-150) = e^-150 is below float32's range
    np.testing.assert_allclose(y.numpy(), F.softplus(t, 1.0, 1000.0).numpy(), rtol=1e-6, atol=tiny)
    np.testing.assert_allclose(g, torch.sigmoid(t).numpy(), rtol=1e-6, atol=tiny)


@pytest.mark.parametrize("dt", [d for d in FLOATS if d in (em.float16, em.bfloat16)], ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(KERNELS))
def test_halves_compute_in_float32(name, dt, rng, device):
    # the forward and gradient of a half tensor are the float32 computation rounded once: torch's float32
    # result rounded to the half type (within one unit of rounding), also where e^x or x^3 leaves float16
    ef, tf, _, _, _ = KERNELS[name]
    xs = np.concatenate([rng.uniform(-12, 12, size=40), [11.5, -11.5, 9.0, 30.0, -30.0]]).astype(npdt(dt))
    x = em.Var(em.tensor(xs, device=device))
    y = ef(x)
    g = y.sum().backward()[x]
    t = torch.tensor(xs.astype(np.float32), requires_grad=True)
    ty = tf(t)
    (tg,) = torch.autograd.grad(ty.sum(), t)
    eps = {"float16": 2.0**-10, "bfloat16": 2.0**-7}[dt.name]
    for got, want in ((y, ty.detach()), (g, tg)):
        got = got.numpy().astype(np.float64)
        want = want.numpy().astype(np.float64)
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, rtol=1.01 * eps, atol=1e-3 * eps)


@pytest.mark.parametrize("name", list(KERNELS))
def test_fused_backward_on_strided_and_broadcast_operands(name, rng, device):
    # a transposed x with a broadcast (stride-0) gradient, a stepped x with an offset gradient, and
    # nine dims of size 2 (past the Metal kernel's eight strided dims); each against torch's gradient
    _, tf, kernel, p0, p1 = KERNELS[name]
    dt = wide(device)
    base = rng.uniform(-5, 5, size=(9, 70)).astype(npdt(dt))
    xt = em.tensor(base, device=device).transpose(0, 1)  # (70, 9)
    g1 = em.tensor(np.array(1.25, npdt(dt)), device=device).broadcast_as((70, 9))
    gbase = rng.uniform(-2, 2, size=(3, 70, 20)).astype(npdt(dt))
    xs = em.tensor(np.concatenate([base.T, base.T], 1), device=device)[:, ::2]  # (70, 9), stepped
    g2 = em.tensor(gbase, device=device)[1, :, 3:12]
    big = rng.uniform(-5, 5, size=(2,) * 10).astype(npdt(dt))
    x3 = em.tensor(big, device=device).permute(*range(9, -1, -1))[0]
    g3 = em.tensor(rng.uniform(-2, 2, size=(2,) * 9).astype(npdt(dt)), device=device).transpose(0, 8)
    for x, g in ((xt, g1), (xs, g2), (x3, g3)):
        t = torch.tensor(x.numpy().astype(np.float64), requires_grad=True)
        (want,) = torch.autograd.grad(tf(t), t, torch.tensor(g.numpy().astype(np.float64)))
        got = _fused_bwd(kernel, x, g, p0, p1)
        assert got.shape == x.shape and got.is_contiguous()
        rtol, atol = TOL[dt.name]
        rtol = max(rtol * 20, F64_RTOL.get(name, 0.0))
        np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy(), rtol=rtol, atol=atol * 50)


@pytest.mark.parametrize("name", ["elu", "softplus", "softplus_neg_beta", "mish", "hardswish", "gelu_tanh"])
def test_second_order_matches_torch(name, rng, device):
    ef, tf, _, _, _ = KERNELS[name]
    dt = wide(device)
    xs = rng.uniform(-4, 4, size=(5, 6))
    xs[np.abs(np.abs(xs) - 3) < 1e-2] = 1.0  # away from hardswish's kinks
    x = em.Var(em.tensor(xs.astype(npdt(dt)), device=device))
    gx = ef(x).sum().backward(create_graph=True)[x]
    g2 = (gx * gx).sum().backward()[x].numpy().astype(np.float64)
    t = torch.tensor(xs.astype(npdt(dt)).astype(np.float64), requires_grad=True)
    (tg,) = torch.autograd.grad(tf(t).sum(), t, create_graph=True)
    (tg2,) = torch.autograd.grad((tg * tg).sum(), t)
    rtol, atol = (1e-10, 1e-12) if dt is em.float64 else (1e-4, 1e-5)
    np.testing.assert_allclose(g2, tg2.numpy(), rtol=rtol, atol=atol)


def test_kernel_errors(device):
    ints = em.ones(4, dtype="int64", device=device)
    f = em.ones(4, device=device)
    for kernel in ("elu", "leaky_relu", "softplus", "mish", "hardswish", "hardsigmoid", "gelu_tanh"):
        code = em._C.UNARY_OPS.index(kernel)
        expect_error(lambda c=code: em._C.unary(c, ints._storage, ints._layout, 1.0, 0.0), kernel, em.DTypeError)
        bwd = getattr(em._C.fused, kernel + "_bwd")
        expect_error(lambda b=bwd: b(ints._storage, ints._layout, ints._storage, ints._layout, 1.0, 0.0),
                     kernel + "_bwd", em.DTypeError)
        g5 = em.ones(5, device=device)
        expect_error(lambda b=bwd, g=g5: b(f._storage, f._layout, g._storage, g._layout, 1.0, 0.0),
                     kernel + "_bwd", em.ShapeError)
        h = em.ones(4, dtype="float16", device=device)
        expect_error(lambda b=bwd, g=h: b(f._storage, f._layout, g._storage, g._layout, 1.0, 0.0),
                     kernel + "_bwd", em.DTypeError)
    expect_error(lambda: em.nn.mish(ints), "mish", em.DTypeError)


@pytest.mark.parametrize("beta, threshold", [(1.0, 20.0), (2.0, 10.0), (0.5, 20.0)])
def test_softplus_float32_within_a_few_ulp_on_a_dense_grid(beta, threshold, device):
    # float32's log1p(e^-|bx|) is a polynomial of its own (cpu/functors.h): its worst case over the whole
    # range, against float64, tiny and large |x| included
    x = np.concatenate([np.linspace(-120, 30, 400001), -np.logspace(-30, 2, 20000),
                        np.logspace(-30, 1.3, 20000)]).astype(np.float32)
    with em.no_grad():
        y = em.nn.softplus(em.tensor(x, device=device), beta, threshold).numpy().astype(np.float64)
    bx = x.astype(np.float64) * beta
    ref = np.where(bx > threshold, x, (np.maximum(bx, 0) + np.log1p(np.exp(-np.abs(bx)))) / beta)
    r32 = ref.astype(np.float32)
    # where the reference rounds to 0, a GPU's 1-ulp exp may give the smallest denormal
    assert (np.abs(y[r32 == 0]) <= np.spacing(np.float32(0))).all()
    nz = r32 != 0
    ulp = np.abs(y - ref)[nz] / np.spacing(np.abs(r32[nz])).astype(np.float64)
    assert ulp.max() <= 4, (ulp.max(), x[nz][np.argmax(ulp)])
