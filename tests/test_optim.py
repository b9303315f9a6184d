"""Tests for em.optim: SGD and AdamW match torch.optim over 10 steps (to 1e-6)."""
import numpy as np
import pytest
import torch

import ember as em

from conftest import WIDE_NP


class _Store:
    """A minimal GradStore stand-in: step() only needs get(var)."""

    def __init__(self, pairs):
        self._g = {id(p): g for p, g in pairs}

    def get(self, t):
        return self._g.get(id(t))


def _grad_np(p, target):
    # A smooth, non-quadratic gradient so every step's update differs.
    return 2.0 * (p - target) + np.sin(3.0 * p)


def _run_pair(make_em, make_torch, steps=10, shapes=((4, 3), (5,)), dtype=np.float32):
    rng = np.random.default_rng(0)
    inits = [rng.standard_normal(s).astype(dtype) for s in shapes]
    targets = [rng.standard_normal(s).astype(dtype) for s in shapes]
    ev = [em.Var(a) for a in inits]
    tv = [torch.tensor(a, requires_grad=True) for a in inits]
    eo, to = make_em(ev), make_torch(tv)
    for _ in range(steps):
        eo.step(_Store([(v, em.tensor(_grad_np(v.numpy(), t))) for v, t in zip(ev, targets)]))
        for v, t in zip(tv, targets):
            v.grad = torch.from_numpy(_grad_np(v.detach().numpy(), t))
        to.step()
    for e, t in zip(ev, tv):
        np.testing.assert_allclose(e.numpy(), t.detach().numpy(), rtol=1e-6, atol=1e-6)
    return ev, tv


@pytest.mark.parametrize("kw", [
    {"lr": 0.1},
    {"lr": 0.05, "momentum": 0.9},
    {"lr": 0.05, "momentum": 0.9, "dampening": 0.3, "weight_decay": 0.01},
    {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.1},
], ids=["plain", "momentum", "dampening_wd", "nesterov"])
def test_sgd_matches_torch(kw):
    _run_pair(lambda p: em.optim.SGD(p, **kw), lambda p: torch.optim.SGD(p, **kw))


@pytest.mark.parametrize("kw", [
    {},
    {"lr": 0.01, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1},
    {"lr": 0.02, "weight_decay": 0.0},
], ids=["defaults", "custom", "no_decay"])
def test_adamw_matches_torch(kw):
    _run_pair(lambda p: em.optim.AdamW(p, **kw), lambda p: torch.optim.AdamW(p, **kw))


def test_adamw_float64_and_defaults():
    opt = em.optim.AdamW([em.Var([1.0])])
    assert (opt.lr, opt.betas, opt.eps, opt.weight_decay) == (1e-3, (0.9, 0.999), 1e-8, 1e-2)
    _run_pair(lambda p: em.optim.AdamW(p, lr=0.05), lambda p: torch.optim.AdamW(p, lr=0.05), dtype=WIDE_NP)


@pytest.mark.parametrize("which", ["SGD", "AdamW"])
def test_param_groups_match_torch(which):
    def groups(p):
        return [{"params": [p[0]], "lr": 0.02, "weight_decay": 0.0}, {"params": [p[1]]}]

    kw = {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.1} if which == "SGD" else {"lr": 0.03, "weight_decay": 0.2}
    _run_pair(lambda p: getattr(em.optim, which)(groups(p), **kw),
              lambda p: getattr(torch.optim, which)(groups(p), **kw))


def test_lr_setter_updates_every_group():
    a, b = em.Var([1.0]), em.Var([1.0])
    opt = em.optim.AdamW([{"params": [a]}, {"params": [b], "lr": 0.5}])
    assert opt.lr == 1e-3 and opt.param_groups[1]["lr"] == 0.5 and opt.params == [a, b]
    opt.lr = 0.1
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.1]
    with pytest.raises(em.EmberError, match=r"^\[AdamW\] unknown options \['momentum'\]"):
        em.optim.AdamW([{"params": [a], "momentum": 0.9}])
    with pytest.raises(em.EmberError, match=r"^\[SGD\] a parameter appears in more than one group"):
        em.optim.SGD([{"params": [a]}, {"params": [a]}], lr=0.1)


def test_state_dict_resumes_exactly():
    """5 steps, save, a fresh optimizer loads the state, 5 more steps == 10 uninterrupted steps."""
    rng = np.random.default_rng(3)
    init, target = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)

    def steps(opt, v, n):
        for _ in range(n):
            opt.step(_Store([(v, em.tensor(_grad_np(v.numpy(), target)))]))

    a = em.Var(init)
    steps(em.optim.AdamW([a], lr=0.05), a, 10)
    b = em.Var(init)
    first = em.optim.AdamW([b], lr=0.05)
    steps(first, b, 5)
    sd = first.state_dict()
    assert sd["param_groups"][0]["params"] == [0] and sd["state"][0]["step"] == 5
    steps(first, b, 1)  # later steps must not leak into the saved state
    assert sd["state"][0]["step"] == 5
    c2 = em.Var(init)
    o2 = em.optim.AdamW([c2], lr=0.05)
    steps(o2, c2, 5)
    fresh = em.optim.AdamW([c2], lr=1.0)
    fresh.load_state_dict(o2.state_dict())
    assert fresh.lr == 0.05
    steps(fresh, c2, 5)
    np.testing.assert_array_equal(c2.numpy(), a.numpy())
    with pytest.raises(em.EmberError, match=r"^\[AdamW\] load_state_dict"):
        em.optim.AdamW([em.Var([1.0]), em.Var([2.0])]).load_state_dict(sd)


def test_updates_in_place_and_missing_grads_skip():
    a, b = em.Var(np.ones((2, 2), np.float32)), em.Var(np.ones(3, np.float32))
    view = a[0]  # a view taken before the step must see the update: the storage is written in place
    storage = a.storage
    opt = em.optim.SGD([a, b], lr=0.5)
    opt.step(_Store([(a, em.ones(2, 2))]))
    assert a.storage is storage
    np.testing.assert_array_equal(view.numpy(), [0.5, 0.5])
    np.testing.assert_array_equal(b.numpy(), [1, 1, 1])  # no gradient: untouched


def test_named_parameters_accepted_and_errors():
    lin = em.nn.Linear(3, 2)
    opt = em.optim.SGD(lin.named_parameters(), lr=0.1)
    assert opt.params == lin.parameters()
    with pytest.raises(em.EmberError, match=r"^\[SGD\]"):
        em.optim.SGD([], lr=0.1)
    with pytest.raises(em.EmberError, match=r"^\[SGD\]"):
        em.optim.SGD([em.Var([1.0]) * 2.0], lr=0.1)  # not a leaf, as torch refuses
    with pytest.raises(em.EmberError, match=r"^\[SGD\]"):
        em.optim.SGD([em.Var([1.0])], lr=0.1, nesterov=True)
    with pytest.raises(em.EmberError, match=r"^\[AdamW\]"):
        em.optim.AdamW([em.Var([1.0])], betas=(1.0, 0.9))
    v = em.Var([1.0, 2.0])
    with pytest.raises(em.EmberError, match=r"^\[AdamW\]"):
        em.optim.AdamW([v]).step(_Store([(v, em.ones(3))]))


def test_backward_step_trains_linear_regression_like_torch():
    """Real autograd end to end: ember and torch AdamW on the same model and data agree."""
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((16, 3)).astype(np.float32), rng.standard_normal((16, 2)).astype(np.float32)
    lin = em.nn.Linear(3, 2)
    tl = torch.nn.Linear(3, 2)
    with torch.no_grad():
        tl.weight.copy_(torch.from_numpy(lin.weight.numpy()))
        tl.bias.copy_(torch.from_numpy(lin.bias.numpy()))
    opt = em.optim.AdamW(lin.parameters(), lr=0.05)
    topt = torch.optim.AdamW(tl.parameters(), lr=0.05)
    ex, ey, tx, ty = em.tensor(x), em.tensor(y), torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(10):
        grads = opt.backward_step(em.nn.mse_loss(lin(ex), ey))
        assert lin.weight in grads
        topt.zero_grad()
        torch.nn.functional.mse_loss(tl(tx), ty).backward()
        topt.step()
    np.testing.assert_allclose(lin.weight.numpy(), tl.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lin.bias.numpy(), tl.bias.detach().numpy(), rtol=1e-5, atol=1e-6)
