"""em.optim's SGD, Adam, AdamW and RMSprop against torch.optim bit for bit, step for step, in float64 and float32."""
import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

import ember as em
from ember.tensor_type import _wrap

from conftest import FLOATS, WIDE, WIDE_NP

DTYPES = [d for d in (em.float64, em.float32) if d in FLOATS]
NPD = {"float64": np.float64, "float32": np.float32}
TD = {"float64": torch.float64, "float32": torch.float32}

CASES = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.05, "momentum": 0.9}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "dampening": 0.3, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.1}),
    ("SGD", {"lr": 0.05, "momentum": 0.5, "maximize": True}),
    ("SGD", {"lr": 0.03, "weight_decay": 0.2, "maximize": True}),
    ("Adam", {}),
    ("Adam", {"lr": 0.01, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1}),
    ("Adam", {"lr": 0.02, "amsgrad": True, "maximize": True}),
    ("Adam", {"lr": 0.02, "betas": (0.3, 0.6), "amsgrad": True, "weight_decay": 0.05}),  # lerp from the end
    ("AdamW", {"lr": 0.01}),
    ("AdamW", {"lr": 0.01, "betas": (0.5, 0.9), "weight_decay": 0.3, "amsgrad": True}),
    ("AdamW", {"lr": 0.01, "weight_decay": 0.0, "maximize": True}),
    ("RMSprop", {}),
    ("RMSprop", {"lr": 0.01, "alpha": 0.9, "weight_decay": 0.05, "momentum": 0.9}),
    ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.5, "maximize": True}),
    ("RMSprop", {"lr": 0.003, "centered": True, "eps": 1e-4}),
    ("RMSprop", {"lr": 0.003, "alpha": 0.3, "centered": True, "weight_decay": 0.01}),  # lerp from the end
]
IDS = [f"{n}-{i}" for i, (n, _) in enumerate(CASES)]
SHAPES = [(7, 5), (33,), (), (129,)]  # odd sizes: torch's vector loop and its scalar tail both run


class IeeeSqrt(TorchFunctionMode):
    """torch with a correctly rounded sqrt. On the CPU torch takes sqrt from MKL's VML (its HA mode), which
    rounds about one result in 150 to the float below (which ones depends on the CPU MKL dispatches to);
    ember's is the IEEE sqrt. Every other op is torch's own, so this is torch's update rule bit for bit."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.sqrt, torch.Tensor.sqrt, torch.Tensor.sqrt_):
            x = args[0]
            r = torch.from_numpy(np.asarray(np.sqrt(x.detach().numpy())))
            return x.copy_(r) if func is torch.Tensor.sqrt_ else r
        return func(*args, **(kwargs or {}))


def _data(shapes, steps, dt, seed):
    rng = np.random.default_rng(seed)
    inits = [rng.standard_normal(s).astype(NPD[dt.name]) for s in shapes]
    grads = [[rng.standard_normal(s).astype(NPD[dt.name]) for s in shapes] for _ in range(steps)]
    return inits, grads


def _store(pairs, device=None):
    g = em.GradStore()
    for v, a in pairs:
        g.insert(v, em.tensor(a, device=device))
    return g


def _ember_run(name, kw, inits, grads, groups=None, device=None):
    ev = [em.Var(a, device=device) for a in inits]
    opt = getattr(em.optim, name)(groups(ev) if groups else ev, **kw)
    for gs in grads:
        opt.step(_store(zip(ev, gs), device))
    return [v.numpy() for v in ev], opt


def _torch_run(name, kw, inits, grads, groups=None, foreach=False, ieee=True):
    tv = [torch.tensor(a, requires_grad=True) for a in inits]
    opt = getattr(torch.optim, name)(groups(tv) if groups else tv, **kw, foreach=foreach)
    for gs in grads:
        for v, g in zip(tv, gs):
            v.grad = torch.tensor(g)
        if ieee:
            with IeeeSqrt():
                opt.step()
        else:
            opt.step()
    return [v.detach().numpy() for v in tv], opt


def _assert_state_equal(opt, topt):
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sd["state"].keys() == tsd["state"].keys()
    for i, st in sd["state"].items():
        assert set(st) == set(tsd["state"][i]), (st.keys(), tsd["state"][i].keys())
        for k, v in st.items():
            if k == "step":
                assert v == int(tsd["state"][i][k].item())
            else:
                np.testing.assert_array_equal(v.numpy(), tsd["state"][i][k].numpy())


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_bitwise_equal_to_torch_single_tensor_path(name, kw, dt, device):
    """12 steps on four tensors: parameters and every state tensor equal torch's bit for bit."""
    inits, grads = _data(SHAPES, 12, dt, seed=0)
    got, opt = _ember_run(name, kw, inits, grads, device=device)
    assert all(p.device == device for g in opt.param_groups for p in g["params"])
    want, topt = _torch_run(name, kw, inits, grads)
    for e, w in zip(got, want):
        np.testing.assert_array_equal(e, w)
    _assert_state_equal(opt, topt)


@pytest.mark.parametrize("name,kw", [c for c in CASES if c[0] == "SGD"], ids=[i for i in IDS if i.startswith("SGD")])
def test_sgd_bitwise_equal_to_torch_default(name, kw):
    """SGD uses no sqrt: it equals torch's default CPU path (foreach chosen by torch) with nothing changed."""
    inits, grads = _data(SHAPES, 10, WIDE, seed=4)
    got, _ = _ember_run(name, kw, inits, grads)
    want, _ = _torch_run(name, kw, inits, grads, foreach=None, ieee=False)
    for e, w in zip(got, want):
        np.testing.assert_array_equal(e, w)


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_torch_default_on_cpu_is_the_single_tensor_path(name, kw):
    """The oracle above pins foreach=False; torch's default for CPU tensors is that same path."""
    inits, grads = _data(SHAPES, 5, WIDE, seed=5)
    a, _ = _torch_run(name, kw, inits, grads, foreach=None)
    b, _ = _torch_run(name, kw, inits, grads, foreach=False)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("name,kw", [c for c in CASES if c[0] != "SGD"], ids=[i for i in IDS if not i.startswith("SGD")])
def test_close_to_unmodified_torch(name, kw):
    """Against torch with its own (MKL) sqrt the trajectories differ only by that sqrt's last-bit slips."""
    inits, grads = _data(SHAPES, 12, WIDE, seed=6)
    got, _ = _ember_run(name, kw, inits, grads)
    want, _ = _torch_run(name, kw, inits, grads, foreach=None, ieee=False)
    eps = np.finfo(WIDE_NP).eps
    for e, w in zip(got, want):
        np.testing.assert_allclose(e, w, rtol=64 * eps, atol=64 * eps)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop"])
def test_param_groups_with_own_options(name, device):
    def groups(p):
        return [{"params": [p[0]], "lr": 0.02, "weight_decay": 0.0}, {"params": [p[1], p[2]], "weight_decay": 0.2}]

    kw = {"lr": 0.05, "momentum": 0.9} if name in ("SGD", "RMSprop") else {"lr": 0.03}
    inits, grads = _data([(4, 3), (6,), (17,)], 6, WIDE, seed=7)
    got, opt = _ember_run(name, kw, inits, grads, groups, device)
    assert [g["lr"] for g in opt.param_groups] == [0.02, kw["lr"]]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.0, 0.2]
    want, topt = _torch_run(name, kw, inits, grads, groups)
    for e, w in zip(got, want):
        np.testing.assert_array_equal(e, w)
    _assert_state_equal(opt, topt)


@pytest.mark.parametrize("name,kw", [CASES[3], CASES[9], CASES[11], CASES[15]], ids=["SGD", "Adam", "AdamW", "RMSprop"])
def test_large_tensor_split_across_threads(name, kw, device):
    """200,003 elements: the pool splits the step into chunks; every element still equals torch's."""
    inits, grads = _data([(200_003,)], 3, WIDE, seed=8)
    got, _ = _ember_run(name, kw, inits, grads, device=device)
    want, _ = _torch_run(name, kw, inits, grads)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name,kw", [CASES[3], CASES[9], CASES[11], CASES[15]], ids=["SGD", "Adam", "AdamW", "RMSprop"])
def test_many_tensors_in_one_multi_tensor_step(name, kw, threads, device):
    """One step call runs every parameter's update as one multi-tensor pass (blocks of 16384 elements of
    all tensors shared among the threads): tensors of many sizes, an empty one, both float dtypes in one
    optimizer, every element and state equal torch's."""
    shapes = [(40_001,), (256,), (0,), (3, 5), (16_384,), (2, 16_385), ()]
    dts = [d for d in (em.float32, em.float64) if d in FLOATS]
    inits, grads = _data(shapes, 3, dts[0], seed=11)
    if len(dts) == 2:  # every other tensor in float64: one batch holds both dtypes
        inits = [a.astype(np.float64) if i % 2 else a for i, a in enumerate(inits)]
        grads = [[g.astype(np.float64) if i % 2 else g for i, g in enumerate(gs)] for gs in grads]
    prev = em.get_num_threads()
    em.set_num_threads(threads)
    try:
        got, opt = _ember_run(name, kw, inits, grads, device=device)
    finally:
        em.set_num_threads(prev)
    want, topt = _torch_run(name, kw, inits, grads)
    for e, w in zip(got, want):
        assert e.dtype == w.dtype
        np.testing.assert_array_equal(e, w)
    _assert_state_equal(opt, topt)


def _multi_step(p, g, m, v, lr):
    """An Adam step tuple for optim_step_multi (t = 1, no weight decay)."""
    return (1, 0, [0.0, 0.1, 0.999, 0.001, 0.001 ** 0.5, 1e-8, -lr / 0.1], p._storage, p._layout, g._storage,
            g._layout, m._storage, m._layout, v._storage, v._layout, None, None)


def test_multi_step_equals_single_steps_in_order_even_when_they_share_memory(device):
    """Steps whose buffers overlap (here the second step's gradient is the first step's parameter) run one
    after another, as separate optim_step calls would; disjoint ones give the same bits as those too."""
    rng = np.random.default_rng(12)
    n = 50_000
    vals = [rng.standard_normal(n).astype(WIDE_NP) for _ in range(3)]

    def run(multi, shared):
        p1, g1, p2 = (em.tensor(a.copy(), device=device) for a in vals)
        g2 = p1 if shared else em.tensor(vals[0].copy(), device=device)
        states = [em.zeros((n,), dtype=WIDE, device=device) for _ in range(4)]
        steps = [_multi_step(p1, g1, states[0], states[1], 0.1), _multi_step(p2, g2, states[2], states[3], 0.2)]
        if multi:
            em._C.fused.optim_step_multi(steps)
        else:
            for st in steps:
                em._C.fused.optim_step(*st)
        return [t.numpy() for t in (p1, p2, *states)]

    prev = em.get_num_threads()
    em.set_num_threads(2)  # two threads would run the two steps' blocks at once
    try:
        for shared in (False, True):
            for a, b in zip(run(True, shared), run(False, shared)):
                np.testing.assert_array_equal(a, b)
        assert not np.array_equal(run(True, True)[1], run(True, False)[1])  # the shared case read the updated p1
    finally:
        em.set_num_threads(prev)


def test_multi_step_entry_point_errors(device):
    f = em._C.fused.optim_step_multi
    p, lp = _parts(device=device)
    g, lg = _parts(device=device)
    f([])  # nothing to do
    with pytest.raises(em.EmberError, match=r"^\[optim_step_multi\] each step must be a tuple of optim_step's 13"):
        f([(0, 0, [0.0, 0.0, 1.0, -0.1], p, lp, g, lg)])
    with pytest.raises(em.EmberError, match=r"^\[optim_step_multi\] unknown optimizer kind 9"):
        f([(9, 0, [], p, lp, g, lg) + (None,) * 6])
    with pytest.raises(em.EmberError, match=r"^\[optim_step_multi\] state buffer 0 is missing"):
        f([(0, 0, [0.0, 0.0, 1.0, -0.1], p, lp, g, lg) + (None,) * 6, (1, 0, [0.0] * 7, p, lp, g, lg) + (None,) * 6])
    with pytest.raises(em.ShapeError, match=r"^\[optim_step_multi\] grad must be contiguous with 4 elements"):
        f([(0, 0, [0.0, 0.0, 1.0, -0.1], p, lp, *_parts(n=3, device=device)) + (None,) * 6])
    before = p.version
    with pytest.raises(em.EmberError, match=r"^\[optim_step_multi\] the gradient must not share memory"):
        f([(0, 0, [0.0, 0.0, 1.0, -0.1], p, lp, g, lg) + (None,) * 6, (0, 0, [0.0, 0.0, 1.0, -0.1], g, lg, g, lg) + (None,) * 6])
    assert p.version == before  # a refused batch writes nothing, not even its valid first step
    if device.type != "cpu":  # parameters on two devices are refused
        pc, lpc = _parts(device="cpu")
        gc, lgc = _parts(device="cpu")
        with pytest.raises(em.DeviceError, match=r"^\[optim_step_multi\] every parameter must be on one device"):
            f([(0, 0, [0.0, 0.0, 1.0, -0.1], p, lp, g, lg) + (None,) * 6,
               (0, 0, [0.0, 0.0, 1.0, -0.1], pc, lpc, gc, lgc) + (None,) * 6])


# (argument index, a value of the wrong type, what the EmberTypeError says after its prefix); "STORAGE" and
# "LAYOUT" stand for a real storage or layout in the wrong place. optim_step and optim_step_multi share them.
BAD_ARGS = [
    (0, 1.5, "kind .argument 0. must be an optimizer kind"), (0, 2 ** 40, "kind .argument 0."),
    (1, -1, r"flags .argument 1. must be an int in \[0, 2\*\*32\), got int"), (1, "x", "flags .argument 1."),
    (2, "abc", "scalars .argument 2. must be a sequence of floats, got str"), (2, [1.0, "x"], "scalars .argument 2."),
    (2, 3.0, "scalars .argument 2."), (3, 1, "p .argument 3. must be a storage or None, got int"),
    (4, "STORAGE", "lp .argument 4. must be a Layout or None, got "), (5, "LAYOUT", "g .argument 5. must be a storage"),
    (6, 3, "lg .argument 6. must be a Layout"), (7, "s", "s0 .argument 7. must be a storage"),
    (8, 1.0, "l0 .argument 8. must be a Layout"), (9, [], "s1 .argument 9."), (10, 0, "l1 .argument 10."),
    (11, {}, "s2 .argument 11."), (12, b"", "l2 .argument 12."),
]
OPTIM_ARG_NAMES = ["kind", "flags", "scalars", "p", "lp", "g", "lg", "s0", "l0", "s1", "l1", "s2", "l2"]


def _bad_step(device, i, bad):
    """(p, a valid SGD step's 13 arguments, the same with argument i replaced by `bad`)."""
    p, lp = _parts(device=device)
    g, lg = _parts(device=device)
    ok = (0, 0, [0.0, 0.0, 1.0, -0.1], p, lp, g, lg) + (None,) * 6
    t = list(ok)
    t[i] = {"STORAGE": p, "LAYOUT": lg}.get(bad, bad) if isinstance(bad, str) else bad
    return p, ok, tuple(t)


@pytest.mark.parametrize("i, bad, want", BAD_ARGS)
def test_multi_step_argument_types(device, i, bad, want):
    """A step argument of the wrong Python type is an EmberTypeError naming the step and the argument (not
    pybind11's cast error), raised before any step of the batch runs."""
    f = em._C.fused.optim_step_multi
    p, ok, bad_step = _bad_step(device, i, bad)
    before = p.version
    with pytest.raises(em.EmberTypeError, match=r"^\[optim_step_multi\] step 1: " + want):
        f([ok, bad_step])
    assert p.version == before  # the valid first step did not run either


@pytest.mark.parametrize("i, bad, want", BAD_ARGS)
def test_single_step_argument_types(device, i, bad, want):
    """optim_step's arguments are converted by optim_step_multi's code: a wrong Python type, passed by position
    or by keyword, is an EmberTypeError naming the argument (not pybind11's cast error), and nothing is written."""
    f = em._C.fused.optim_step
    p, ok, args = _bad_step(device, i, bad)
    want = want.replace(" or None", "") if 3 <= i <= 6 else want  # p, lp, g and lg are required here
    before = p.version
    with pytest.raises(em.EmberTypeError, match=r"^\[optim_step\] " + want):
        f(*args)
    with pytest.raises(em.EmberTypeError, match=r"^\[optim_step\] " + want):
        f(**dict(zip(OPTIM_ARG_NAMES, args)))
    assert p.version == before
    f(*ok)  # the valid arguments run
    assert p.version != before


@pytest.mark.parametrize("i", range(3, 13))
def test_none_operands(device, i):
    """None for a state or its layout is null (refused by the entry point only where the step needs it); for
    p, lp, g or lg optim_step says it is the wrong type, and optim_step_multi's entry point refuses it."""
    p, ok, args = _bad_step(device, i, None)
    name = OPTIM_ARG_NAMES[i]
    if i >= 7:  # SGD without momentum uses no state
        em._C.fused.optim_step(*args)
        em._C.fused.optim_step_multi([args])
        return
    want = f"{name} .argument {i}. must be a {'storage' if i % 2 else 'Layout'}, got NoneType"
    with pytest.raises(em.EmberTypeError, match=r"^\[optim_step\] " + want):
        em._C.fused.optim_step(*args)
    with pytest.raises(em.EmberError, match=r"^\[optim_step_multi\] every step needs a parameter and a gradient"):
        em._C.fused.optim_step_multi([ok, args])


def test_multi_step_takes_a_list_or_tuple(device):
    f = em._C.fused.optim_step_multi
    p, lp = _parts(device=device)
    g, lg = _parts(device=device)
    ok = (0, 0, [0.0, 0.0, 1.0, -0.1], p, lp, g, lg) + (None,) * 6
    for bad in (5, None, "steps", {0: ok}):
        with pytest.raises(em.EmberTypeError, match=r"^\[optim_step_multi\] steps must be a list of tuples, got "):
            f(bad)
    before = p.version
    f((ok,))  # a tuple of steps runs as a list does
    assert p.version != before


def test_strided_gradient_and_parameter():
    """A transposed gradient, and a parameter that is a transposed view of its storage, give torch's bits."""
    rng = np.random.default_rng(9)
    base = rng.standard_normal((6, 4)).astype(WIDE_NP)
    grads = [rng.standard_normal((4, 6)).astype(WIDE_NP) for _ in range(4)]
    tt = em.tensor(base).t()
    v = _wrap(tt._storage, tt._layout, tt.dtype, tt.device, em.Var)  # a Var over a strided layout
    assert not v._layout.is_contiguous()
    opt = em.optim.Adam([v], lr=0.05, amsgrad=True)
    for g in grads:
        store = em.GradStore()
        store.insert(v, em.tensor(np.ascontiguousarray(g.T)).t())  # a non-contiguous gradient
        opt.step(store)
    want, _ = _torch_run("Adam", {"lr": 0.05, "amsgrad": True}, [base.T.copy()], [[g] for g in grads])
    np.testing.assert_array_equal(v.numpy(), want[0])


def test_skips_non_variables_and_missing_gradients():
    a, b, c = em.Var(np.ones((2, 2), WIDE_NP)), em.Var(np.ones(3, WIDE_NP)), em.tensor(np.ones(2, WIDE_NP))
    opt = em.optim.Adam([a, b, c], lr=0.5)
    opt.step(_store([(a, np.ones((2, 2), WIDE_NP)), (c, np.ones(2, WIDE_NP))]))
    np.testing.assert_array_equal(b.numpy(), [1, 1, 1])  # no gradient: untouched, no state
    np.testing.assert_array_equal(c.numpy(), [1, 1])  # not a variable (a frozen parameter): untouched
    assert set(opt.state) == {id(a)}


@pytest.mark.parametrize("name,kw", [CASES[3], CASES[9], CASES[11], CASES[15]], ids=["SGD", "Adam", "AdamW", "RMSprop"])
def test_state_dict_round_trip_resumes_identically(name, kw, tmp_path):
    """4 steps, state_dict (through em.save / em.load too), a fresh optimizer: 4 more steps equal
    8 uninterrupted ones bit for bit."""
    inits, grads = _data([(3, 4), (5,)], 8, WIDE, seed=3)
    ref, opt = _ember_run(name, kw, inits, grads)
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
            np.testing.assert_array_equal(a.numpy(), b)


def test_step_writes_in_place_and_bumps_versions():
    p = em.Var(np.ones(5, WIDE_NP))
    view, storage = p[1:3], p._storage
    opt = em.optim.RMSprop([p], lr=0.1, momentum=0.5, centered=True)
    before = storage.version
    opt.step(_store([(p, np.full(5, 0.5, WIDE_NP))]))
    assert p._storage is storage and storage.version > before
    assert (view.numpy() != 1.0).all()  # a view taken before the step sees the update
    st = opt.state[id(p)]
    v0 = st["square_avg"]._storage.version
    opt.step(_store([(p, np.full(5, 0.5, WIDE_NP))]))
    assert st["square_avg"]._storage.version > v0


@pytest.mark.parametrize("name,kw", [CASES[2], CASES[8], CASES[11], CASES[15]], ids=["SGD", "Adam", "AdamW", "RMSprop"])
def test_half_parameters_take_the_composed_path(name, kw):
    """float16 has no fused kernel: the whole-tensor ops give torch's float16 result to a few ulp."""
    inits, grads = _data([(5, 3)], 4, em.float32, seed=10)
    inits = [a.astype(np.float16) for a in inits]
    grads = [[g.astype(np.float16) for g in gs] for gs in grads]
    got, _ = _ember_run(name, kw, inits, grads)
    want, _ = _torch_run(name, kw, inits, grads, ieee=False)
    np.testing.assert_allclose(got[0].astype(np.float32), want[0].astype(np.float32), rtol=8e-3, atol=8e-3)


def _parts(dt=None, n=4, device=None):
    t = em.zeros((n,), dtype=dt or WIDE, device=device)
    return t._storage, t._layout


def test_fused_entry_point_errors(device):
    f = em._C.fused.optim_step
    p, lp = _parts()
    g, lg = _parts()
    s0, l0 = _parts()
    for kind in (7, -1):
        with pytest.raises(em.EmberError, match=rf"^\[optim_step\] unknown optimizer kind {kind}$"):
            f(kind, 0, [], p, lp, g, lg)
    ip, ilp = _parts(em.int32)
    with pytest.raises(em.DTypeError, match=r"^\[optim_step\] fused updates take float32 or float64"):
        f(0, 0, [0.0, 0.0, 1.0, -0.1], ip, ilp, ip, ilp)
    with pytest.raises(em.EmberError, match=r"^\[optim_step\] grad must be contiguous with 4 elements"):
        f(0, 0, [0.0, 0.0, 1.0, -0.1], p, lp, *_parts(n=3))
    other = em.zeros((4,), dtype=em.float32 if WIDE is em.float64 else em.float16)
    with pytest.raises(em.DTypeError, match=r"^\[optim_step\] grad has dtype"):
        f(0, 0, [0.0, 0.0, 1.0, -0.1], p, lp, other._storage, other._layout)
    with pytest.raises(em.EmberError, match=r"^\[optim_step\] state buffer 0 is missing"):
        f(1, 0, [0.0] * 7, p, lp, g, lg)
    with pytest.raises(em.EmberError, match=r"^\[optim_step\] the parameter and state buffers must not share"):
        f(1, 0, [0.0] * 7, p, lp, g, lg, s0, l0, s0, l0)
    with pytest.raises(em.EmberError, match=r"^\[optim_step\] the gradient must not share memory"):
        f(0, 0, [0.0, 0.0, 1.0, -0.1], p, lp, p, lp)
    with pytest.raises(em.EmberError, match=r"^\[optim_step\] at most 8 scalars"):
        f(0, 0, [0.0] * 9, p, lp, g, lg)
    t = em.zeros((4, 4), dtype=WIDE).t()
    with pytest.raises(em.ShapeError, match=r"^\[optim_step\] param must be contiguous"):
        f(0, 0, [0.0, 0.0, 1.0, -0.1], t._storage, t._layout, *_parts(n=16))
    if device.type != "cpu":  # with a second device: operands on two devices are refused
        gc, lgc = _parts(em.float32, device="cpu")
        pm, lpm = _parts(em.float32, device=device)
        with pytest.raises(em.DeviceError, match=r"^\[optim_step\]"):
            f(0, 0, [0.0, 0.0, 1.0, -0.1], pm, lpm, gc, lgc)


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


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD", "RMSprop"])
def test_step_error_keeps_values_and_state_together(name):
    # A bad gradient for the second parameter raises; the first parameter's step (gathered for the
    # multi-tensor call) still runs, so its value and state are exactly one plain step's.
    kw = {"lr": 0.1, "momentum": 0.9} if name in ("SGD", "RMSprop") else {"lr": 0.1}
    a0, b0 = np.array([1.0, -2.0, 0.5], WIDE_NP), np.array([3.0, 4.0], WIDE_NP)
    ga = np.array([0.3, -0.1, 0.7], WIDE_NP)
    a, b = em.Var(a0), em.Var(b0)
    opt = getattr(em.optim, name)([a, b], **kw)
    with pytest.raises(em.ShapeError, match=rf"^\[{name}\] gradient shape"):
        opt.step(_store([(a, ga), (b, np.ones(3, WIDE_NP))]))
    ref, ref_opt = _ember_run(name, kw, [a0], [[ga]])
    np.testing.assert_array_equal(a.numpy(), ref[0])
    np.testing.assert_array_equal(b.numpy(), b0)
    assert id(b) not in opt.state
    for k, v in ref_opt.state[id(ref_opt.param_groups[0]["params"][0])].items():
        got = opt.state[id(a)][k]
        if isinstance(v, em.Tensor):
            np.testing.assert_array_equal(got.numpy(), v.numpy())
        else:
            assert got == v


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


@pytest.mark.parametrize("dt", [em.float32, em.float64], ids=lambda d: d.name)
def test_adam_quotient_by_the_bias_correction_is_exact(dt):
    """The CPU Adam kernels divide sqrt(v) by sqrt(1 - beta2^t) as a product with its reciprocal plus an FMA
    correction: bit for bit torch's divide over many magnitudes, bias corrections (beta2, steps) and an
    overflowing v (sqrt(v) = inf stays inf)."""
    rng = np.random.default_rng(11)
    n, npd = 20_011, NPD[dt.name]
    big = 1e20 if dt == em.float32 else 1e160  # its square overflows

    def arr():
        a = rng.standard_normal(n) * 10.0 ** rng.uniform(-30, 15, n)
        a[:5] = [0.0, -0.0, big, -big, 1.0]
        return a.astype(npd)

    for beta2 in (0.999, 0.95, 0.5, 0.123456, 0.99999):
        for name, kw in (("Adam", dict(lr=3e-2, betas=(0.8, beta2))),
                         ("AdamW", dict(lr=1e-3, betas=(0.9, beta2), weight_decay=0.01, eps=1e-12))):
            inits, grads = [arr()], [[arr()] for _ in range(3)]
            got, _ = _ember_run(name, kw, inits, grads, device=em.cpu)
            want, _ = _torch_run(name, kw, inits, grads)
            np.testing.assert_array_equal(got[0], want[0])
