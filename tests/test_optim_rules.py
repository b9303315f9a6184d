"""em.optim's SGD, Adam, AdamW and RMSprop against torch.optim in float64, step for step, with every option."""
import numpy as np
import pytest
import torch

import ember as em

from conftest import TOL, WIDE, WIDE_NP

# torch's CPU kernels fuse add(alpha=), lerp and addcmul into one FMA each; ember rounds the product and
# the sum separately, so float64 results agree to a few ulp of the values (about 1.0 here), not bitwise.
RTOL, ATOL = (1e-15, 2e-15) if WIDE is em.float64 else TOL[WIDE.name]

CASES = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.05, "momentum": 0.9}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "dampening": 0.3, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.1}),
    ("SGD", {"lr": 0.05, "momentum": 0.5, "maximize": True}),
    ("Adam", {}),
    ("Adam", {"lr": 0.01, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1}),
    ("Adam", {"lr": 0.02, "amsgrad": True, "maximize": True}),
    ("AdamW", {"lr": 0.01}),
    ("AdamW", {"lr": 0.01, "betas": (0.5, 0.9), "weight_decay": 0.3, "amsgrad": True}),
    ("RMSprop", {}),
    ("RMSprop", {"lr": 0.01, "alpha": 0.9, "weight_decay": 0.05, "momentum": 0.9}),
    ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.5, "maximize": True}),
    ("RMSprop", {"lr": 0.003, "centered": True, "eps": 1e-4}),
]


def _grads(steps, shapes, seed=1):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(WIDE_NP) for s in shapes] for _ in range(steps)]


def _store(pairs):
    g = em.GradStore()
    for v, a in pairs:
        g.insert(v, em.tensor(a))
    return g


def _torch_run(name, kw, inits, grads, groups=None):
    tv = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in inits]
    opt = getattr(torch.optim, name)(groups(tv) if groups else tv, **kw)
    for gs in grads:
        for v, g in zip(tv, gs):
            v.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    return [v.detach().numpy() for v in tv], opt


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_matches_torch_float64(name, kw):
    shapes = [(7, 5), (33,), ()]
    rng = np.random.default_rng(0)
    inits = [rng.standard_normal(s).astype(WIDE_NP) for s in shapes]
    grads = _grads(12, shapes)
    ev = [em.Var(a) for a in inits]
    opt = getattr(em.optim, name)(ev, **kw)
    for gs in grads:
        opt.step(_store(zip(ev, gs)))
    want, topt = _torch_run(name, kw, inits, grads)
    for e, w in zip(ev, want):
        np.testing.assert_allclose(e.numpy(), w, rtol=RTOL, atol=ATOL)
    # the state holds torch's entries, with torch's values
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sd["state"].keys() == tsd["state"].keys()
    for i, st in sd["state"].items():
        assert set(st) == set(tsd["state"][i]), (st.keys(), tsd["state"][i].keys())
        for k, v in st.items():
            tvv = tsd["state"][i][k]
            if k == "step":
                assert v == int(tvv.item())
            else:
                np.testing.assert_allclose(v.numpy(), tvv.numpy(), rtol=RTOL * 4, atol=ATOL * 4)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop"])
def test_param_groups_with_own_options(name):
    def groups(p):
        return [{"params": [p[0]], "lr": 0.02, "weight_decay": 0.0}, {"params": [p[1]], "weight_decay": 0.2}]

    kw = {"lr": 0.05, "momentum": 0.9} if name in ("SGD", "RMSprop") else {"lr": 0.03}
    shapes = [(4, 3), (6,)]
    rng = np.random.default_rng(5)
    inits = [rng.standard_normal(s).astype(WIDE_NP) for s in shapes]
    grads = _grads(6, shapes, seed=6)
    ev = [em.Var(a) for a in inits]
    opt = getattr(em.optim, name)(groups(ev), **kw)
    assert [g["lr"] for g in opt.param_groups] == [0.02, kw["lr"]]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.0, 0.2]
    for gs in grads:
        opt.step(_store(zip(ev, gs)))
    want, _ = _torch_run(name, kw, inits, grads, groups)
    for e, w in zip(ev, want):
        np.testing.assert_allclose(e.numpy(), w, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name,kw", [CASES[3], CASES[7], CASES[9], CASES[12]], ids=["SGD", "Adam", "AdamW", "RMSprop"])
def test_state_dict_round_trip_resumes_identically(name, kw, tmp_path):
    """4 steps, state_dict (through em.save / em.load too), a fresh optimizer: 4 more steps equal
    8 uninterrupted ones bit for bit."""
    shapes = [(3, 4), (5,)]
    rng = np.random.default_rng(2)
    inits = [rng.standard_normal(s).astype(WIDE_NP) for s in shapes]
    grads = _grads(8, shapes, seed=3)
    ref = [em.Var(a) for a in inits]
    opt = getattr(em.optim, name)(ref, **kw)
    for gs in grads:
        opt.step(_store(zip(ref, gs)))

    for through_file in (False, True):
        vs = [em.Var(a) for a in inits]
        first = getattr(em.optim, name)(vs, **kw)
        for gs in grads[:4]:
            first.step(_store(zip(vs, gs)))
        sd, values = first.state_dict(), [v.numpy().copy() for v in vs]
        first.step(_store(zip(vs, grads[0])))  # a later step must not leak into the saved state
        if through_file:
            em.save({"optim": sd, "params": [em.tensor(a) for a in values]}, tmp_path / "ck.safetensors")
            loaded = em.load(tmp_path / "ck.safetensors")
            sd, values = loaded["optim"], [t.numpy() for t in loaded["params"]]
        vs = [em.Var(a) for a in values]
        fresh = getattr(em.optim, name)(vs, lr=123.0)
        fresh.load_state_dict(sd)
        assert fresh.lr == opt.lr
        for gs in grads[4:]:
            fresh.step(_store(zip(vs, gs)))
        for a, b in zip(vs, ref):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_skips_non_variables_and_missing_gradients():
    a, b, c = em.Var(np.ones((2, 2), WIDE_NP)), em.Var(np.ones(3, WIDE_NP)), em.tensor(np.ones(2, WIDE_NP))
    view, storage = a[0], a.storage
    opt = em.optim.Adam([a, b, c], lr=0.5)
    store = _store([(a, np.ones((2, 2), WIDE_NP)), (c, np.ones(2, WIDE_NP))])
    opt.step(store)
    assert a.storage is storage
    assert view.numpy()[0] != 1.0  # a view taken before the step sees the update (written in place)
    np.testing.assert_array_equal(b.numpy(), [1, 1, 1])  # no gradient: untouched, no state
    np.testing.assert_array_equal(c.numpy(), [1, 1])  # not a variable (a frozen parameter): untouched
    assert set(opt.state) == {id(a)}


def test_zero_grad_says_why_it_is_unnecessary():
    opt = em.optim.SGD([em.Var([1.0])], lr=0.1)
    assert "nothing accumulates" in em.optim.SGD.zero_grad.__doc__
    with pytest.raises(em.GradientsInStore, match=r"^\[SGD.zero_grad\] ember accumulates no gradients"):
        opt.zero_grad()


def test_add_param_group_and_defaults():
    a, b = em.Var([1.0]), em.Var([2.0])
    opt = em.optim.RMSprop([a], lr=0.1)
    opt.add_param_group({"params": b, "momentum": 0.5})
    assert opt.params == [a, b] and opt.param_groups[1]["momentum"] == 0.5 and opt.param_groups[1]["lr"] == 0.1
    assert opt.defaults["alpha"] == 0.99 and em.optim.Adam([a]).defaults["weight_decay"] == 0.0
    with pytest.raises(em.EmberError, match=r"^\[RMSprop\] a parameter appears in more than one group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(em.EmberError, match=r"^\[RMSprop\] unknown options \['betas'\]"):
        opt.add_param_group({"params": [em.Var([1.0])], "betas": (0.9, 0.9)})
    with pytest.raises(em.EmberError, match=r"^\[RMSprop\] a param group needs a 'params' entry"):
        opt.add_param_group({"lr": 0.1})


@pytest.mark.parametrize("make,match", [
    (lambda v: em.optim.Adam([v], lr=-1.0), r"^\[Adam\] invalid learning rate"),
    (lambda v: em.optim.Adam([v], betas=(0.9, 1.0)), r"^\[Adam\] invalid betas"),
    (lambda v: em.optim.Adam([v], betas=0.9), r"^\[Adam\] betas must be a pair"),
    (lambda v: em.optim.AdamW([v], eps=-1e-8), r"^\[AdamW\] invalid eps"),
    (lambda v: em.optim.RMSprop([v], alpha=-0.1), r"^\[RMSprop\] invalid alpha"),
    (lambda v: em.optim.RMSprop([v], momentum=float("nan")), r"^\[RMSprop\] invalid momentum"),
    (lambda v: em.optim.SGD([v], lr=0.1, nesterov=True), r"^\[SGD\] nesterov momentum requires"),
    (lambda v: em.optim.SGD([v], weight_decay=-1.0), r"^\[SGD\] invalid weight_decay"),
    (lambda v: em.optim.SGD([v * 2.0]), r"^\[SGD\] can't optimize the result of an op"),
    (lambda v: em.optim.SGD([em.tensor([1, 2])]), r"^\[SGD\] parameters must be float"),
    (lambda v: em.optim.SGD([[1.0]]), r"^\[SGD\] parameters must be em.Var"),
    (lambda v: em.optim.SGD(v), r"^\[SGD\] params must be an iterable"),
    (lambda v: em.optim.Adam([]), r"^\[Adam\] got an empty parameter list"),
    (lambda v: em.optim.Adam([v], amsgrad=2), r"^\[Adam\]"),
])
def test_errors(make, match):
    with pytest.raises(em.EmberError, match=match):
        make(em.Var([1.0, 2.0]))


def test_step_and_load_errors():
    v = em.Var([1.0, 2.0])
    opt = em.optim.Adam([v])
    with pytest.raises(em.EmberError, match=r"^\[Adam\] gradient shape"):
        opt.step(_store([(v, np.ones(3, WIDE_NP))]))
    with pytest.raises(em.GradientsInStore, match=r"^\[Adam.step\] step needs the gradients"):
        opt.step()
    with pytest.raises(em.EmberError, match=r"^\[Adam\] step expects the GradStore"):
        opt.step(3)
    with pytest.raises(em.EmberError, match=r"^\[Adam\] load_state_dict expects"):
        opt.load_state_dict([1])
    with pytest.raises(em.EmberError, match=r"^\[Adam\] load_state_dict: parameter groups do not match"):
        opt.load_state_dict(em.optim.Adam([v, em.Var([1.0])]).state_dict())
    with pytest.raises(em.EmberError, match=r"^\[Adam\] load_state_dict: no parameter 7"):
        opt.load_state_dict({"state": {7: {}}, "param_groups": opt.state_dict()["param_groups"]})
