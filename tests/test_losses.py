"""Losses against torch: nll_loss, cross_entropy (class weights, ignore_index, label smoothing, probability
targets), the binary cross-entropies (weight, pos_weight), l1 / huber / smooth_l1 and kl_div — values and
gradients for every reduction, strided inputs, every float dtype, finite differences, and bad input."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from devcheck import gradcheck
from nn_check import KINDS, compare, on

import ember as em

from conftest import FLOATS, TOL, WIDE, WIDE_NP, expect_error

RTOL = TOL[WIDE.name][0]  # WIDE results against float64 torch references

REDUCTIONS = ["mean", "sum", "none"]


def _ids(rng, shape, classes, ignore=None):
    t = rng.integers(0, classes, size=shape)
    if ignore is not None:
        t.flat[:: 3] = ignore
    return t


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 2])
def test_nll_loss_matches_torch(reduction, weighted, ignore, rng, device):
    t = _ids(rng, (4, 3), 5, -100 if ignore is None else ignore)
    w = rng.uniform(0.5, 2.0, size=5) if weighted else None
    ii = -100 if ignore is None else ignore
    kw = dict(ignore_index=ii, reduction=reduction)
    compare(lambda x: em.nn.nll_loss(x, on(device, t), None if w is None else on(device, w), **kw),
            lambda x: F.nll_loss(x.reshape(-1, 5), torch.tensor(t).reshape(-1), None if w is None else torch.tensor(w),
                                 **kw).reshape(t.shape if reduction == "none" else ()),
            [(4, 3, 5)], em.float64, "transposed", rng, device)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_class_ids_match_torch(reduction, smoothing, weighted, rng, device):
    t = _ids(rng, (6,), 4, ignore=1)  # some targets equal ignore_index
    w = rng.uniform(0.5, 2.0, size=4) if weighted else None
    kw = dict(reduction=reduction, ignore_index=1, label_smoothing=smoothing)
    compare(lambda x: em.nn.cross_entropy(x, on(device, t), weight=None if w is None else on(device, w),
                                          **kw),
            lambda x: F.cross_entropy(x, torch.tensor(t), weight=None if w is None else torch.tensor(w), **kw),
            [(6, 4)], em.float64, "offset", rng, device)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_probability_targets_match_torch(reduction, smoothing, weighted, rng, device):
    w = rng.uniform(0.5, 2.0, size=5) if weighted else None
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    # The targets are differentiable too (a distillation loss): both gradients are compared.
    compare(lambda x, p: em.nn.cross_entropy(x, p, weight=None if w is None else on(device, w), **kw),
            lambda x, p: F.cross_entropy(x, p, weight=None if w is None else torch.tensor(w), **kw),
            [(7, 5), (7, 5)], em.float64, "stepped", rng, device, lo=0.0, hi=1.0)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_class_losses_every_dtype(dt, rng, device):
    t = _ids(rng, (8,), 6)
    w = rng.uniform(0.5, 2.0, size=6).astype(np.float32)
    compare(lambda x: em.nn.cross_entropy(x, on(device, t), weight=on(device, w),
                                          label_smoothing=0.1),
            lambda x: F.cross_entropy(x, torch.tensor(t), weight=torch.tensor(w, dtype=torch.float64),
                                      label_smoothing=0.1),
            [(8, 6)], dt, "transposed", rng, device)
    compare(lambda x: em.nn.nll_loss(x, on(device, t)), lambda x: F.nll_loss(x, torch.tensor(t)), [(8, 6)], dt,
            "contiguous", rng, device)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_pointwise_losses_match_torch(reduction, kind, rng, device):
    shp = [(3, 4, 5), (3, 4, 5)]
    cases = [
        (lambda a, b: em.nn.l1_loss(a, b, reduction), lambda a, b: F.l1_loss(a, b, reduction=reduction)),
        (lambda a, b: em.nn.mse_loss(a, b, reduction), lambda a, b: F.mse_loss(a, b, reduction=reduction)),
        (lambda a, b: em.nn.huber_loss(a, b, reduction, 0.7),
         lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=0.7)),
        (lambda a, b: em.nn.smooth_l1_loss(a, b, reduction, 1.5),
         lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=1.5)),
        (lambda a, b: em.nn.smooth_l1_loss(a, b, reduction, 0.0),
         lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=0.0)),
        (lambda a, b: em.nn.binary_cross_entropy_with_logits(a, b, reduction=reduction),
         lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction=reduction)),
    ]
    for ef, tf in cases:
        compare(ef, tf, shp, em.float64, kind, rng, device)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropies_with_weights_match_torch(reduction, rng, device):
    w = rng.uniform(0.5, 2.0, size=(1, 5))
    pw = rng.uniform(0.5, 3.0, size=5)
    compare(lambda p, t: em.nn.binary_cross_entropy(p, t, on(device, w), reduction),
            lambda p, t: F.binary_cross_entropy(p, t, torch.tensor(w), reduction=reduction),
            [(4, 5), (4, 5)], em.float64, "transposed", rng, device, lo=0.02, hi=0.98)
    compare(lambda x, t: em.nn.binary_cross_entropy_with_logits(x, t, on(device, w), reduction,
                                                                on(device, pw)),
            lambda x, t: F.binary_cross_entropy_with_logits(x, t, torch.tensor(w), reduction=reduction,
                                                            pos_weight=torch.tensor(pw)),
            [(4, 5), (4, 5)], em.float64, "offset", rng, device)


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides:UserWarning")  # torch's, about its own mean
@pytest.mark.parametrize("reduction", ["mean", "batchmean", "sum", "none"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_matches_torch(reduction, log_target, rng, device):
    def em_fn(x, t):
        return em.nn.kl_div(x, t if log_target else t, reduction, log_target)

    lo, hi = (-3.0, 0.0) if log_target else (0.0, 1.0)
    compare(em_fn, lambda x, t: F.kl_div(x, t, reduction=reduction, log_target=log_target), [(4, 6), (4, 6)],
            em.float64, "stepped", rng, device, lo=lo, hi=hi)


def test_kl_div_zero_targets_contribute_nothing():
    x = em.Var(em.tensor(np.log(np.array([[0.2, 0.3, 0.5]])).astype(WIDE_NP)))
    t = em.Var(em.tensor(np.array([[0.0, 0.4, 0.6]], WIDE_NP)))
    loss = em.nn.kl_div(x, t, "sum")
    g = loss.backward()
    tx = torch.tensor(x.numpy().astype(np.float64), requires_grad=True)
    tt = torch.tensor(t.numpy().astype(np.float64), requires_grad=True)
    ref = F.kl_div(tx, tt, reduction="sum")
    ref.backward()
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=RTOL)
    np.testing.assert_allclose(g[x].numpy(), tx.grad.numpy(), rtol=RTOL)
    assert np.isfinite(g[t].numpy()).all()


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_pointwise_losses_every_dtype(dt, rng, device):
    compare(lambda a, b: em.nn.huber_loss(a, b), lambda a, b: F.huber_loss(a, b), [(6, 7), (6, 7)], dt,
            "transposed", rng, device)
    compare(lambda a, b: em.nn.binary_cross_entropy_with_logits(a, b),
            lambda a, b: F.binary_cross_entropy_with_logits(a, b), [(6, 7), (6, 7)], dt, "offset", rng, device,
            lo=0.0, hi=1.0)
    compare(lambda a, b: em.nn.binary_cross_entropy(a, b), lambda a, b: F.binary_cross_entropy(a, b),
            [(6, 7), (6, 7)], dt, "contiguous", rng, device, lo=0.05, hi=0.95)


def test_logits_at_zero_and_far_out_are_exact_and_finite():
    # A zero-initialised head gives logits of exactly 0: the gradient there is sigmoid(0) - t.
    x = em.Var(em.tensor(np.array([0.0, 0.0, 80.0, -80.0, 1000.0, -1000.0], WIDE_NP)))
    t = em.tensor(np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0], WIDE_NP))
    loss = em.nn.binary_cross_entropy_with_logits(x, t, reduction="sum")
    tx = torch.tensor(x.numpy().astype(np.float64), requires_grad=True)
    ref = F.binary_cross_entropy_with_logits(tx, torch.tensor(t.numpy().astype(np.float64)), reduction="sum")
    ref.backward()
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=RTOL)
    np.testing.assert_allclose(loss.backward()[x].numpy(), tx.grad.numpy(), rtol=RTOL, atol=1e-30)


def test_loss_gradcheck(rng):
    x = em.tensor(rng.standard_normal((4, 5)).astype(WIDE_NP))
    p = em.tensor(rng.uniform(0.1, 0.9, size=(4, 5)).astype(WIDE_NP))
    t = em.tensor(rng.integers(0, 5, size=4))
    w = em.tensor(rng.uniform(0.5, 2.0, size=5).astype(WIDE_NP))
    fns = [  # the targets and weights are inputs too: devcheck runs fn on the CPU and on the device
        (lambda a, tt, ww: em.nn.cross_entropy(a, tt, weight=ww, label_smoothing=0.2), [x, t, w]),
        (lambda a, b: em.nn.cross_entropy(a, b, label_smoothing=0.1), [x, p]),
        (lambda a, tt, ww: em.nn.nll_loss(a, tt, ww), [x, t, w]),
        (lambda a, b: em.nn.binary_cross_entropy(a, b), [p, p.affine(0.5, 0.2)]),
        (lambda a, b, ww: em.nn.binary_cross_entropy_with_logits(a, b, pos_weight=ww), [x, p, w]),
        (lambda a, b: em.nn.huber_loss(a, b, delta=0.5), [x, x.affine(0.3, 0.1)]),
        (lambda a, b: em.nn.smooth_l1_loss(a, b, beta=0.5), [x, x.affine(0.3, 0.1)]),
        (lambda a, b: em.nn.l1_loss(a, b), [x, x.affine(0.3, 0.1)]),
        (lambda a, b: em.nn.kl_div(a, b, "batchmean"), [x.log_softmax(-1), p]),
    ]
    for fn, inputs in fns:
        assert gradcheck(fn, inputs)


def test_loss_errors():
    x, t = em.randn(3, 4), em.tensor([0, 1, 2])
    expect_error(lambda: em.nn.nll_loss(x, t, reduction="avg"), "nll_loss", em.EmberValueError)
    expect_error(lambda: em.nn.nll_loss(x, em.tensor([0, 1])), "nll_loss", em.ShapeError)
    expect_error(lambda: em.nn.nll_loss(x, em.tensor([0, 1, 4])), "nll_loss", em.IndexOutOfRange)
    expect_error(lambda: em.nn.nll_loss(x, t, weight=em.ones(3)), "nll_loss", em.ShapeError)
    expect_error(lambda: em.nn.nll_loss(em.ones(3, 4, dtype="int64"), t), "nll_loss", em.DTypeError)
    expect_error(lambda: em.nn.cross_entropy(x, t, label_smoothing=1.5), "cross_entropy", em.EmberValueError)
    expect_error(lambda: em.nn.cross_entropy(x, t, weight=em.ones(5)), "cross_entropy", em.ShapeError)
    expect_error(lambda: em.nn.cross_entropy(x, em.ones(3, 5)), "cross_entropy", em.DTypeError)
    expect_error(lambda: em.nn.cross_entropy(x, t, weight=em.ones(4, dtype="int64")), "cross_entropy", em.DTypeError)
    expect_error(lambda: em.nn.l1_loss(x, em.ones(4, 3)), "l1_loss", em.ShapeError)
    expect_error(lambda: em.nn.l1_loss(x, x, "avg"), "l1_loss", em.EmberValueError)
    expect_error(lambda: em.nn.huber_loss(x, x, delta=0.0), "huber_loss", em.EmberValueError)
    expect_error(lambda: em.nn.smooth_l1_loss(x, x, beta=-1.0), "smooth_l1_loss", em.EmberValueError)
    expect_error(lambda: em.nn.binary_cross_entropy(x, x), "binary_cross_entropy", em.EmberValueError)
    expect_error(lambda: em.nn.binary_cross_entropy(em.rand(3), em.ones(3, dtype="int64")), "binary_cross_entropy",
                 em.DTypeError)
    expect_error(lambda: em.nn.binary_cross_entropy_with_logits(x, x, reduction="x"),
                 "binary_cross_entropy_with_logits", em.EmberValueError)
    expect_error(lambda: em.nn.kl_div(x, x, "avg"), "kl_div", em.EmberValueError)
    expect_error(lambda: em.nn.kl_div(x, em.ones(2)), "kl_div", em.ShapeError)
