"""Every differentiable op's gradient vs torch (float64 and float32) and vs finite differences
(em.testing.gradcheck), on random shapes, numpy broadcasting and strided variables (transposed,
narrowed, stepped and offset views taken inside the graph)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from devcheck import gradcheck, has_f64, wide

import ember as em

from conftest import FLOATS

KINDS = ["contiguous", "transposed", "narrowed", "stepped", "offset"]


def viewed(rng, shape, kind, lo, hi):
    """(base array, view) with view(base-shaped tensor) of the given shape; the view is the same
    indexing expression for torch and ember, so the variable is strided inside the graph."""
    shape = tuple(shape)
    nd = len(shape)
    if nd == 0 or kind == "contiguous":
        return rng.uniform(lo, hi, shape), lambda t: t
    if kind == "transposed":
        perm = tuple(reversed(range(nd)))
        return rng.uniform(lo, hi, shape[::-1]), lambda t: t.permute(*perm)
    if kind == "narrowed":
        return rng.uniform(lo, hi, shape[:-1] + (shape[-1] + 3,)), lambda t: t.narrow(nd - 1, 2, shape[-1])
    if kind == "stepped":
        big = (shape[0] * 2,) + shape[1:-1] + (shape[-1] * 2,) if nd > 1 else (shape[0] * 2,)
        idx = (slice(None, None, 2),) + (slice(None),) * (nd - 2) + ((slice(1, None, 2),) if nd > 1 else ())
        return rng.uniform(lo, hi, big), lambda t: t[idx]
    if kind == "offset":
        return rng.uniform(lo, hi, (3,) + shape), lambda t: t[1]
    raise ValueError(kind)


def run_case(rng, fe, ft, specs, kind, dtype=em.float64, fd=True, tol=None, consts=()):
    """Builds the inputs, compares ember's gradients with torch's and (float64) with finite
    differences (devcheck.gradcheck). specs: (shape, lo, hi) per differentiable input; consts:
    ember tensors passed to fe after them (ft closes over its own)."""
    made = [viewed(rng, s, kind, lo, hi) for s, lo, hi in specs]
    fd = fd and dtype is em.float64
    if dtype is em.float64 and not has_f64():  # float32 on the device, float32 tolerances
        dtype, tol = em.float32, None
    npdt = np.float64 if dtype is em.float64 else np.float32
    tdt = torch.float64 if dtype is em.float64 else torch.float32
    ev = [em.Var(b.astype(npdt)) for b, _ in made]
    tv = [torch.tensor(b.astype(npdt), dtype=tdt, requires_grad=True) for b, _ in made]
    eo = fe(*[v(x) for (_, v), x in zip(made, ev)], *consts)
    to = ft(*[v(x) for (_, v), x in zip(made, tv)])
    assert eo.shape == tuple(to.shape)
    w = rng.uniform(0.5, 1.5, tuple(to.shape))
    gs = (eo * em.tensor(w.astype(npdt))).sum().backward()
    tg = torch.autograd.grad((to * torch.tensor(w, dtype=tdt)).sum(), tv, allow_unused=True)
    rtol, atol = tol or ((1e-9, 1e-11) if dtype is em.float64 else (2e-4, 2e-5))
    for i, (v, g) in enumerate(zip(ev, tg)):
        got = gs.get(v)
        if g is None:
            assert got is None or np.all(got.numpy() == 0), i
            continue
        assert got is not None, f"no gradient for input {i}"
        assert got.dtype == dtype and got.shape == v.shape
        np.testing.assert_allclose(got.numpy(), g.numpy(), rtol=rtol, atol=atol, err_msg=f"input {i}")
    if fd:
        bases = [em.tensor(b, dtype=dtype) for b, _ in made]
        n = len(made)
        assert gradcheck(lambda *xs: fe(*[v(x) for (_, v), x in zip(made, xs[:n])], *xs[n:]), bases,
                         consts=consts, atol=1e-6, rtol=1e-5)


def rshape(rng, nd, lo=1, hi=4):
    return tuple(int(s) for s in rng.integers(lo, hi + 1, size=nd))


# ----------------------------------------------------------------------------- unary
UNARY = {
    "exp": (lambda x: x.exp(), torch.exp, (-2, 2)),
    "log": (lambda x: x.log(), torch.log, (0.2, 4)),
    "sin": (lambda x: x.sin(), torch.sin, (-4, 4)),
    "cos": (lambda x: x.cos(), torch.cos, (-4, 4)),
    "tanh": (lambda x: x.tanh(), torch.tanh, (-2, 2)),
    "sqrt": (lambda x: x.sqrt(), torch.sqrt, (0.2, 4)),
    "sqr": (lambda x: x.sqr(), torch.square, (-3, 3)),
    "abs": (lambda x: x.abs(), torch.abs, (-3, 3)),
    "neg": (lambda x: -x, torch.neg, (-3, 3)),
    "recip": (lambda x: x.recip(), torch.reciprocal, (0.3, 3)),
    "relu": (lambda x: x.relu(), torch.relu, (-3, 3)),
    "gelu": (lambda x: x.gelu(), F.gelu, (-3, 3)),
    "silu": (lambda x: x.silu(), F.silu, (-4, 4)),
    "erf": (lambda x: x.erf(), torch.erf, (-2, 2)),
    "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid, (-4, 4)),
    "affine": (lambda x: x.affine(-1.5, 0.25), lambda x: x * -1.5 + 0.25, (-3, 3)),
    "powf": (lambda x: x.powf(2.5), lambda x: x.pow(2.5), (0.2, 3)),
    "powf_int": (lambda x: x.powf(3), lambda x: x.pow(3), (-2, 2)),
    "powf_neg": (lambda x: x ** -1.5, lambda x: x ** -1.5, (0.3, 3)),
    "clamp": (lambda x: x.clamp(-0.5, 1.0), lambda x: x.clamp(-0.5, 1.0), (-2, 2)),
    "clamp_lo": (lambda x: x.clamp(lo=0.3), lambda x: x.clamp(min=0.3), (-2, 2)),
    "mean": (lambda x: x.mean(), torch.mean, (-2, 2)),
    "logsumexp": (lambda x: x.logsumexp(-1), lambda x: x.logsumexp(-1), (-3, 3)),
    "round_mul": (lambda x: x.round() * x, lambda x: x.round() * x, (-3, 3)),  # round is pruned
    "sign_mul": (lambda x: x.sign() * x, lambda x: x.sign() * x, (-3, 3)),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(rng, name, kind):
    fe, ft, (lo, hi) = UNARY[name]
    nd = 0 if kind == "contiguous" and name == "exp" else int(rng.integers(1, 4))
    if name == "logsumexp":
        nd = max(nd, 1)
    run_case(rng, fe, ft, [(rshape(rng, nd), lo, hi)], kind)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float32(rng, name):
    fe, ft, (lo, hi) = UNARY[name]
    run_case(rng, fe, ft, [((3, 5), lo, hi)], "transposed", dtype=em.float32)


def test_kinks_follow_torch():
    """abs'(0) = 0, relu'(0) = 0, clamp passes the gradient at its bounds, sign has none."""
    x = em.Var([-1.0, 0.0, 2.0, 0.5, 1.0])
    gs = (x.abs() + x.relu() + x.clamp(0.0, 1.0) + x.sign()).sum().backward()
    tx = torch.tensor([-1.0, 0.0, 2.0, 0.5, 1.0], requires_grad=True)
    (tx.abs() + tx.relu() + tx.clamp(0.0, 1.0) + tx.sign()).sum().backward()
    np.testing.assert_array_equal(gs[x].numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(gs[x].numpy(), [-1.0, 1.0, 2.0, 3.0, 3.0])


def test_powf_zero_exponent_and_zero_base():
    x = em.Var([0.0, 2.0, -1.0])
    np.testing.assert_array_equal(x.powf(0).sum().backward()[x].numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(x.powf(2).sum().backward()[x].numpy(), [0.0, 4.0, -2.0])


# ----------------------------------------------------------------------------- binary
BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b, (-3, 3), (-3, 3)),
    "sub": (lambda a, b: a - b, lambda a, b: a - b, (-3, 3), (-3, 3)),
    "mul": (lambda a, b: a * b, lambda a, b: a * b, (-3, 3), (-3, 3)),
    "div": (lambda a, b: a / b, lambda a, b: a / b, (-3, 3), (0.5, 3)),
    "maximum": (em.maximum, torch.maximum, (-3, 3), (-3, 3)),
    "minimum": (em.minimum, torch.minimum, (-3, 3), (-3, 3)),
    "pow": (lambda a, b: a ** b, lambda a, b: a ** b, (0.3, 3), (-2, 2)),
}
BCAST = [((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (3, 4)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((2, 3), ()),
         ((1, 3), (2, 1))]


@pytest.mark.parametrize("kind", ["contiguous", "transposed", "stepped", "offset"])
@pytest.mark.parametrize("shapes", BCAST, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(rng, name, shapes, kind):
    fe, ft, ra, rb = BINARY[name]
    run_case(rng, fe, ft, [(shapes[0],) + ra, (shapes[1],) + rb], kind)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_float32(rng, name):
    fe, ft, ra, rb = BINARY[name]
    run_case(rng, fe, ft, [((3, 4),) + ra, ((2, 1, 4),) + rb], "narrowed", dtype=em.float32)


SCALAR_OPS = {
    "x+2": (lambda x: x + 2.0, lambda x: x + 2.0),
    "2-x": (lambda x: 2.0 - x, lambda x: 2.0 - x),
    "x*3": (lambda x: x * 3, lambda x: x * 3),
    "1/x": (lambda x: 1.0 / x, lambda x: 1.0 / x),
    "x/4": (lambda x: x / 4.0, lambda x: x / 4.0),
    "2**x": (lambda x: 2.0 ** x, lambda x: 2.0 ** x),
    "x**x": (lambda x: x ** x, lambda x: x ** x),
}


@pytest.mark.parametrize("name", sorted(SCALAR_OPS))
def test_python_scalar_operands(rng, name):
    fe, ft = SCALAR_OPS[name]
    run_case(rng, fe, ft, [((3, 2), 0.5, 2.5)], "transposed")


def test_python_scalar_constants_take_no_gradient():
    """Constants made from Python numbers are not user tensors: the store holds x only."""
    x = em.Var([1.0, 2.0])
    gs = ((x * 3.0 + 1.0) / 2.0 - 5.0).sum().backward()
    assert len(gs) == 1 and x in gs
    np.testing.assert_allclose(gs[x].numpy(), [1.5, 1.5])


# ----------------------------------------------------------------------------- reductions
RED_DIMS = [None, 0, -1, (0, 2), (1,), (0, 1, 2)]


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", RED_DIMS, ids=str)
@pytest.mark.parametrize("name", ["sum", "max", "min", "mean"])
def test_reductions(rng, name, dim, keepdim):
    tdim = tuple(range(3)) if dim is None else dim
    tfn = {"sum": torch.sum, "max": torch.amax, "min": torch.amin, "mean": torch.mean}[name]
    kind = ["contiguous", "transposed", "stepped", "offset"][int(rng.integers(4))]
    run_case(rng, lambda x: getattr(x, name)(dim, keepdim=keepdim),
             lambda x: tfn(x, dim=tdim, keepdim=keepdim), [(rshape(rng, 3, 2, 4), -3, 3)], kind)


def test_reduction_of_0d_and_logsumexp_dims(rng):
    run_case(rng, lambda x: x.sum(), torch.sum, [((), -1, 1)], "contiguous")
    run_case(rng, lambda x: x.max(), torch.amax, [((), -1, 1)], "contiguous")
    run_case(rng, lambda x: x.logsumexp((0, 2), keepdim=True), lambda x: x.logsumexp((0, 2), keepdim=True),
             [((2, 3, 4), -3, 3)], "stepped")


@pytest.mark.parametrize("name", ["max", "min"])
def test_reduction_ties_split_evenly(name):
    data = [[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 0.0]] if name == "max" else \
           [[1.0, -3.0, -3.0, 2.0], [0.0, 0.0, 0.0, 4.0]]
    x = em.Var(data)
    gs = getattr(x, name)(1).sum().backward()
    tx = torch.tensor(data, requires_grad=True)
    getattr(torch, "a" + name)(tx, dim=1).sum().backward()
    np.testing.assert_allclose(gs[x].numpy(), tx.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gs[x].numpy().sum(1), [1.0, 1.0], rtol=1e-6)  # shares sum to upstream
    gs = getattr(x, name)().backward()  # over everything
    assert abs(gs[x].numpy().sum() - 1.0) < 1e-6


@pytest.mark.parametrize("fn", [em.maximum, em.minimum])
def test_maximum_minimum_ties_half(fn):
    a, b = em.Var([1.0, 2.0, 3.0]), em.Var([1.0, 0.0, 4.0])
    gs = fn(a, b).sum().backward()
    ta, tb = torch.tensor([1.0, 2.0, 3.0], requires_grad=True), torch.tensor([1.0, 0.0, 4.0], requires_grad=True)
    getattr(torch, fn.__name__)(ta, tb).sum().backward()
    np.testing.assert_array_equal(gs[a].numpy(), ta.grad.numpy())
    np.testing.assert_array_equal(gs[b].numpy(), tb.grad.numpy())
    assert gs[a].numpy()[0] == 0.5 and gs[b].numpy()[0] == 0.5


# ----------------------------------------------------------------------------- matmul
MATMUL = [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
          ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((1, 3, 4), (2, 4, 2))]


@pytest.mark.parametrize("kind", ["contiguous", "transposed", "narrowed", "offset"])
@pytest.mark.parametrize("shapes", MATMUL, ids=str)
def test_matmul(rng, shapes, kind):
    run_case(rng, lambda a, b: a @ b, torch.matmul, [(shapes[0], -2, 2), (shapes[1], -2, 2)], kind)


def test_matmul_float32_batched(rng):
    run_case(rng, lambda a, b: a @ b, torch.matmul, [((2, 5, 7), -1, 1), ((7, 3), -1, 1)], "transposed",
             dtype=em.float32)


# ----------------------------------------------------------------------------- views and shapes
VIEWS = {
    "transpose": ((2, 3, 4), lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2)),
    "t": ((3, 4), lambda x: x.t(), lambda x: x.t()),
    "T": ((2, 3, 4), lambda x: x.T, lambda x: x.permute(2, 1, 0)),
    "permute": ((2, 3, 4), lambda x: x.permute(1, 2, 0), lambda x: x.permute(1, 2, 0)),
    "narrow": ((4, 5), lambda x: x.narrow(1, 1, 3), lambda x: x.narrow(1, 1, 3)),
    "narrow_edge": ((4, 5), lambda x: x.narrow(0, 0, 4), lambda x: x.narrow(0, 0, 4)),
    "reshape": ((2, 6), lambda x: x.reshape(3, 4), lambda x: x.reshape(3, 4)),
    "reshape_copy": ((3, 4), lambda x: x.t().reshape(12), lambda x: x.t().reshape(12)),
    "flatten": ((2, 3, 2), lambda x: x.flatten(1), lambda x: x.flatten(1)),
    "squeeze": ((3, 1, 2), lambda x: x.squeeze(1), lambda x: x.squeeze(1)),
    "squeeze_all": ((1, 3, 1), lambda x: x.squeeze(), lambda x: x.squeeze()),
    "unsqueeze": ((3, 2), lambda x: x.unsqueeze(1), lambda x: x.unsqueeze(1)),
    "broadcast_as": ((3, 1), lambda x: x.broadcast_as((2, 3, 4)), lambda x: x.expand(2, 3, 4)),
    "index_int": ((3, 4), lambda x: x[1], lambda x: x[1]),
    "index_mixed": ((4, 5, 3), lambda x: x[1:, None, ::2, -1], lambda x: x[1:, None, ::2, -1]),
    "index_ellipsis": ((3, 4, 5), lambda x: x[..., 1:4:2], lambda x: x[..., 1:4:2]),
    "index_twice": ((4, 6), lambda x: x[::2][:, 1:5] * x[1::2][:, :4], lambda x: x[::2][:, 1:5] * x[1::2][:, :4]),
    "copy": ((3, 4), lambda x: x.t().copy(), lambda x: x.t().clone()),
    "contiguous": ((3, 4), lambda x: x.t().contiguous(), lambda x: x.t().contiguous()),
}


@pytest.mark.parametrize("kind", ["contiguous", "transposed", "offset"])
@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views(rng, name, kind):
    shape, fe, ft = VIEWS[name]
    run_case(rng, lambda x: fe(x).sqr(), lambda x: ft(x).square(), [(shape, -2, 2)], kind)


def test_detach_blocks_gradient(rng):
    # finite differences cannot see detach, so this one is checked against torch only
    run_case(rng, lambda x: x.detach() * x.t(), lambda x: x.detach() * x.t(), [((3, 3), -2, 2)], "stepped", fd=False)


def test_float_casts(rng):
    run_case(rng, lambda x: x.to_dtype(em.float32).sqr().to_dtype(wide()),
             lambda x: x.float().square().double(), [((3, 4), -2, 2)], "transposed", fd=False, tol=(1e-6, 1e-6))
    x = em.Var(np.ones(3, np.float32))
    for dt in [d for d in (em.float16, em.bfloat16, em.float64) if d in FLOATS]:
        g = (x.to_dtype(dt) * 2.0).sum().backward()[x]
        assert g.dtype == em.float32
        np.testing.assert_array_equal(g.numpy(), [2.0, 2.0, 2.0])


def test_casts_from_ints_are_pruned():
    x = em.Var([1.5, 2.5])
    i = x.to_dtype(em.int64).to_dtype(em.float32)
    assert i.op is None
    gs = (i * x).sum().backward()
    np.testing.assert_array_equal(gs[x].numpy(), [1.0, 2.0])


# ----------------------------------------------------------------------------- where, indexing, cat
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4), (3, 4)), ((3, 4), (4,), (3, 1)), ((2, 1, 4), (3, 4), (1,))],
                         ids=str)
def test_where(rng, shapes):
    cshape, sa, sb = shapes
    c = rng.integers(0, 2, cshape).astype(np.uint8)
    ec, tc = em.tensor(c), torch.tensor(c.astype(bool))
    run_case(rng, lambda a, b, c: em.where(c, a, b), lambda a, b: torch.where(tc, a, b),
             [(sa, -2, 2), (sb, -2, 2)], "transposed", consts=(ec,))


def test_where_scalar_branch(rng):
    c = rng.integers(0, 2, (3, 4)).astype(np.uint8)
    ec, tc = em.tensor(c), torch.tensor(c.astype(bool))
    run_case(rng, lambda a, c: em.where(c, a, 0.0), lambda a: torch.where(tc, a, 0.0), [((3, 4), -2, 2)], "offset",
             consts=(ec,))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select(rng, dim):
    ids = rng.integers(0, 3, 7)  # repeats: gradients accumulate
    ei, ti = em.tensor(ids), torch.tensor(ids)
    d = dim % 3
    run_case(rng, lambda x, i: x.index_select(i, dim), lambda x: torch.index_select(x, d, ti),
             [((3, 3, 4), -2, 2)], "transposed", consts=(ei,))
    run_case(rng, lambda x, i: x[i], lambda x: x[ti], [((3, 2), -2, 2)], "stepped", consts=(ei,))  # list-style


@pytest.mark.parametrize("dim", [0, 1])
def test_gather(rng, dim):
    ids = rng.integers(0, 3, (4, 3) if dim == 0 else (3, 5))
    ei, ti = em.tensor(ids), torch.tensor(ids)
    run_case(rng, lambda x, i: x.gather(i, dim), lambda x: torch.gather(x, dim, ti), [((3, 3), -2, 2)], "transposed",
             consts=(ei,))


def test_index_add(rng):
    ids = rng.integers(0, 4, 6)
    ei, ti = em.tensor(ids), torch.tensor(ids)
    run_case(rng, lambda x, s, i: x.index_add(i, s, 1), lambda x, s: x.index_add(1, ti, s),
             [((3, 4), -2, 2), ((3, 6), -2, 2)], "offset", consts=(ei,))


def test_scatter_add(rng):
    ids = rng.integers(0, 4, (2, 3))
    ei, ti = em.tensor(ids), torch.tensor(ids)
    run_case(rng, lambda x, s, i: x.scatter_add(i, s, 0), lambda x, s: x.scatter_add(0, ti, s),
             [((4, 3), -2, 2), ((2, 3), -2, 2)], "transposed", consts=(ei,))


@pytest.mark.parametrize("kind", ["contiguous", "transposed", "stepped"])
def test_cat_and_stack(rng, kind):
    run_case(rng, lambda a, b, c: em.cat([a, b, c], 1), lambda a, b, c: torch.cat([a, b, c], 1),
             [((2, 3), -2, 2), ((2, 1), -2, 2), ((2, 4), -2, 2)], kind)
    run_case(rng, lambda a, b: em.stack([a, b, a], -1), lambda a, b: torch.stack([a, b, a], -1),
             [((2, 3), -2, 2), ((2, 3), -2, 2)], kind)


# ----------------------------------------------------------------------------- compositions
def test_softmax_cross_entropy_composite(rng):
    ids = rng.integers(0, 5, 4)
    ei, ti = em.tensor(ids[:, None]), torch.tensor(ids[:, None])

    def fe(x, w, ids):
        logits = x @ w
        m = logits.max(-1, keepdim=True).detach()
        e = (logits - m).exp()
        p = e / e.sum(-1, keepdim=True)
        return -p.gather(ids, 1).log().mean()

    def ft(x, w):
        return -torch.softmax(x @ w, -1).gather(1, ti).log().mean()

    run_case(rng, fe, ft, [((4, 3), -1, 1), ((3, 5), -1, 1)], "transposed", consts=(ei,))


def test_mlp_matches_torch(rng):
    def fe(x, w1, b1, w2):
        return ((x @ w1 + b1).tanh() @ w2).gelu().silu().sum(0)

    def ft(x, w1, b1, w2):
        return F.silu(F.gelu(torch.tanh(x @ w1 + b1) @ w2)).sum(0)

    run_case(rng, fe, ft, [((5, 4), -1, 1), ((4, 6), -1, 1), ((6,), -1, 1), ((6, 3), -1, 1)], "narrowed")


def test_erf_gelu_constants():
    """Spot values: d/dx erf(0) = 2/sqrt(pi); gelu'(0) = 0.5."""
    x = em.Var(np.zeros(1), dtype=wide())
    tol = 1e-12 if x.dtype is em.float64 else 1e-6
    assert abs(x.erf().sum().backward()[x].item() - 2 / math.sqrt(math.pi)) < tol
    assert abs(x.gelu().sum().backward()[x].item() - 0.5) < tol


@pytest.mark.parametrize("dt", [em.float16, em.bfloat16], ids=lambda d: d.name)
def test_half_precision_gradients(rng, dt):
    """Rules keep the input's dtype; values agree with a float64 torch reference loosely."""
    xs, ws = rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, (3, 5))
    x, w = em.Var(xs, dtype=dt), em.Var(ws, dtype=dt)
    gs = ((x @ w).tanh().relu() * x.sigmoid().sum(1, keepdim=True)).max(1).sum().backward()
    tx, tw = (torch.tensor(np.asarray(v.numpy(), np.float64), requires_grad=True) for v in (x, w))
    ((tx @ tw).tanh().relu() * tx.sigmoid().sum(1, keepdim=True)).amax(1).sum().backward()
    tol = 2e-2 if dt is em.float16 else 8e-2
    for v, t in ((x, tx), (w, tw)):
        assert gs[v].dtype is dt
        np.testing.assert_allclose(np.asarray(gs[v].numpy(), np.float64), t.grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["gelu", "silu", "sigmoid"])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_fused_activation_backward_matches_composite(rng, name, dt):
    """Without create_graph these rules use a fused kernel; with it, the composite form. Both agree,
    also for a stride-0 upstream gradient (from sum) and a transposed input."""
    xs = rng.uniform(-3, 3, (5, 4))
    x = em.Var(xs, dtype=dt)
    for f in (lambda v: getattr(v.t(), name)().sum(), lambda v: (getattr(v, name)() * v.t().t()).sum(0)):
        fast = f(x).backward()[x]
        slow = f(x).backward(create_graph=True)[x]
        assert fast.dtype is dt and slow.dtype is dt
        tol = {"float64": 1e-12, "float32": 1e-5, "float16": 4e-3, "bfloat16": 3e-2}[dt.name]
        np.testing.assert_allclose(np.asarray(fast.numpy(), np.float64), np.asarray(slow.numpy(), np.float64),
                                   rtol=tol, atol=tol)
