"""Random op graphs (shared subexpressions, broadcasting, views, reductions, matmul) built the same
way in ember and torch: every variable's gradient must match, first and second order."""
import numpy as np
import pytest
import torch
from devcheck import wide

import ember as em

# Every tensor in a graph has one of these shapes, so any two of them broadcast together.
SHAPES = [(3, 4), (3, 1), (1, 4), (4,), ()]


def _unary(rng):
    k = int(rng.integers(12))
    return [
        (lambda x: x.tanh(), torch.tanh),
        (lambda x: x.sin(), torch.sin),
        (lambda x: x.sigmoid(), torch.sigmoid),
        (lambda x: x.silu(), torch.nn.functional.silu),
        (lambda x: x.gelu(), torch.nn.functional.gelu),
        (lambda x: x.erf(), torch.erf),
        (lambda x: (x * 0.5).exp(), lambda x: (x * 0.5).exp()),
        (lambda x: (x.sqr() + 1.0).log(), lambda x: (x.square() + 1.0).log()),
        (lambda x: (x.sqr() + 0.5).sqrt(), lambda x: (x.square() + 0.5).sqrt()),
        (lambda x: x.affine(0.7, -0.2), lambda x: x * 0.7 - 0.2),
        (lambda x: (x.sqr() + 1.0).recip(), lambda x: (x.square() + 1.0).reciprocal()),
        (lambda x: x.neg(), torch.neg),
    ][k]


def _binary(rng):
    k = int(rng.integers(6))
    return [
        (lambda a, b: a + b, lambda a, b: a + b),
        (lambda a, b: a - b, lambda a, b: a - b),
        (lambda a, b: a * b, lambda a, b: a * b),
        (lambda a, b: a / (b.sqr() + 1.0), lambda a, b: a / (b.square() + 1.0)),
        (em.maximum, torch.maximum),
        (em.minimum, torch.minimum),
    ][k]


def _same_shape(rng, shape):
    """Shape-preserving view round trips (they exercise the view rules)."""
    if len(shape) != 2:
        return (lambda x: x.unsqueeze(0).squeeze(0), lambda x: x.unsqueeze(0).squeeze(0))
    k = int(rng.integers(4))
    return [
        (lambda x: x.t().contiguous().t(), lambda x: x.t().contiguous().t()),
        (lambda x: em.cat([x[:, 1:], x[:, :1]], 1).narrow(1, 0, x.shape[1]),
         lambda x: torch.cat([x[:, 1:], x[:, :1]], 1).narrow(1, 0, x.shape[1])),
        (lambda x: x.reshape(-1).reshape(x.shape), lambda x: x.reshape(-1).reshape(x.shape)),
        (lambda x: x[None, ::1][0], lambda x: x[None, ::1][0]),
    ][k]


def build(seed, steps=14):
    """A random graph as a list of (ember fn, torch fn) closures over a shared pool of values."""
    rng = np.random.default_rng(seed)
    leaves = [rng.uniform(-1.5, 1.5, SHAPES[int(rng.integers(len(SHAPES)))]) for _ in range(3)]
    plan = []
    for _ in range(steps):
        kind = rng.choice(["unary", "binary", "binary", "reduce", "view", "matmul", "where"])
        i, j = (int(v) for v in rng.integers(0, 1000, 2))
        if kind == "unary":
            plan.append(("u", _unary(rng), i))
        elif kind == "binary":
            plan.append(("b", _binary(rng), i, j))
        elif kind == "reduce":
            plan.append(("r", rng.choice(["sum", "max", "min", "mean"]), int(rng.integers(2)), i))
        elif kind == "view":
            plan.append(("v", int(rng.integers(1 << 30)), i))
        elif kind == "matmul":
            plan.append(("m", i, j))
        else:
            plan.append(("w", rng.integers(0, 2, (3, 4)).astype(np.uint8), i, j))
    return leaves, plan


def run(leaves, plan, lib, vars_):
    pool = list(vars_)
    for step in plan:
        tag = step[0]
        if tag == "u":
            x = pool[step[2] % len(pool)]
            pool.append(step[1][0 if lib == "em" else 1](x))
        elif tag == "b":
            a, b = pool[step[2] % len(pool)], pool[step[3] % len(pool)]
            pool.append(step[1][0 if lib == "em" else 1](a, b))
        elif tag == "r":
            name, keep, i = step[1], bool(step[2]), step[3]
            x = pool[i % len(pool)]
            if x.ndim != 2:
                continue
            if lib == "em":
                pool.append(getattr(x, name)(1, keepdim=True) if keep else getattr(x, name)(0))
            else:
                f = {"sum": torch.sum, "max": torch.amax, "min": torch.amin, "mean": torch.mean}[name]
                pool.append(f(x, 1, keepdim=True) if keep else f(x, 0))
        elif tag == "v":
            x = pool[step[2] % len(pool)]
            fe, ft = _same_shape(np.random.default_rng(step[1]), tuple(x.shape))
            pool.append(fe(x) if lib == "em" else ft(x))
        elif tag == "m":
            a, b = pool[step[1] % len(pool)], pool[step[2] % len(pool)]
            if tuple(a.shape) == (3, 4) and tuple(b.shape) == (3, 4):
                pool.append((a @ b.t()) @ a * 0.25)  # (3, 3) @ (3, 4)
        else:
            cond, i, j = step[1], step[2], step[3]
            a, b = pool[i % len(pool)], pool[j % len(pool)]
            pool.append(em.where(em.tensor(cond), a, b) if lib == "em" else torch.where(torch.tensor(cond.astype(bool)), a, b))
    out = pool[len(vars_):] or pool
    total = None
    for k, t in enumerate(out):  # every result feeds the loss, so shared subgraphs get several paths
        term = (t * (1.0 + 0.1 * k)).sum()
        total = term if total is None else total + term
    return total


@pytest.mark.parametrize("seed", range(24))
def test_random_graph_matches_torch(seed):
    leaves, plan = build(seed)
    dt = wide()  # float64; float32 on a device without it, against torch in float64 on the same values
    f32 = dt is em.float32
    if f32:
        leaves = [a.astype(np.float32).astype(np.float64) for a in leaves]

    def close(got, want, rtol, atol):
        if f32:  # float32 rounding of a 14-step graph, relative to the result's magnitude
            rtol, atol = 2e-4, 2e-5 * (1.0 + float(np.max(np.abs(want), initial=0.0)))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)

    ev = [em.Var(em.tensor(a, dtype=dt)) for a in leaves]
    tv = [torch.tensor(a, requires_grad=True) for a in leaves]
    le, lt = run(leaves, plan, "em", ev), run(leaves, plan, "torch", tv)
    close(le.item(), lt.item(), 1e-10, 0)
    gs = le.backward(create_graph=True)
    tg = torch.autograd.grad(lt, tv, create_graph=True, allow_unused=True)
    for v, g in zip(ev, tg):
        if g is None:
            assert v not in gs or np.all(gs[v].numpy() == 0)
            continue
        close(gs[v].numpy(), g.detach().numpy(), 1e-9, 1e-11)
    # second order: d/dx of sum(grad^2), through every rule's differentiable form
    e2 = None
    t2 = None
    for v, g in zip(ev, tg):
        if g is None or v not in gs:
            continue
        e2 = (gs[v] * gs[v]).sum() if e2 is None else e2 + (gs[v] * gs[v]).sum()
        t2 = (g * g).sum() if t2 is None else t2 + (g * g).sum()
    if e2 is None or not t2.requires_grad:
        return
    gs2 = e2.backward()
    tg2 = torch.autograd.grad(t2, tv, allow_unused=True)
    for v, g in zip(ev, tg2):
        if g is None:
            continue
        got = gs2.get(v)
        got = np.zeros(v.shape) if got is None else got.numpy()
        close(got, g.numpy(), 1e-8, 1e-10)
