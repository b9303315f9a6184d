"""Each fused op defined once: the Tensor methods and nn.ops share one activation backward, and the
create_graph path (the composite form) agrees with the fused backward kernel, on every device."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from devcheck import wide

import ember as em
from ember.activation import COMPOSITES, Activation

from conftest import npdt

# Tensor method, nn.ops function, torch function
PAIRS = {
    "gelu": (lambda x: x.gelu(), em.nn.ops.gelu, F.gelu),
    "silu": (lambda x: x.silu(), em.nn.ops.silu, F.silu),
    "sigmoid": (lambda x: x.sigmoid(), em.nn.ops.sigmoid, torch.sigmoid),
}


@pytest.mark.parametrize("name", list(PAIRS))
def test_tensor_method_and_nn_op_differentiate_identically(name, rng, device):
    meth, fn, tf = PAIRS[name]
    dt = wide(device)
    xs = rng.uniform(-4, 4, size=(5, 7))
    x = em.Var(em.tensor(xs.astype(npdt(dt)), device=device))
    w = em.tensor(rng.uniform(0.5, 1.5, size=(5, 7)).astype(npdt(dt)), device=device)
    g1 = [(f(x) * w).sum().backward()[x] for f in (meth, fn)]
    np.testing.assert_array_equal(g1[0].numpy(), g1[1].numpy())  # first order: the same fused kernel
    g2 = []
    for f in (meth, fn):
        gx = (f(x) * w).sum().backward(create_graph=True)[x]
        assert gx.op is not None
        g2.append(((gx * gx).sum().backward()[x], gx.detach()))
    np.testing.assert_array_equal(g2[0][1].numpy(), g2[1][1].numpy())  # create_graph first order
    np.testing.assert_array_equal(g2[0][0].numpy(), g2[1][0].numpy())  # second order
    t = torch.tensor(xs.astype(npdt(dt)).astype(np.float64), requires_grad=True)
    tw = torch.tensor(w.numpy().astype(np.float64))
    (tg,) = torch.autograd.grad((tf(t) * tw).sum(), t, create_graph=True)
    (tg2,) = torch.autograd.grad((tg * tg).sum(), t)
    rtol, atol = (1e-10, 1e-12) if dt is em.float64 else (1e-4, 1e-5)
    np.testing.assert_allclose(g2[0][1].numpy().astype(np.float64), tg.detach().numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(g2[0][0].numpy().astype(np.float64), tg2.numpy(), rtol=rtol, atol=atol)


# activation -> (p0, p1) as nn passes them
PARAMS = {"sigmoid": (0.0, 0.0), "silu": (0.0, 0.0), "gelu": (0.0, 0.0), "elu": (0.7, 0.0), "leaky_relu": (0.2, 0.0),
          "softplus": (1.0, 20.0), "mish": (0.0, 0.0), "hardswish": (0.0, 0.0), "hardsigmoid": (0.0, 0.0),
          "gelu_tanh": (0.0, 0.0)}
EDGES = [-30.0, -20.5, -4.0, -3.0, -2.5, -1.0, -1e-3, 0.0, 1e-3, 0.5, 2.5, 3.0, 4.0, 19.0, 20.5, 30.0]


@pytest.mark.parametrize("name", list(COMPOSITES))
def test_composite_gradient_is_the_kernels_at_edges_and_kinks(name, device):
    """The create_graph gradient (of the composite form) is the fused kernel's, kinks included."""
    assert set(PARAMS) == set(COMPOSITES)
    dt = wide(device)
    p0, p1 = PARAMS[name]
    x = em.Var(em.tensor(np.array(EDGES, npdt(dt)), device=device))
    op = Activation(name, p0, p1)
    y = x.apply_op1(op)
    # float32 (Metal) under GPU math: approximate tanh/exp leave ~1e-6 absolute near saturation; a kink's
    # wrong derivative is off by O(0.1), far outside either tolerance
    f32 = dt is not em.float64
    np.testing.assert_allclose(y.numpy(), COMPOSITES[name](x.detach(), p0, p1).numpy(),
                               rtol=1e-5 if f32 else 1e-6, atol=3e-6 if f32 else 1e-7)
    fast = y.sum().backward()[x].numpy()
    slow = x.apply_op1(op).sum().backward(create_graph=True)[x]
    assert np.isfinite(slow.numpy()).all()
    np.testing.assert_allclose(slow.detach().numpy(), fast, rtol=1e-3 if f32 else 1e-5, atol=1e-5 if f32 else 1e-6)


def test_softplus_composite_at_zero_and_far_out(device):
    """softplus' composite keeps sigmoid's derivative exact at 0 and finite far out (no dropped inf)."""
    dt = wide(device)
    x = em.Var(em.tensor(np.array([0.0, -200.0, 200.0], npdt(dt)), device=device))
    gx = em.nn.softplus(x, 1.0, float("inf")).sum().backward(create_graph=True)[x]
    np.testing.assert_allclose(gx.detach().numpy(), [0.5, 0.0, 1.0], atol=1e-7)
    g2 = gx.sum().backward()[x].numpy()
    np.testing.assert_allclose(g2, [0.25, 0.0, 0.0], atol=1e-7)


def _cases(rng, dt, device):
    """(name, fn, inputs): each fused op once per declared variant."""
    def t(*shape, lo=-2.0, hi=2.0):
        return em.Var(em.tensor(rng.uniform(lo, hi, size=shape).astype(npdt(dt)), device=device))

    x, w, b = t(3, 5, 8), t(8), t(8)
    q, k, v = t(2, 4, 6, 8), t(2, 2, 7, 8), t(2, 2, 7, 5)
    cos = em.tensor(np.cos(rng.uniform(0, 3, (5, 3))).astype(npdt(dt)), device=device)
    sin = em.tensor(np.sin(rng.uniform(0, 3, (5, 3))).astype(npdt(dt)), device=device)
    gx, gw, gb = t(2, 6, 3, 2), t(6), t(6)
    return [
        ("softmax", lambda a: em.nn.ops.softmax(a), [x]),
        ("log_softmax", lambda a: em.nn.ops.log_softmax(a), [x]),
        ("rms_norm", lambda a, c: em.nn.ops.rms_norm(a, c, 1e-3), [x, w]),
        ("rms_norm_no_weight", lambda a: em.nn.ops.rms_norm(a, None, 1e-3), [x]),
        ("layer_norm", lambda a, c, d: em.nn.ops.layer_norm(a, c, d, 1e-3), [x, w, b]),
        ("layer_norm_x", lambda a: em.nn.ops.layer_norm(a), [x]),
        ("layer_norm_w", lambda a, c: em.nn.ops.layer_norm(a, c), [x, w]),
        ("layer_norm_b", lambda a, d: em.nn.ops.layer_norm(a, None, d), [x, b]),
        ("sdpa_gqa_causal", lambda a, c, d: em.nn.ops.sdpa(a, c, d, causal=True, softcap=5.0), [q, k, v]),
        ("rope", lambda a: em.nn.ops.rope(a, 6, base=100.0, offset=3), [x]),
        ("rope_traditional", lambda a: em.nn.ops.rope(a, 8, traditional=True), [x]),
        ("rope_tables", lambda a: em.nn.ops.rope_tables(a, cos, sin), [x]),
        ("rope_i", lambda a: em.nn.ops.rope_i(a, cos, sin), [x]),
        ("group_norm", lambda a, c, d: em.nn.group_norm(a, 3, c, d), [gx, gw, gb]),
        ("group_norm_plain", lambda a: em.nn.group_norm(a, 2), [gx]),
        ("batch_norm_train", lambda a, c, d: em.nn.batch_norm(a, None, None, c, d, training=True), [gx, gw, gb]),
        ("batch_norm_eval", lambda a: em.nn.batch_norm(
            a, em.tensor(np.linspace(-1, 1, 6).astype(npdt(dt)), device=device),
            em.tensor(np.linspace(0.5, 2, 6).astype(npdt(dt)), device=device)),
         [gx]),
    ]


@pytest.mark.parametrize("case", range(17))
def test_each_fused_op_matches_its_composite_and_differentiates_it(case, rng, device):
    """The op's one composite form (its reference) gives the fused forward, and the create_graph
    gradient (the composite's) the fused backward kernel's."""
    dt = wide(device)
    name, fn, ins = _cases(rng, dt, device)[case]
    y = fn(*ins)
    op = y.op.saved
    assert hasattr(op, "composite"), name
    tol = dict(rtol=1e-9, atol=1e-10) if dt is em.float64 else dict(rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(op.composite(*[i.detach() for i in ins]).numpy(), y.numpy(), **tol, err_msg=name)
    g = em.tensor(np.random.default_rng(case).uniform(0.5, 1.5, y.shape).astype(npdt(dt)), device=device)
    fast = (y * g).sum().backward()
    slow = (fn(*ins) * g).sum().backward(create_graph=True)
    for i in ins:
        np.testing.assert_allclose(slow[i].detach().numpy(), fast[i].numpy(), **tol, err_msg=name)


def test_public_references_are_the_composites(rng, device):
    """rms_norm_slow / layer_norm_slow take the optional parameters the ops do."""
    dt = wide(device)
    x = em.tensor(rng.standard_normal((4, 6)).astype(npdt(dt)), device=device)
    w = em.tensor(rng.standard_normal(6).astype(npdt(dt)), device=device)
    tol = dict(rtol=1e-12, atol=1e-12) if dt is em.float64 else dict(rtol=1e-5, atol=1e-6)
    ops = em.nn.ops
    for got, want in ((ops.rms_norm_slow(x, None, 1e-4), ops.rms_norm(x, None, 1e-4)),
                      (ops.rms_norm_slow(x, w), ops.rms_norm(x, w)),
                      (ops.layer_norm_slow(x, None, w), ops.layer_norm(x, None, w)),
                      (ops.layer_norm_slow(x, w), ops.layer_norm(x, w)),
                      (ops.layer_norm_slow(x), ops.layer_norm(x)),
                      (ops.softmax_slow(x, 0), ops.softmax(x, 0)),
                      (ops.log_softmax_slow(x, 0), ops.log_softmax(x, 0))):
        np.testing.assert_allclose(got.numpy(), want.numpy(), **tol)


def test_sigmoid_composite_path_checks_its_input_version():
    """x.sigmoid()'s kernel backward reads only the output; the create_graph one (its composite) reads x
    too, so x modified in place after the op fails there, loudly, and only there."""
    x = em.Var(em.tensor([0.5, -1.0, 2.0], device="cpu"))  # written through its numpy view
    y = x.sigmoid().sum()
    want = 1.0 / (1.0 + np.exp(-np.array([0.5, -1.0, 2.0])))
    x.storage.numpy()[:] = 0
    np.testing.assert_allclose(y.backward()[x].numpy(), want * (1 - want), rtol=1e-5)
    with pytest.raises(em.InplaceModifiedError, match=r"^\[backward\] an input of sigmoid was modified"):
        y.backward(create_graph=True)
