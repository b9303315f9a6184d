"""layer_norm's backward summing the residual's gradient in its own pass (backprop._fold): the same bits as the
separate add, torch's gradients, the fallbacks, and the kernel entry's `add` argument with its errors."""
import numpy as np
import pytest
import torch
from devcheck import gradcheck, wide

import ember as em
import ember.backprop as bp
from ember.nn import ops
from ember.tensor_type import _wrap

from conftest import FLOATS, TEST_DEVICE

DTYPES = [d for d in (em.float64, em.float32, em.float16, em.bfloat16) if d in FLOATS]
TDT = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}
TOL = {"float64": (1e-10, 1e-12), "float32": (3e-5, 3e-6), "float16": (3e-2, 3e-3), "bfloat16": (8e-2, 2e-2)}


def _prenorm(x, params, ks):
    """Two pre-norm residual steps: x + layer_norm(x) * k, the residual's gradient reaching x first."""
    for (w, b), k in zip(params, ks):
        x = x + ops.layer_norm(x, w, b, 1e-5) * k
    return x


def _data(dt, shape, seed):
    rng = np.random.default_rng(seed)
    n = shape[-1]
    x = rng.standard_normal(shape) + 0.5
    params = [(rng.standard_normal(n), rng.standard_normal(n)) for _ in range(2)]
    ks = [rng.standard_normal(shape) for _ in range(2)]
    g = rng.standard_normal(shape)
    return x, params, ks, g


def _ember_grads(dt, x, params, ks, g, fold=True, create_graph=False):
    ex = em.Var(em.tensor(x, dtype=dt))
    eps_ = [(em.Var(em.tensor(w, dtype=dt)), em.Var(em.tensor(b, dtype=dt))) for w, b in params]
    eks = [em.tensor(k, dtype=dt) for k in ks]
    out = _prenorm(ex, eps_, eks)
    calls = []
    orig = bp._fold

    def counted(*a):
        r = orig(*a) if fold else None
        calls.append(r is not None)
        return r

    bp._fold = counted
    try:
        gs = em.backprop.backward(out, create_graph=create_graph, seed=em.tensor(g, dtype=dt))
    finally:
        bp._fold = orig
    ins = [ex] + [p for wb in eps_ for p in wb]
    return [gs[t].numpy() for t in ins], sum(calls)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(4, 7), (2, 3, 1000), (33, 256)])
def test_folded_gradients_equal_the_separate_add_bit_for_bit_and_torch(dt, shape):
    x, params, ks, g = _data(dt, shape, seed=shape[-1])
    folded, n_folded = _ember_grads(dt, x, params, ks, g)
    plain, n_plain = _ember_grads(dt, x, params, ks, g, fold=False)
    if TEST_DEVICE.type == "cpu":
        assert n_folded == 2 and n_plain == 0  # both norms summed the residual's gradient in their pass
    for a, b in zip(folded, plain):
        np.testing.assert_array_equal(a, b)
    tx = torch.tensor(x, dtype=TDT[dt.name]).double().requires_grad_()
    tps = [(torch.tensor(w, dtype=TDT[dt.name]).double().requires_grad_(),
            torch.tensor(b, dtype=TDT[dt.name]).double().requires_grad_()) for w, b in params]
    y = tx
    for (w, b), k in zip(tps, ks):
        y = y + torch.nn.functional.layer_norm(y, (shape[-1],), w, b, 1e-5) * torch.tensor(k, dtype=TDT[dt.name]).double()
    want = torch.autograd.grad(y, [tx] + [p for wb in tps for p in wb], torch.tensor(g, dtype=TDT[dt.name]).double())
    rtol, atol = TOL[dt.name]
    for a, b in zip(folded, want):
        b = b.numpy()
        np.testing.assert_allclose(a.astype(np.float64), b, rtol=rtol, atol=8 * (atol + rtol * np.abs(b).max()))


def test_folded_gradient_matches_finite_differences():
    rng = np.random.default_rng(5)
    dt = wide()  # float64 where the device holds it (else devcheck compares with the CPU's float64)
    w, b = em.tensor(rng.standard_normal(6), dtype=dt), em.tensor(rng.standard_normal(6), dtype=dt)
    k = em.tensor(rng.standard_normal((3, 6)), dtype=dt)

    def f(x, w, b, k):
        return x + ops.layer_norm(x, w, b, 1e-5) * k

    gradcheck(f, [em.tensor(rng.standard_normal((3, 6)), dtype=dt)], consts=(w, b, k))


def test_second_order_and_the_composite_backward_take_the_plain_add():
    x, params, ks, g = _data(em.float32, (5, 9), seed=3)
    plain, _ = _ember_grads(em.float32, x, params, ks, g, fold=False)
    graph, n = _ember_grads(em.float32, x, params, ks, g, create_graph=True)
    assert n == 0  # create_graph: the composite backward, no fold
    for a, b in zip(graph, plain):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # statistics gone (the op falls back to its composite backward): the fold is offered, not taken, and undone
    ex = em.Var(em.tensor(x, dtype=em.float32))
    w, b = (em.Var(em.tensor(a, dtype=em.float32)) for a in params[0])
    h = ops.layer_norm(ex, w, b, 1e-5)
    h._op.saved.rstd = None
    out = ex + h * em.tensor(ks[0], dtype=em.float32)
    gs = em.backprop.backward(out, seed=em.tensor(g, dtype=em.float32))
    assert h._op.saved.dx_add is None
    ref = em.Var(em.tensor(x, dtype=em.float32))
    want = em.backprop.backward(ref + ops.layer_norm(ref, w, b, 1e-5) * em.tensor(ks[0], dtype=em.float32),
                                seed=em.tensor(g, dtype=em.float32))
    np.testing.assert_allclose(gs[ex].numpy(), want[ref].numpy(), rtol=1e-5, atol=1e-5)


def test_a_strided_residual_gradient_is_added_separately():
    """x's other gradient arrives transposed (through x.t()): it is not folded, the values are torch's."""
    rng = np.random.default_rng(8)
    x = em.Var(em.tensor(rng.standard_normal((6, 4)), dtype=em.float32))
    c, k = rng.standard_normal((4, 6)), rng.standard_normal((6, 4))
    out = x.t() * em.tensor(c, dtype=em.float32) + (ops.layer_norm(x, None, None, 1e-5) * em.tensor(k, dtype=em.float32)).t()
    offered = []
    orig = bp._fold

    def seen(node, get, *a):
        acc = get(id(node.inputs[0]))
        offered.append(acc is not None and not acc[1]._layout.is_contiguous())
        return orig(node, get, *a)

    bp._fold = seen
    try:
        gs = out.sum().backward()
    finally:
        bp._fold = orig
    assert offered == [True]  # the strided gradient was there first, and was added the usual way
    tx = torch.tensor(x.numpy(), requires_grad=True)
    ty = (torch.nn.functional.layer_norm(tx, (4,), eps=1e-5) * torch.tensor(k)).t() + tx.t() * torch.tensor(c)
    (want,) = torch.autograd.grad(ty.sum(), [tx])
    np.testing.assert_allclose(gs[x].numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def _kernel_parts(dt, shape, seed, device=None):
    rng = np.random.default_rng(seed)
    x = em.tensor(rng.standard_normal(shape) + 1.0, dtype=dt, device=device)
    w = em.tensor(rng.standard_normal(shape[-1]), dtype=dt, device=device)
    g = em.tensor(rng.standard_normal(shape), dtype=dt, device=device)
    _, mean, rstd = em._C.fused.layer_norm_fwd(x._storage, x._layout, w._storage, w._layout, None, None, 1e-5)
    return x, w, g, mean, rstd


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("strided", [False, True])
def test_kernel_add_equals_dx_plus_add(dt, strided, device):
    shape = (37, 300)
    x, w, g, mean, rstd = _kernel_parts(dt, shape, 1, device)
    a = em.tensor(np.random.default_rng(2).standard_normal(shape[::-1] if strided else shape), dtype=dt, device=device)
    a = a.t() if strided else a
    f = em._C.fused.layer_norm_bwd
    dx, dw, db = f(x._storage, x._layout, w._storage, w._layout, mean, rstd, g._storage, g._layout, True)
    s, sw, sb = f(x._storage, x._layout, w._storage, w._layout, mean, rstd, g._storage, g._layout, True,
                  a._storage, a._layout)
    want = _wrap(dx, em._C.Layout.contiguous(list(shape)), dt, x.device) + a
    got = _wrap(s, em._C.Layout.contiguous(list(shape)), dt, x.device)
    np.testing.assert_array_equal(got.numpy().astype(np.float64), want.numpy().astype(np.float64))
    for p, q in ((sw, dw), (sb, db)):  # the parameters' gradients do not change
        lp = em._C.Layout.contiguous([shape[-1]])
        np.testing.assert_array_equal(_wrap(p, lp, dt, x.device).numpy(), _wrap(q, lp, dt, x.device).numpy())


def test_kernel_add_errors(device):
    dt = em.float32
    x, w, g, mean, rstd = _kernel_parts(dt, (4, 8), 3, device)
    f = em._C.fused.layer_norm_bwd
    args = (x._storage, x._layout, w._storage, w._layout, mean, rstd, g._storage, g._layout, True)
    with pytest.raises(em.EmberError, match=r"^\[layer_norm_bwd\] add given without a layout"):
        f(*args, g._storage, None)
    a = em.zeros((4, 9), dtype=dt, device=device)
    with pytest.raises(em.ShapeError, match=r"^\[layer_norm_bwd\] add has shape \(4, 9\), expected the input's \(4, 8\)"):
        f(*args, a._storage, a._layout)
    other = [d for d in FLOATS if d is not dt][0]
    b = em.zeros((4, 8), dtype=other, device=device)
    with pytest.raises(em.DTypeError, match=r"^\[layer_norm_bwd\] add"):
        f(*args, b._storage, b._layout)
    if device.type != "cpu":
        c = em.zeros((4, 8), dtype=dt, device="cpu")
        with pytest.raises(em.DeviceError, match=r"^\[layer_norm_bwd\] device mismatch"):
            f(*args, c._storage, c._layout)
