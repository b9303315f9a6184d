"""layer_norm's and rms_norm's backward summing the residual's gradient in their own pass (backprop._fold): the
same bits as the separate add, torch's gradients, the fallbacks, and the kernel entries' `add` argument with
its errors."""
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


NORMS = ["layer_norm", "rms_norm"]


def _norm(kind, x, params):
    """ember's norm of x with params (w, b) for layer_norm, (w,) for rms_norm."""
    if kind == "layer_norm":
        return ops.layer_norm(x, *(tuple(params) + (None, None))[:2], 1e-5)
    return ops.rms_norm(x, params[0] if params else None, 1e-5)


def _torch_norm(kind, x, params):
    n = (x.shape[-1],)
    if kind == "layer_norm":
        return torch.nn.functional.layer_norm(x, n, *(tuple(params) + (None, None))[:2], 1e-5)
    return torch.nn.functional.rms_norm(x, n, params[0] if params else None, 1e-5)


def _prenorm(kind, x, params, ks):
    """Two pre-norm residual steps: x + norm(x) * k, the residual's gradient reaching x first."""
    for ps, k in zip(params, ks):
        x = x + _norm(kind, x, ps) * k
    return x


def _data(kind, shape, seed):
    rng = np.random.default_rng(seed)
    n = shape[-1]
    x = rng.standard_normal(shape) + 0.5
    params = [(rng.standard_normal(n), rng.standard_normal(n))[:2 if kind == "layer_norm" else 1] for _ in range(2)]
    ks = [rng.standard_normal(shape) for _ in range(2)]
    g = rng.standard_normal(shape)
    return x, params, ks, g


def _ember_grads(kind, dt, x, params, ks, g, fold=True, create_graph=False):
    ex = em.Var(em.tensor(x, dtype=dt))
    eps_ = [tuple(em.Var(em.tensor(p, dtype=dt)) for p in ps) for ps in params]
    eks = [em.tensor(k, dtype=dt) for k in ks]
    out = _prenorm(kind, ex, eps_, eks)
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


@pytest.mark.parametrize("kind", NORMS)
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(4, 7), (2, 3, 1000), (33, 256)])
def test_folded_gradients_equal_the_separate_add_bit_for_bit_and_torch(kind, dt, shape):
    x, params, ks, g = _data(kind, shape, seed=shape[-1])
    folded, n_folded = _ember_grads(kind, dt, x, params, ks, g)
    plain, n_plain = _ember_grads(kind, dt, x, params, ks, g, fold=False)
    if TEST_DEVICE.type == "cpu":
        assert n_folded == 2 and n_plain == 0  # both norms summed the residual's gradient in their pass
    for a, b in zip(folded, plain):
        np.testing.assert_array_equal(a, b)
    tx = torch.tensor(x, dtype=TDT[dt.name]).double().requires_grad_()
    tps = [tuple(torch.tensor(p, dtype=TDT[dt.name]).double().requires_grad_() for p in ps) for ps in params]
    y = tx
    for ps, k in zip(tps, ks):
        y = y + _torch_norm(kind, y, ps) * torch.tensor(k, dtype=TDT[dt.name]).double()
    want = torch.autograd.grad(y, [tx] + [p for wb in tps for p in wb], torch.tensor(g, dtype=TDT[dt.name]).double())
    rtol, atol = TOL[dt.name]
    for a, b in zip(folded, want):
        b = b.numpy()
        np.testing.assert_allclose(a.astype(np.float64), b, rtol=rtol, atol=8 * (atol + rtol * np.abs(b).max()))


@pytest.mark.parametrize("kind", NORMS)
def test_folded_gradient_matches_finite_differences(kind):
    rng = np.random.default_rng(5)
    dt = wide()  # float64 where the device holds it (else devcheck compares with the CPU's float64)
    w, b = em.tensor(rng.standard_normal(6), dtype=dt), em.tensor(rng.standard_normal(6), dtype=dt)
    k = em.tensor(rng.standard_normal((3, 6)), dtype=dt)

    def f(x, w, b, k):
        return x + _norm(kind, x, (w, b) if kind == "layer_norm" else (w,)) * k

    gradcheck(f, [em.tensor(rng.standard_normal((3, 6)), dtype=dt)], consts=(w, b, k))


@pytest.mark.parametrize("kind", NORMS)
def test_second_order_and_the_composite_backward_take_the_plain_add(kind):
    x, params, ks, g = _data(kind, (5, 9), seed=3)
    plain, _ = _ember_grads(kind, em.float32, x, params, ks, g, fold=False)
    graph, n = _ember_grads(kind, em.float32, x, params, ks, g, create_graph=True)
    assert n == 0  # create_graph: the composite backward, no fold
    for a, b in zip(graph, plain):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # statistics gone (the op falls back to its composite backward): the fold is offered, not taken, and undone
    ex = em.Var(em.tensor(x, dtype=em.float32))
    ps = tuple(em.Var(em.tensor(a, dtype=em.float32)) for a in params[0])
    h = _norm(kind, ex, ps)
    h._op.saved.rstd = None
    out = ex + h * em.tensor(ks[0], dtype=em.float32)
    gs = em.backprop.backward(out, seed=em.tensor(g, dtype=em.float32))
    assert h._op.saved.dx_add is None
    ref = em.Var(em.tensor(x, dtype=em.float32))
    want = em.backprop.backward(ref + _norm(kind, ref, ps) * em.tensor(ks[0], dtype=em.float32),
                                seed=em.tensor(g, dtype=em.float32))
    np.testing.assert_allclose(gs[ex].numpy(), want[ref].numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", NORMS)
def test_a_strided_residual_gradient_is_added_separately(kind):
    """x's other gradient arrives transposed (through x.t()): it is not folded, the values are torch's."""
    rng = np.random.default_rng(8)
    x = em.Var(em.tensor(rng.standard_normal((6, 4)), dtype=em.float32))
    c, k = rng.standard_normal((4, 6)), rng.standard_normal((6, 4))
    out = x.t() * em.tensor(c, dtype=em.float32) + (_norm(kind, x, ()) * em.tensor(k, dtype=em.float32)).t()
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
    ty = (_torch_norm(kind, tx, ()) * torch.tensor(k)).t() + tx.t() * torch.tensor(c)
    (want,) = torch.autograd.grad(ty.sum(), [tx])
    np.testing.assert_allclose(gs[x].numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def _kernel_parts(kind, dt, shape, seed, device=None):
    """x, w, g and the forward's statistics, and the backward entry as f(want_params, add, ladd) -> (dx, dw, db
    or None)."""
    rng = np.random.default_rng(seed)
    x = em.tensor(rng.standard_normal(shape) + 1.0, dtype=dt, device=device)
    w = em.tensor(rng.standard_normal(shape[-1]), dtype=dt, device=device)
    g = em.tensor(rng.standard_normal(shape), dtype=dt, device=device)
    F = em._C.fused
    if kind == "layer_norm":
        _, mean, rstd = F.layer_norm_fwd(x._storage, x._layout, w._storage, w._layout, None, None, 1e-5)

        def f(*add):
            return F.layer_norm_bwd(x._storage, x._layout, w._storage, w._layout, mean, rstd, g._storage, g._layout,
                                    True, *add)
    else:
        _, rstd = F.rms_norm_fwd(x._storage, x._layout, w._storage, w._layout, 1e-5)

        def f(*add):
            return (*F.rms_norm_bwd(x._storage, x._layout, w._storage, w._layout, rstd, g._storage, g._layout, True,
                                    *add), None)
    return x, f


@pytest.mark.parametrize("kind", NORMS)
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("strided", [False, True])
def test_kernel_add_equals_dx_plus_add(kind, dt, strided, device):
    shape = (37, 300)
    x, f = _kernel_parts(kind, dt, shape, 1, device)
    a = em.tensor(np.random.default_rng(2).standard_normal(shape[::-1] if strided else shape), dtype=dt, device=device)
    a = a.t() if strided else a
    dx, dw, db = f()
    s, sw, sb = f(a._storage, a._layout)
    want = _wrap(dx, em._C.Layout.contiguous(list(shape)), dt, x.device) + a
    got = _wrap(s, em._C.Layout.contiguous(list(shape)), dt, x.device)
    np.testing.assert_array_equal(got.numpy().astype(np.float64), want.numpy().astype(np.float64))
    for p, q in ((sw, dw), (sb, db)):  # the parameters' gradients do not change
        if q is None:
            assert p is None
            continue
        lp = em._C.Layout.contiguous([shape[-1]])
        np.testing.assert_array_equal(_wrap(p, lp, dt, x.device).numpy(), _wrap(q, lp, dt, x.device).numpy())


@pytest.mark.parametrize("kind", NORMS)
def test_kernel_add_errors(kind, device):
    dt = em.float32
    x, f = _kernel_parts(kind, dt, (4, 8), 3, device)
    op = kind + "_bwd"
    with pytest.raises(em.EmberError, match=rf"^\[{op}\] add given without a layout"):
        f(x._storage, None)
    a = em.zeros((4, 9), dtype=dt, device=device)
    with pytest.raises(em.ShapeError, match=rf"^\[{op}\] add has shape \(4, 9\), expected the input's \(4, 8\)"):
        f(a._storage, a._layout)
    other = [d for d in FLOATS if d is not dt][0]
    b = em.zeros((4, 8), dtype=other, device=device)
    with pytest.raises(em.DTypeError, match=rf"^\[{op}\] add"):
        f(b._storage, b._layout)
    if device.type != "cpu":
        c = em.zeros((4, 8), dtype=dt, device="cpu")
        with pytest.raises(em.DeviceError, match=rf"^\[{op}\] device mismatch"):
            f(c._storage, c._layout)
