"""em.CustomOp / em.apply_op: any number of inputs and outputs, per-output dtypes, non-differentiable outputs, mutation, check_op."""
import numpy as np
import pytest

import ember as em
from ember.tensor_type import _wrap

from conftest import expect_error, f64


def _tensors(inputs):
    """The forward's (storage, layout) pairs as plain tensors, so one forward serves every device."""
    return [_wrap(s, l, s.dtype, s.device) for s, l in inputs]


def _ret(*ts):
    with em.no_grad():
        return [(t.contiguous().copy()._storage, t.shape) for t in ts]


class SinCos(em.CustomOp):
    """(sin x, cos x): two outputs, a hand-written bwd that handles a missing gradient per output."""

    name = "sincos"

    def cpu_fwd(self, inputs):
        (x,) = _tensors(inputs)
        with em.no_grad():
            return _ret(x.sin(), x.cos())

    metal_fwd = cuda_fwd = cpu_fwd

    def bwd(self, inputs, outputs, grads):
        (s, c), (gs, gc) = outputs, grads
        g = None
        if gs is not None:
            g = gs * c
        if gc is not None:
            g = -(gc * s) if g is None else g - gc * s
        return [g]


class MaxIdx(em.CustomOp):
    """(max over the last dim, argmax): three inputs summed first, an int64 non-differentiable output."""

    name = "sum3_max"
    out_dtypes = (None, "int64")
    non_differentiable = (1,)

    def cpu_fwd(self, inputs):
        a, b, c = _tensors(inputs)
        with em.no_grad():
            s = a + b + c
            return _ret(s.max(-1), s.argmax(-1).to_dtype("int64"))

    metal_fwd = cuda_fwd = cpu_fwd

    def bwd(self, inputs, outputs, grads):
        a, b, c = inputs
        assert grads[1] is None
        s = a + b + c
        hit = s.eq(s.max(-1, keepdim=True)).to_dtype(a.dtype)
        g = hit * grads[0].unsqueeze(-1)
        return [g, g, g]


def test_two_outputs_values_and_gradients(device):
    xn = np.random.default_rng(0).standard_normal((3, 5))
    x = em.Var(xn, dtype="float32", device=device)
    s, c = em.apply_op(SinCos(), x)
    assert s.device == x.device and c.dtype == x.dtype
    np.testing.assert_allclose(f64(s.numpy()), np.sin(xn), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(f64(c.numpy()), np.cos(xn), rtol=1e-5, atol=1e-6)
    g = (s * 2.0 + c.exp()).sum().backward()[x]  # gradients reach both outputs
    want = 2 * np.cos(xn) - np.exp(np.cos(xn)) * np.sin(xn)
    np.testing.assert_allclose(f64(g.numpy()), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("which", [0, 1])
def test_gradient_reaches_one_output_other_dropped(device, which):
    xn = np.random.default_rng(1).standard_normal(7)
    x = em.Var(xn, dtype="float32", device=device)
    outs = em.apply_op(SinCos(), x)
    kept = outs[which]
    del outs  # the other output is gone: bwd still gets it (rebuilt), its gradient is None
    g = kept.sum().backward()[x]
    np.testing.assert_allclose(f64(g.numpy()), np.cos(xn) if which == 0 else -np.sin(xn), rtol=1e-4, atol=1e-5)


def test_outputs_reached_in_separate_branches_call_bwd_once():
    calls = []

    class Counted(SinCos):
        name = "sincos_counted"

        def bwd(self, inputs, outputs, grads):
            calls.append([g is not None for g in grads])
            return super().bwd(inputs, outputs, grads)

    x = em.Var(np.linspace(-1, 1, 6), device="cpu")
    s, c = em.apply_op(Counted(), x)
    loss = (s.exp() * 3.0).sum() + (c * c).tanh().sum() + s.sum()
    g = loss.backward()[x]
    xn = np.linspace(-1, 1, 6)
    want = 3 * np.exp(np.sin(xn)) * np.cos(xn) + (1 - np.tanh(np.cos(xn) ** 2) ** 2) * 2 * np.cos(xn) * -np.sin(xn) \
        + np.cos(xn)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-10)
    assert calls == [[True, True]]


def test_second_order_through_many_outputs():
    xn = np.random.default_rng(2).standard_normal(5)
    x = em.Var(xn, device="cpu")
    s, c = em.apply_op(SinCos(), x)
    g = (s * c).sum().backward(create_graph=True)[x]  # cos 2x
    np.testing.assert_allclose(g.numpy(), np.cos(2 * xn), rtol=1e-10)
    np.testing.assert_allclose(g.sum().backward()[x].numpy(), -2 * np.sin(2 * xn), rtol=1e-10)
    assert em.testing.gradcheck(lambda t: em.apply_op(SinCos(), t)[1] * 3.0, [em.randn(4, dtype="float64", device="cpu")])


def test_out_dtypes_and_non_differentiable(device):
    rng = np.random.default_rng(3)
    an, bn, cn = (rng.standard_normal((4, 6)) for _ in range(3))
    a, b = em.Var(an, dtype="float32", device=device), em.Var(bn, dtype="float32", device=device)
    c = em.tensor(cn, dtype="float32", device=device)
    m, idx = em.apply_op(MaxIdx(), a, b, c)
    s = f64(a.numpy()) + f64(b.numpy()) + f64(c.numpy())
    assert idx.dtype == em.int64 and idx._op is None
    np.testing.assert_array_equal(idx.numpy(), s.argmax(-1))
    np.testing.assert_allclose(f64(m.numpy()), s.max(-1), rtol=1e-5, atol=1e-5)
    gs = m.sum().backward()
    onehot = (s == s.max(-1, keepdims=True)).astype(np.float64)
    np.testing.assert_allclose(f64(gs[a].numpy()), onehot)
    np.testing.assert_allclose(f64(gs[b].numpy()), onehot)


def test_check_op_every_output_gradient_and_device(device):
    rep = em.testing.check_op(SinCos(), em.randn(3, 4, device=device))
    assert {"aliasing", "forward", "strided", "backward"} <= set(rep.passed)
    if em.metal_is_available():
        assert "devices" in rep.passed
    rep = em.testing.check_op(MaxIdx(), *(em.randn(2, 5, device=device) for _ in range(3)))
    assert "backward" in rep.passed


def test_check_op_finds_a_wrong_gradient_of_the_second_output():
    class Bad(SinCos):
        name = "sincos_bad"

        def bwd(self, inputs, outputs, grads):
            s, c = outputs
            return [grads[0] * c + grads[1] * s]  # sign wrong on the cos branch

    with pytest.raises(em.testing.CheckOpError) as ei:
        em.testing.check_op(Bad(), em.randn(3, 2, device="cpu"))
    assert "backward" in str(ei.value)


class Aliasing(em.CustomOp):
    name = "aliasing"
    mode = "outputs"

    def cpu_fwd(self, inputs):
        (s, l), = inputs
        st = em.CpuStorage.from_numpy(np.ascontiguousarray(s.as_numpy(l)))
        if self.mode == "outputs":
            return [(st, l.shape), (st, l.shape)]
        if self.mode == "input":
            return [(st, l.shape), (s, l.shape)]
        if self.mode == "pair":
            return (st, l.shape)
        if self.mode == "dtype":
            return [(st, l.shape), (em.CpuStorage.from_numpy(np.zeros(l.numel(), np.float64)), l.shape)]
        if self.mode == "count":
            return [(st, (l.numel() + 1,))]
        if self.mode == "notlist":
            return 5
        if self.mode == "ndtypes":
            return [(st, l.shape)]
        return [(st, l.shape)]


@pytest.mark.cpu_only  # the forward reads CpuStorage.as_numpy
@pytest.mark.parametrize("mode, cls", [
    ("outputs", em.EmberValueError), ("input", em.EmberValueError), ("pair", em.EmberTypeError),
    ("dtype", em.DTypeError), ("count", em.ShapeError), ("notlist", em.EmberTypeError),
])
def test_forward_checks_name_the_op(mode, cls):
    op = Aliasing()
    op.mode = mode
    expect_error(lambda: em.apply_op(op, em.randn(2, 3)), "aliasing", cls)


@pytest.mark.cpu_only  # the forward reads CpuStorage.as_numpy
def test_out_dtypes_count_and_bad_arguments():
    op = Aliasing()
    op.mode, op.out_dtypes = "ndtypes", (None, None)
    expect_error(lambda: em.apply_op(op, em.randn(3)), "aliasing", em.EmberValueError)
    expect_error(lambda: em.apply_op(SinCos()), "sincos", em.EmberValueError)
    expect_error(lambda: em.apply_op(SinCos(), np.ones(3)), "sincos", em.EmberTypeError)
    expect_error(lambda: em.apply_op(object(), em.randn(3)), "apply_op", em.EmberTypeError)
    expect_error(lambda: em.apply_op(MaxIdx(), em.randn(2, 2), em.randn(2, 2, dtype="float64"), em.randn(2, 2)),
                 "sum3_max", em.DTypeError)


def test_bwd_result_checked():
    class WrongCount(SinCos):
        name = "wrong_count"

        def bwd(self, inputs, outputs, grads):
            return [grads[0], grads[0]]

    x = em.Var(np.ones(3), device="cpu")
    s, _ = em.apply_op(WrongCount(), x)
    expect_error(lambda: s.sum().backward(), "wrong_count", em.EmberValueError)


def test_output_modified_in_place_raises(device):
    x = em.Var(np.ones(3), dtype="float32", device=device)
    s, c = em.apply_op(SinCos(), x)
    y = s * 2.0
    with em.no_grad():
        c[0] = 5.0
    expect_error(lambda: y.sum().backward(), "backward", em.InplaceModifiedError)


@pytest.mark.cpu_only  # the forward writes through CpuStorage.as_numpy
def test_mutates_bumps_versions_and_backward_needing_old_values_raises():
    class AccumulateAndScale(em.CustomOp):
        """acc += x (in place, mutates=(0,)); returns 2 * x."""

        name = "acc_scale"
        mutates = (0,)

        def cpu_fwd(self, inputs):
            (sa, la), (sx, lx) = inputs
            acc, x = sa.as_numpy(la), sx.as_numpy(lx)  # acc's view is writable: it is mutated
            acc += x
            return [(em.CpuStorage.from_numpy(np.ascontiguousarray(x * 2)), lx.shape)]

        def bwd(self, inputs, outputs, grads):
            return [None, grads[0] * 2.0]

    acc = em.zeros(4, dtype="float64")
    x = em.Var(np.arange(4.0))
    v0 = acc._storage.version
    y = em.apply_op(AccumulateAndScale(), acc, x)
    assert acc._storage.version > v0
    np.testing.assert_array_equal(acc.numpy(), np.arange(4.0))
    np.testing.assert_array_equal(y.sum().backward()[x].numpy(), np.full(4, 2.0))
    # an input that the graph saved, then mutated: backward through the old op raises
    h = x * 1.0
    z = h.exp()
    em.apply_op(AccumulateAndScale(), h, em.ones(4, dtype="float64"))
    expect_error(lambda: z.sum().backward(), "acc_scale", em.InplaceModifiedError)
    # a variable is not written in place under grad mode
    expect_error(lambda: em.apply_op(AccumulateAndScale(), x, x * 1.0), "acc_scale", em.UnsupportedOp)
    # mutating op in check_op: runs on copies, the written inputs lead the outputs
    rep = em.testing.check_op(AccumulateAndScale(), em.zeros(3, dtype="float64"), em.randn(3, dtype="float64"))
    assert "forward" in rep.passed
