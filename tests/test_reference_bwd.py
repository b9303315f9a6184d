"""A backward from a reference: ops with reference() and no bwd, create_graph through it, check_op against it, fused ops' second order."""
import numpy as np
import pytest

import ember as em
from ember import backprop
from ember.tensor_type import _wrap

from conftest import f64


class _grad_on:
    """Grad mode on inside gradcheck's finite-difference calls (they run under no_grad)."""

    def __enter__(self):
        self.prev, backprop._mode.enabled = backprop._mode.enabled, True

    def __exit__(self, *exc):
        backprop._mode.enabled = self.prev


class Softplus(em.CustomOp1):
    """A forward (built-in ops on any device) and a reference; no bwd: backward differentiates the reference."""

    name = "softplus_ref"

    def cpu_fwd(self, storage, layout):
        x = _wrap(storage, layout, storage.dtype, storage.device)
        with em.no_grad():
            return (x.exp() + 1.0).log().contiguous().copy()._storage, layout.shape

    metal_fwd = cuda_fwd = cpu_fwd

    def reference(self, x):
        return (x.exp() + 1.0).log()


class Hypot(em.CustomOp2):
    name = "hypot_ref"

    def cpu_fwd(self, s1, l1, s2, l2):
        a, b = _wrap(s1, l1, s1.dtype, s1.device), _wrap(s2, l2, s2.dtype, s2.device)
        with em.no_grad():
            return (a * a + b * b).sqrt().contiguous().copy()._storage, l1.shape

    metal_fwd = cuda_fwd = cpu_fwd

    def reference(self, a, b):
        return (a * a + b * b).sqrt()


class Polar(em.CustomOp):
    """(r cos t, r sin t): two inputs, two outputs, only a reference."""

    name = "polar_ref"

    def cpu_fwd(self, inputs):
        r, t = (_wrap(s, l, s.dtype, s.device) for s, l in inputs)
        with em.no_grad():
            return [((r * t.cos()).copy()._storage, r.shape), ((r * t.sin()).copy()._storage, r.shape)]

    metal_fwd = cuda_fwd = cpu_fwd

    def reference(self, r, t):
        return r * t.cos(), r * t.sin()


def test_backward_from_reference(device):
    xn = np.random.default_rng(0).standard_normal((3, 4))
    x = em.Var(xn, dtype="float32", device=device)
    g = x.apply_op1(Softplus()).sum().backward()[x]
    np.testing.assert_allclose(f64(g.numpy()), 1 / (1 + np.exp(-xn)), rtol=1e-5, atol=1e-6)
    a, b = em.Var(xn, dtype="float32", device=device), em.Var(xn[::-1].copy(), dtype="float32", device=device)
    gs = a.apply_op2(b, Hypot()).sum().backward()
    h = np.hypot(xn, xn[::-1])
    np.testing.assert_allclose(f64(gs[a].numpy()), xn / h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(f64(gs[b].numpy()), xn[::-1] / h, rtol=1e-4, atol=1e-5)


def test_reference_gradients_keep_the_graph():
    x = em.Var(np.linspace(-2, 2, 7), device="cpu")
    g = x.apply_op1(Softplus()).sum().backward(create_graph=True)[x]  # sigmoid(x)
    h = g.sum().backward()[x]
    s = 1 / (1 + np.exp(-np.linspace(-2, 2, 7)))
    np.testing.assert_allclose(h.numpy(), s * (1 - s), rtol=1e-10)
    assert em.testing.gradcheck(lambda t: t.apply_op1(Softplus()), [em.randn(5, dtype="float64", device="cpu")])


def test_many_outputs_from_reference(device):
    rn, tn = np.random.default_rng(1).uniform(0.5, 2, 6), np.random.default_rng(2).uniform(-3, 3, 6)
    r, t = em.Var(rn, dtype="float32", device=device), em.Var(tn, dtype="float32", device=device)
    x, y = em.apply_op(Polar(), r, t)
    gs = (x * 2.0 + y * 3.0).sum().backward()
    np.testing.assert_allclose(f64(gs[r].numpy()), 2 * np.cos(tn) + 3 * np.sin(tn), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(f64(gs[t].numpy()), rn * (-2 * np.sin(tn) + 3 * np.cos(tn)), rtol=1e-4, atol=1e-5)
    _, y = em.apply_op(Polar(), r, t)  # a gradient reaching one output only
    gs = y.sum().backward()
    np.testing.assert_allclose(f64(gs[r].numpy()), np.sin(tn), rtol=1e-4, atol=1e-5)


def test_check_op_compares_forward_and_bwd_with_the_reference(device):
    rep = em.testing.check_op(Softplus(), em.randn(4, 3, device=device))
    assert {"backward", "reference forward"} <= set(rep.passed)
    rep = em.testing.check_op(Polar(), em.rand(3, device=device) + 0.5, em.randn(3, device=device))
    assert {"backward", "reference forward"} <= set(rep.passed)

    class HandBwd(Hypot):
        name = "hypot_hand"

        def bwd(self, a, b, res, g):
            return g * a / res, g * b / res

    rep = em.testing.check_op(HandBwd(), em.randn(3, device=device), em.randn(3, device=device))
    assert {"reference forward", "reference backward"} <= set(rep.passed)


def test_check_op_finds_a_reference_mismatch():
    class WrongRef(Softplus):
        name = "softplus_wrong_ref"

        def reference(self, x):
            return x.exp().log1p() * 1.01

    with pytest.raises(em.testing.CheckOpError) as ei:
        em.testing.check_op(WrongRef(), em.randn(3, device="cpu"))
    assert "reference" in str(ei.value)

    class WrongBwd(Hypot):
        name = "hypot_wrong_bwd"

        def bwd(self, a, b, res, g):
            return g * a / res, g * a / res

    with pytest.raises(em.testing.CheckOpError) as ei:
        em.testing.check_op(WrongBwd(), em.randn(3, device="cpu"), em.randn(3, device="cpu"))
    assert "reference" in str(ei.value) and "input 1" in str(ei.value)


@pytest.mark.parametrize("fn", [
    lambda x, w, b: em.nn.ops.rms_norm(x, w),
    lambda x, w, b: em.nn.ops.rms_norm(x),
    lambda x, w, b: em.nn.ops.layer_norm(x, w, b),
    lambda x, w, b: em.nn.ops.layer_norm(x, None, b),
    lambda x, w, b: em.nn.ops.layer_norm(x, w, None),
    lambda x, w, b: em.nn.ops.layer_norm(x),
    lambda x, w, b: em.nn.ops.softmax(x, 0),
    lambda x, w, b: em.nn.ops.log_softmax(x, -1),
    lambda x, w, b: em.nn.ops.gelu(x) * w,
    lambda x, w, b: em.nn.ops.silu(x) + b,
    lambda x, w, b: em.nn.ops.sigmoid(x),
])
def test_fused_second_order_goes_through_the_reference(fn):
    # gradcheck of the first-order gradient (create_graph): the fused ops' second-order path
    rng = np.random.default_rng(4)
    xn, wn, bn = rng.standard_normal((3, 5)), rng.standard_normal(5), rng.standard_normal(5)

    def first(x, w, b):  # gradcheck's variables: the gradient of the gradient is second order
        with _grad_on():
            x, w, b = (t if t.is_variable else em.Var(t) for t in (x, w, b))  # the finite-difference calls
            out = fn(x, w, b)
            return (out * out).sum().backward(create_graph=True)[x] * 1.0

    assert em.testing.gradcheck(first, [em.tensor(a, device="cpu") for a in (xn, wn, bn)])


def test_sdpa_second_order_through_the_reference():
    rng = np.random.default_rng(5)
    q, k, v = (em.tensor(rng.standard_normal((1, 2, 3, 4)), device="cpu") for _ in range(3))

    def first(q, k, v):
        with _grad_on():
            q, k, v = (t if t.is_variable else em.Var(t) for t in (q, k, v))
            out = em.nn.ops.sdpa(q, k, v, causal=True)
            return (out * out).sum().backward(create_graph=True)[k] * 1.0

    assert em.testing.gradcheck(first, [q, k, v])
