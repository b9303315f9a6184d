"""The fused cross_entropy (class-id targets, one kernel each way per device) against torch on random shapes,
strides and dtypes, every reduction and option; gradients by finite differences; create_graph; errors."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from devcheck import gradcheck, has_f64, wide

import ember as em
from ember.kernel_result import dense
from ember.nn.losses import _class_targets, _CrossEntropy

from conftest import npdt, rand_np

OPTIONS = [{}, {"ignore": True}, {"weight": True}, {"label_smoothing": 0.25},
           {"ignore": True, "weight": True, "label_smoothing": 0.1}]


def _dtypes(device):
    return [em.float32, em.float16, em.bfloat16] + ([em.float64] if has_f64(device) else [])


def _case(rng, shape, dt, device, opts, strided):
    """(ember logits view, ember targets, ember weight or None, numpy logits in float64, numpy targets, w)."""
    C = shape[-1]
    if strided:  # logits as a transposed, offset slice of a bigger tensor: no dim is contiguous
        big = rand_np(rng, (C * 2 + 1,) + tuple(reversed(shape[:-1])), dt)
        xe = em.tensor(big, device=device)[1::2]
        xe = xe.permute(*reversed(range(xe.ndim)))
        xn = big[1::2].transpose(tuple(reversed(range(big.ndim))))
    else:
        xn = rand_np(rng, shape, dt)
        xe = em.tensor(xn, device=device)
    t = rng.integers(0, C, size=shape[:-1])
    if opts.get("ignore") and t.size:
        t.flat[:: 3] = -100
    w = rng.uniform(0.2, 2.0, size=C).astype(npdt(dt)) if opts.get("weight") else None
    we = None if w is None else em.tensor(w, device=device)
    return xe, em.tensor(t, device=device), we, xn.astype(np.float64), t, w


def _torch(xn, t, w, reduction, eps):
    C = xn.shape[-1]
    x = torch.tensor(xn.reshape(-1, C), requires_grad=True)
    loss = F.cross_entropy(x, torch.tensor(t.reshape(-1)), reduction=reduction, label_smoothing=eps,
                           weight=None if w is None else torch.tensor(w.astype(np.float64)))
    if reduction == "none":
        loss = loss.reshape(t.shape)
    return loss, x


@pytest.mark.parametrize("opts", OPTIONS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_matches_torch_values_and_gradients(device, opts, reduction):
    rng = np.random.default_rng(abs(hash((str(opts), reduction))) % 2**32)
    for dt in _dtypes(device):
        for shape, strided in [((6, 9), False), ((3, 4, 37), True), ((1, 300), False), ((130, 5), True),
                               ((2, 700), True)]:
            xe, te, we, xn, t, w = _case(rng, shape, dt, device, opts, strided)
            eps = opts.get("label_smoothing", 0.0)
            v = em.Var(xe)
            loss = em.nn.functional.cross_entropy(v, te, reduction=reduction, weight=we, label_smoothing=eps)
            assert loss.dtype is dt and loss.shape == (t.shape if reduction == "none" else ())
            tl, tx = _torch(xn, t, w, reduction, eps)
            gw = rng.standard_normal(t.shape) if reduction == "none" else np.array(1.5)
            g = (loss * em.tensor(gw.astype(npdt(dt)), device=device)).sum().backward()[v]
            (tl * torch.tensor(gw)).sum().backward()
            tol = {em.float64: 1e-10, em.float32: 1e-5, em.float16: 2e-3, em.bfloat16: 2e-2}[dt]
            np.testing.assert_allclose(loss.numpy().astype(np.float64), tl.detach().numpy(), rtol=tol * 10,
                                       atol=tol * 10, err_msg=f"{dt} {shape} loss")
            tg = tx.grad.numpy().reshape(shape)
            np.testing.assert_allclose(g.numpy().astype(np.float64), tg, rtol=tol * 10,
                                       atol=tol * (1 + np.abs(tg).max()) * 10, err_msg=f"{dt} {shape} grad")


@pytest.mark.parametrize("tdt", [em.int64, em.int32])
def test_target_dtypes_strides_and_leading_dims(device, tdt):
    rng = np.random.default_rng(3)
    x = rand_np(rng, (2, 5, 3, 11), em.float32)
    t = rng.integers(0, 11, size=(3, 5, 2))  # used transposed: targets of any strides
    te = em.tensor(t, dtype=tdt, device=device).permute(2, 1, 0)
    xe = em.tensor(x, device=device)
    loss = em.nn.functional.cross_entropy(xe, te, reduction="none", label_smoothing=0.1)
    want = F.cross_entropy(torch.tensor(x).reshape(-1, 11), torch.tensor(t.transpose(2, 1, 0)).reshape(-1),
                           reduction="none", label_smoothing=0.1).reshape(2, 5, 3)
    np.testing.assert_allclose(loss.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    # a single row: logits (C,), a 0-d target
    one = em.nn.functional.cross_entropy(xe[0, 0, 0], em.tensor(4, dtype=tdt, device=device))
    np.testing.assert_allclose(one.item(), F.cross_entropy(torch.tensor(x[0, 0, 0]), torch.tensor(4)).item(),
                               rtol=1e-5)


def test_fused_kernel_agrees_with_its_composite(device):
    """The kernel's per-target loss and backward against the FusedOp's composite form (its reference)."""
    rng = np.random.default_rng(4)
    dt = wide(device)
    xe, te, we, _, t, _ = _case(rng, (17, 13), dt, device, OPTIONS[-1], True)
    fixed, keep = _class_targets(xe, te, -100, "cross_entropy")
    op = _CrossEntropy(te, fixed, keep, we, -100, 0.1)
    v = em.Var(xe)
    y = v.apply_op1(op)
    ref = op.composite(v)
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-6, atol=1e-7)
    assert np.all(y.numpy()[t == -100] == 0)
    gw = em.tensor(rng.standard_normal(17).astype(npdt(dt)), device=device)
    g_fused = (y * gw).sum().backward()[v]
    g_ref = (ref * gw).sum().backward()[v]
    np.testing.assert_allclose(g_fused.numpy(), g_ref.numpy(), rtol=1e-6, atol=1e-7)
    assert np.all(g_fused.numpy()[t == -100] == 0)
    assert op.lse is not None  # the forward saved its statistics, so the kernel backward ran


@pytest.mark.parametrize("opts", OPTIONS)
def test_gradcheck(device, opts):
    rng = np.random.default_rng(5)
    xe, te, we, _, _, _ = _case(rng, (4, 6), wide(device), device, opts, False)
    eps = opts.get("label_smoothing", 0.0)
    for reduction in ("mean", "none"):
        consts = (te,) if we is None else (te, we)

        def fn(x, t, w=None, reduction=reduction):
            return em.nn.functional.cross_entropy(x, t, reduction=reduction, weight=w, label_smoothing=eps)
        assert gradcheck(fn, [xe], consts=consts)


def test_create_graph_second_order_matches_torch(device):
    """backward(create_graph=True) goes through the composite: the second derivative agrees with torch."""
    rng = np.random.default_rng(6)
    dt = wide(device)
    xe, te, we, xn, t, w = _case(rng, (5, 7), dt, device, OPTIONS[-1], False)
    v = em.Var(xe)
    loss = em.nn.functional.cross_entropy(v, te, weight=we, label_smoothing=0.1)
    gx = loss.backward(create_graph=True)[v]
    g2 = (gx * gx).sum().backward()[v]
    tl, tx = _torch(xn, t, w, "mean", 0.1)
    (tg,) = torch.autograd.grad(tl, tx, create_graph=True)
    (tg2,) = torch.autograd.grad((tg * tg).sum(), tx)
    rtol, atol = (1e-9, 1e-12) if dt is em.float64 else (1e-4, 1e-6)
    np.testing.assert_allclose(gx.numpy(), tg.detach().numpy().reshape(5, 7), rtol=rtol, atol=atol)
    np.testing.assert_allclose(g2.numpy(), tg2.numpy().reshape(5, 7), rtol=rtol, atol=atol)


def test_weight_with_gradient_keeps_its_gradient(device):
    """A weight being differentiated takes the composite (the kernel has no dw): gradients of logits and
    weight by finite differences (torch has no weight gradient to compare with)."""
    rng = np.random.default_rng(7)
    xe, te, we, _, _, _ = _case(rng, (6, 5), wide(device), device, {"weight": True, "ignore": True}, False)

    def fn(x, w, t):
        return em.nn.functional.cross_entropy(x, t, weight=w, label_smoothing=0.2)
    assert gradcheck(fn, [xe, we], consts=(te,))


@pytest.mark.parametrize("bad", [5, -1, -7])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_out_of_range_class_ids_raise(device, bad, reduction):
    x = em.tensor(np.zeros((3, 5), np.float32), device=device)
    t = em.tensor(np.array([0, bad, -100]), device=device)
    with pytest.raises(em.IndexOutOfRange, match=r"^\[cross_entropy\] target"):
        em.nn.functional.cross_entropy(x, t, reduction=reduction)
    np.testing.assert_array_equal(x.numpy(), 0)  # nothing written


def test_errors(device):
    ce = em.nn.functional.cross_entropy
    x = em.tensor(np.zeros((3, 5), np.float32), device=device)
    t = em.tensor(np.array([0, 1, 2]), device=device)
    with pytest.raises(em.ShapeError, match=r"^\[cross_entropy\]"):
        ce(x, em.tensor(np.array([0, 1]), device=device))
    with pytest.raises(em.ShapeError, match=r"^\[cross_entropy\]"):
        ce(x, t, weight=em.tensor(np.ones(4, np.float32), device=device))
    with pytest.raises(em.EmberValueError, match=r"^\[cross_entropy\]"):
        ce(x, t, reduction="avg")
    with pytest.raises(em.EmberValueError, match=r"^\[cross_entropy\]"):
        ce(x, t, label_smoothing=1.5)
    with pytest.raises(em.DTypeError, match=r"^\[cross_entropy\]"):
        ce(em.tensor(np.zeros((3, 5), np.int64), device=device), t)
    with pytest.raises(em.ShapeError, match=r"^\[cross_entropy\]"):
        ce(em.tensor(np.float32(1.0), device=device), t)


def test_kernel_entry_checks(device):
    """The seam (_C.fused) checks what the kernels rely on, with "[op]" messages."""
    fz = em._C.fused
    x = em.tensor(np.zeros((3, 5), np.float32), device=device)
    t = em.tensor(np.array([0, 1, 2]), device=device)
    args = (x._storage, x._layout)
    with pytest.raises(em.DTypeError, match=r"^\[cross_entropy\] targets must be int64 or int32"):
        tf = em.tensor(np.zeros(3, np.float32), device=device)
        fz.cross_entropy_fwd(*args, tf._storage, tf._layout, None, None, -100, 0.0)
    with pytest.raises(em.ShapeError, match=r"^\[cross_entropy\]"):
        t2 = em.tensor(np.zeros(2, np.int64), device=device)
        fz.cross_entropy_fwd(*args, t2._storage, t2._layout, None, None, -100, 0.0)
    with pytest.raises(em.EmberValueError, match=r"^\[cross_entropy\] label_smoothing"):
        fz.cross_entropy_fwd(*args, t._storage, t._layout, None, None, -100, float("nan"))
    with pytest.raises(em.DTypeError, match=r"^\[cross_entropy\] weight"):
        w = em.tensor(np.ones(5, np.float16), device=device)
        fz.cross_entropy_fwd(*args, t._storage, t._layout, w._storage, w._layout, -100, 0.0)
    _, lse = fz.cross_entropy_fwd(*args, t._storage, t._layout, None, None, -100, 0.0)
    g = em.tensor(np.ones(3, np.float32), device=device)
    with pytest.raises(em.EmberValueError, match=r"^\[cross_entropy_bwd\] lse"):
        bad_lse = em.tensor(np.ones(3, np.float16), device=device)
        fz.cross_entropy_bwd(*args, t._storage, t._layout, None, None, -100, 0.0, bad_lse._storage, g._storage,
                             g._layout)
    with pytest.raises(em.ShapeError, match=r"^\[cross_entropy_bwd\] grad shape"):
        g4 = em.tensor(np.ones(4, np.float32), device=device)
        fz.cross_entropy_bwd(*args, t._storage, t._layout, None, None, -100, 0.0, lse, g4._storage, g4._layout)


def test_kernel_with_an_out_of_range_id_reads_nothing_out_of_bounds(device):
    """Called directly (no check up front), the CPU kernel raises IndexOutOfRange; a device kernel
    (no host sync per element) gives NaN for that row and the right loss for the others."""
    x = em.tensor(np.zeros((3, 5), np.float32), device=device)
    t = em.tensor(np.array([0, 9, 1]), device=device)
    args = (x._storage, x._layout, t._storage, t._layout, None, None, -100, 0.0)
    if em.Device(device) == em.cpu:
        with pytest.raises(em.IndexOutOfRange, match=r"^\[cross_entropy\] target 9 out of range for 5 classes"):
            em._C.fused.cross_entropy_fwd(*args)
        return
    loss, _ = em._C.fused.cross_entropy_fwd(*args)
    got = dense(loss, (3,), em.float32, x.device).numpy()
    assert np.isnan(got[1]) and np.allclose(got[[0, 2]], np.log(5.0))
