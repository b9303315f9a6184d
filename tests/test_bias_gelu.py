"""nn.ops.bias_gelu (gelu(x + b), fused on the CPU) and nn.MLP's use of it: values, gradients, errors, devices."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import ember as em
from ember import nn

from conftest import FLOATS, TOL, VIEWS, WIDE, expect_error, make_view, npdt, rand_np, rand_shape


def _torch_ref(x, b, up):
    """gelu(x + b) and the gradients of (y * up).sum() in float64 by torch."""
    tx = torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=True)
    tb = torch.tensor(np.asarray(b, dtype=np.float64), requires_grad=True)
    ty = TF.gelu(tx + tb)
    (ty * torch.tensor(up)).sum().backward()
    return ty.detach().numpy(), tx.grad.numpy(), tb.grad.numpy()


@pytest.mark.parametrize("kind", [k for k in VIEWS if k != "broadcast"] + ["broadcast"])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_equals_the_unfused_ops_and_torch(device, rng, kind, dt):
    shape = rand_shape(rng, int(rng.integers(1, 4)), 1, 9)
    x, xn = make_view(rng, shape, dt, kind, device=device)
    bn = rand_np(rng, shape[-1:], dt)
    b = em.tensor(bn, device=device)
    y = nn.ops.bias_gelu(x, b)
    # the sum is rounded to the dtype first, so the forward is the two ops' result exactly
    np.testing.assert_array_equal(y.numpy(), nn.ops.gelu(x + b).numpy())
    up = rng.standard_normal(shape)
    ry, rdx, rdb = _torch_ref(xn, bn, up)
    rtol, atol = TOL[dt.name]
    np.testing.assert_allclose(y.numpy().astype(np.float64), ry, rtol=rtol, atol=atol * 10)
    xv, bv = em.Var(x), em.Var(b)
    g = (nn.ops.bias_gelu(xv, bv) * em.tensor(up, dtype=dt, device=device)).sum().backward()
    # the gradients of the dtype's rounded upstream gradient, against float64
    up_r = up.astype(npdt(dt)).astype(np.float64)
    _, rdx, rdb = _torch_ref(xn, bn, up_r)
    scale = max(1.0, float(np.abs(up).max()))
    np.testing.assert_allclose(g[xv].numpy().astype(np.float64), rdx, rtol=rtol * 4, atol=atol * 10 * scale)
    rows = int(np.prod(shape[:-1]))
    np.testing.assert_allclose(g[bv].numpy().astype(np.float64), rdb, rtol=rtol * 4,
                               atol=atol * 10 * scale * rows)


def test_gradcheck_float64(device):
    if em.float64 not in FLOATS:  # gradcheck differentiates in float64, which Metal does not hold
        device = em.cpu
    rng = np.random.default_rng(5)
    x = em.tensor(rng.standard_normal((3, 4, 5)) * 2, device=device)
    b = em.tensor(rng.standard_normal(5), device=device)
    assert em.testing.gradcheck(nn.ops.bias_gelu, [x, b])
    # through a transposed x as well
    xt = em.tensor(rng.standard_normal((5, 6)), device=device).t()
    assert em.testing.gradcheck(nn.ops.bias_gelu, [xt, b])


def test_second_order_through_the_composite(device):
    rng = np.random.default_rng(6)
    xn, bn = rng.standard_normal((4, 3)), rng.standard_normal(3)
    x, b = em.Var(em.tensor(xn, dtype=WIDE, device=device)), em.Var(em.tensor(bn, dtype=WIDE, device=device))
    g = nn.ops.bias_gelu(x, b).sum().backward(create_graph=True)
    gg = (g[x] * g[x]).sum().backward()
    tx = torch.tensor(xn, requires_grad=True)
    tb = torch.tensor(bn, requires_grad=True)
    (dx,) = torch.autograd.grad(TF.gelu(tx + tb).sum(), tx, create_graph=True)
    (dx * dx).sum().backward()
    rtol, atol = TOL[WIDE.name]
    np.testing.assert_allclose(gg[x].numpy(), tx.grad.numpy(), rtol=rtol * 10, atol=atol * 10)
    np.testing.assert_allclose(gg[b].numpy(), tb.grad.numpy(), rtol=rtol * 10, atol=atol * 10)


def test_constant_bias_or_input_takes_no_gradient(device):
    rng = np.random.default_rng(7)
    xn, bn = rng.standard_normal((6, 4)), rng.standard_normal(4)
    x = em.Var(em.tensor(xn, dtype=WIDE, device=device))
    b = em.tensor(bn, dtype=WIDE, device=device)
    g = nn.ops.bias_gelu(x, b).sum().backward()
    assert b not in g
    _, rdx, _ = _torch_ref(xn, bn, np.ones((6, 4)))
    np.testing.assert_allclose(g[x].numpy(), rdx, rtol=TOL[WIDE.name][0] * 4, atol=TOL[WIDE.name][1] * 10)
    bv = em.Var(b)
    g = nn.ops.bias_gelu(em.tensor(xn, dtype=WIDE, device=device), bv).sum().backward()
    _, _, rdb = _torch_ref(xn, bn, np.ones((6, 4)))
    np.testing.assert_allclose(g[bv].numpy(), rdb, rtol=TOL[WIDE.name][0] * 4, atol=TOL[WIDE.name][1] * 60)


def test_empty_rows(device):
    x = em.Var(em.zeros(0, 5, device=device))
    b = em.Var(em.ones(5, device=device))
    y = nn.ops.bias_gelu(x, b)
    assert y.shape == (0, 5)
    g = y.sum().backward()
    np.testing.assert_array_equal(g[b].numpy(), np.zeros(5, np.float32))


def test_errors(device):
    x = em.randn(3, 4, device=device)
    expect_error(lambda: nn.ops.bias_gelu(x, em.randn(3, device=device)), "bias_gelu", em.ShapeError)
    expect_error(lambda: nn.ops.bias_gelu(x, em.randn(1, 4, device=device)), "bias_gelu", em.ShapeError)
    expect_error(lambda: nn.ops.bias_gelu(em.tensor(1.0, device=device), em.randn(1, device=device)), "bias_gelu",
                 em.ShapeError)
    other = em.float16 if x.dtype is not em.float16 else em.float32
    expect_error(lambda: nn.ops.bias_gelu(x, em.randn(4, device=device).to_dtype(other)), "bias_gelu",
                 em.DTypeError)
    xi = em.tensor(np.arange(12).reshape(3, 4), device=device)
    expect_error(lambda: nn.ops.bias_gelu(xi, em.tensor(np.arange(4), device=device)), "bias_gelu", em.DTypeError)
    expect_error(lambda: nn.ops.bias_gelu(np.ones((3, 4)), em.randn(4, device=device)), "bias_gelu",
                 em.EmberTypeError)
    expect_error(lambda: nn.ops.bias_gelu(x, [1.0, 2.0, 3.0, 4.0]), "bias_gelu", em.EmberTypeError)


def test_kernel_entry_checks_its_arguments(device):
    """The _C.fused entry points refuse what the Python wrapper would: nothing reaches a kernel unchecked."""
    F = em._C.fused
    x, b, g = em.randn(3, 4, device=device), em.randn(5, device=device), em.randn(3, 4, device=device)
    if device.type != "cpu":  # no kernel on this device: the entry says so (the wrapper runs the two ops)
        b4 = em.randn(4, device=device)
        expect_error(lambda: F.bias_gelu_fwd(x._storage, x._layout, b4._storage, b4._layout), "bias_gelu",
                     em.EmberError)
        return
    expect_error(lambda: F.bias_gelu_fwd(x._storage, x._layout, b._storage, b._layout), "bias_gelu", em.ShapeError)
    expect_error(lambda: F.bias_gelu_bwd(x._storage, x._layout, b._storage, b._layout, g._storage, g._layout),
                 "bias_gelu_bwd", em.ShapeError)
    b4, g2 = em.randn(4), em.randn(3, 5)
    expect_error(lambda: F.bias_gelu_bwd(x._storage, x._layout, b4._storage, b4._layout, g2._storage, g2._layout),
                 "bias_gelu_bwd", em.ShapeError)
    bd = em.randn(4, dtype=em.float64)
    expect_error(lambda: F.bias_gelu_fwd(x._storage, x._layout, bd._storage, bd._layout), "bias_gelu",
                 em.DTypeError)


@pytest.mark.parametrize("bias", [True, False])
def test_mlp_matches_linear_then_gelu(device, bias):
    em.manual_seed(3)
    m = nn.MLP(6, 10, "gelu", bias=bias, dtype=WIDE, device=device)
    xn = np.random.default_rng(8).standard_normal((2, 3, 6))
    x = em.Var(em.tensor(xn, dtype=WIDE, device=device))
    y = m(x)
    ref = m.proj(nn.ops.gelu(m.fc(x)))
    np.testing.assert_array_equal(y.numpy(), ref.numpy())
    g, gr = y.sum().backward(), ref.sum().backward()
    rtol, atol = TOL[WIDE.name]
    for p in [x] + list(m.parameters()):
        np.testing.assert_allclose(g[p].numpy(), gr[p].numpy(), rtol=rtol, atol=atol * 10)
    # and the same model in torch
    tm = torch.nn.Sequential(torch.nn.Linear(6, 10, bias=bias), torch.nn.GELU(), torch.nn.Linear(10, 6, bias=bias))
    with torch.no_grad():
        tm[0].weight.copy_(torch.tensor(m.fc.weight.numpy().astype(np.float64)))
        tm[2].weight.copy_(torch.tensor(m.proj.weight.numpy().astype(np.float64)))
        if bias:
            tm[0].bias.copy_(torch.tensor(m.fc.bias.numpy().astype(np.float64)))
            tm[2].bias.copy_(torch.tensor(m.proj.bias.numpy().astype(np.float64)))
    tm = tm.double()
    np.testing.assert_allclose(y.numpy(), tm(torch.tensor(xn)).detach().numpy(), rtol=rtol * 10, atol=atol * 10)


ISA_SCRIPT = """
import numpy as np
import ember as em
from ember import nn
rng = np.random.default_rng(0)
for dt in (em.float32, em.float64, em.bfloat16, em.float16):
    for shape in ((5, 37), (3, 16), (2, 3, 70), (1, 1)):
        xn, bn = rng.standard_normal(shape) * 3, rng.standard_normal(shape[-1:])
        x, b = em.Var(em.tensor(xn, dtype=dt)), em.Var(em.tensor(bn, dtype=dt))
        y = nn.ops.bias_gelu(x, b)
        assert np.array_equal(y.numpy(), nn.ops.gelu(x + b).numpy(), equal_nan=True), (dt, shape)
        g = y.sum().backward()
        gr = nn.ops.gelu(x + b).sum().backward()
        tol = 1e-12 if dt is em.float64 else 1e-5 if dt is em.float32 else 2e-2
        assert np.array_equal(g[x].numpy(), gr[x].numpy()), (dt, shape)
        np.testing.assert_allclose(g[b].numpy().astype(np.float64), gr[b].numpy().astype(np.float64),
                                   rtol=tol, atol=tol * shape[0])
print("ok")
"""


@pytest.mark.cpu_only
def test_every_isa_matches_the_unfused_ops():
    """Each SIMD level's fused kernels (vector bodies and tails) give the unfused add + gelu's forward and x
    gradient bit for bit, and the bias gradient within the dtype's rounding."""
    import os
    import subprocess
    import sys

    procs = {isa: subprocess.Popen([sys.executable, "-c", ISA_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=dict(os.environ, EMBER_ISA=isa, PYTHONPATH=os.pathsep.join(sys.path)))
             for isa in ("base", "avx2", "avx512")}  # side by side: each is one process's start-up and a few ops
    try:
        for isa, p in procs.items():
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0 and "ok" in out, f"{isa}: {err[-3000:]}"
    finally:  # a failed or timed-out check leaves no child running (as subprocess.run's timeout did)
        for p in procs.values():
            p.kill()
            p.wait()


def test_float32_special_and_clamp_edges():
    # the float kernels clamp x^2 / 2 at 86.41 and x at 14 with integer mins of the bits: NaN of either sign
    # stays NaN, +-inf as torch (inf, NaN; gradient NaN), and the values around both clamps match the double
    # reference (within 8 ulp; the gradient within 6 ulp of its size), forward and backward
    nan_neg = np.array([0xFFC00000], np.uint32).view(np.float32)[0]
    edge = np.float32(np.sqrt(2 * 86.41))
    xs = np.concatenate([np.array([np.inf, -np.inf, np.nan, nan_neg, 0.0, -0.0], np.float32),
                         np.nextafter(edge, np.float32(np.inf)) * np.array([1, -1], np.float32),
                         np.linspace(-14.5, 14.5, 2901, dtype=np.float32), [edge, -edge, 14, -14, 1e30, -1e30]])
    xs = xs.astype(np.float32)
    x = em.Var(em.tensor(xs.reshape(1, -1), device="cpu"))
    b = em.tensor(np.zeros(xs.size, np.float32), device="cpu")
    y = nn.ops.bias_gelu(x, b)
    dx = y.sum().backward()[x].numpy().ravel()
    y = y.numpy().ravel()
    assert y[0] == np.inf and np.isnan(y[1:4]).all() and y[4] == 0 and y[5] == 0
    assert np.isnan(dx[:4]).all()
    f, xd = slice(4, None), xs[4:].astype(np.float64)
    ref = 0.5 * xd * np.array([math.erfc(-v / math.sqrt(2)) for v in xd])
    tiny = 2 * np.finfo(np.float32).tiny  # from |x| = 13.146 on, results near FLT_MIN or below are 0
    assert (np.abs(y[f] - ref) <= np.maximum(8 * np.spacing(np.abs(ref).astype(np.float32)), tiny)).all()
    cdf = 0.5 * np.array([math.erfc(-v / math.sqrt(2)) for v in xd])
    pdf = xd * np.exp(-0.5 * xd * xd) / math.sqrt(2 * math.pi)
    scale = np.maximum(cdf, np.abs(pdf)).astype(np.float32)
    near = np.abs(xd) <= 13.1  # beyond, e^(-x^2/2) is taken as 0: the gradient is 1 or 0 within 2e-37
    assert (np.abs(dx[f] - (cdf + pdf)) <= 6 * np.spacing(scale))[near].all()
    assert (np.abs(dx[f] - (cdf + pdf)) <= 2e-37)[~near].all()
    np.testing.assert_array_equal(y, em.tensor(xs, device="cpu").gelu().numpy())  # the unfused gelu, bit for bit
