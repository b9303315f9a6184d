"""scatter and scatter_reduce against torch on the session's device: values for every dtype, reduction,
include_self, strided/offset operands and repeated indices; gradients (finite differences, torch's tie
and zero rules); every [op] error."""
import numpy as np
import pytest
import torch
from devcheck import gradcheck

import ember as em

from conftest import ALL, FLOATS, VIEWS, WIDE, WIDE_NP, expect_error, f64, make_view, npdt

REDUCES = ["sum", "prod", "mean", "amax", "amin"]


def small(rng, shape, dt):
    """Small integers (exact in every dtype, so sums and products of a few stay exact)."""
    lo = -3 if dt.is_float or dt is em.int64 else 0
    return rng.integers(lo, 4, size=shape).astype(npdt(dt))


def to_torch(a, dt):
    return torch.from_numpy(np.ascontiguousarray(f64(a) if dt.is_float else a.astype(np.int64)))


def check(got, want, dt, rtol=0.0):
    g = got.numpy()
    assert got.dtype == dt and g.shape == tuple(want.shape)
    if dt.is_float:
        np.testing.assert_allclose(f64(g), want.numpy(), rtol=rtol or {"float16": 1e-3, "bfloat16": 8e-3}.get(
            dt.name, 1e-6), atol=0, equal_nan=True)
    else:
        np.testing.assert_array_equal(g.astype(np.int64), want.numpy())


def case(rng, nd, dim):
    """(x shape, index shape): the index no larger than x outside dim, any length along it."""
    xs = tuple(int(s) for s in rng.integers(1, 5, size=nd))
    ish = tuple(int(rng.integers(1, s + 1)) if d != dim else int(rng.integers(1, 7)) for d, s in enumerate(xs))
    return xs, ish


@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_every_dtype_matches_torch(device, rng, reduce):
    for dt in ALL:
        for nd in (1, 2, 3):
            for dim in range(-nd, nd):
                xs, ish = case(rng, nd, dim % nd)
                x, idx, src = small(rng, xs, dt), rng.integers(0, xs[dim], size=ish), small(rng, ish, dt)
                for include_self in (True, False):
                    got = em.scatter_reduce(em.tensor(x, device=device), dim, em.tensor(idx, device=device),
                                            em.tensor(src, device=device), reduce, include_self=include_self)
                    want = to_torch(x, dt).scatter_reduce(dim, torch.from_numpy(idx), to_torch(src, dt), reduce,
                                                          include_self=include_self)
                    if not dt.is_float and reduce == "mean":  # torch floors integer means
                        want = want.to(torch.int64)
                    check(got, want, dt)


@pytest.mark.parametrize("kind", VIEWS)
def test_scatter_reduce_strided_operands(device, rng, kind):
    # x, index and src each through a strided, offset or broadcast layout
    for dt in (em.float32, em.int64):
        x, xr = make_view(rng, (4, 5, 6), dt, kind, device=device)
        idx_np = rng.integers(-4, 4, size=(4, 5, 6))  # negative entries count from the end
        idx = em.tensor(idx_np.transpose(2, 1, 0).copy(), device=device).permute(2, 1, 0)
        src, sr = make_view(rng, (4, 5, 6), dt, "offset" if kind == "contiguous" else kind, device=device)
        for reduce in REDUCES:
            got = x.scatter_reduce(0, idx, src, reduce)
            want = to_torch(np.array(xr), dt).scatter_reduce(0, torch.from_numpy(idx_np % 4), to_torch(np.array(sr), dt),
                                                              reduce)
            if not dt.is_float and reduce == "mean":
                want = want.to(torch.int64)
            check(got, want, dt, rtol=1e-5)


def test_scatter_every_dtype_repeated_indices_keep_the_last(device, rng):
    for dt in ALL:
        x, src = small(rng, (5, 7), dt), small(rng, (6, 7), dt)
        idx = rng.integers(0, 2, size=(6, 7))  # every column writes its rows 0/1 several times
        got = em.scatter(em.tensor(x, device=device), 0, em.tensor(idx, device=device), em.tensor(src, device=device))
        want = x.copy()
        for i in range(6):  # the last write in index order wins
            for j in range(7):
                want[idx[i, j], j] = src[i, j]
        np.testing.assert_array_equal(got.numpy(), want)
        # torch agrees where indices do not repeat
        perm = np.stack([rng.permutation(5)[:4] for _ in range(7)], 1)
        t = em.tensor(x, device=device).scatter(0, em.tensor(perm, device=device), em.tensor(src[:4], device=device))
        check(t, to_torch(x, dt).scatter(0, torch.from_numpy(perm), to_torch(src[:4], dt)), dt)


def test_scatter_value_and_larger_src(device, rng):
    x = rng.standard_normal((3, 6)).astype(np.float32)
    idx = np.array([[0, 5], [2, 2], [4, 1]])
    got = em.tensor(x, device=device).scatter(1, em.tensor(idx, device=device), value=-2.5)
    want = torch.from_numpy(x).scatter(1, torch.from_numpy(idx), -2.5)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    # a number as src is the same; a src larger than the index is read in its leading block
    np.testing.assert_array_equal(em.scatter(em.tensor(x, device=device), 1, em.tensor(idx, device=device), -2.5).numpy(),
                                  want.numpy())
    big = rng.standard_normal((4, 9)).astype(np.float32)
    got = em.tensor(x, device=device).scatter_reduce(1, em.tensor(idx, device=device), em.tensor(big, device=device),
                                                     "sum")
    want = torch.from_numpy(x).scatter_reduce(1, torch.from_numpy(idx), torch.from_numpy(big), "sum")
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_scatter_reduce_nan_and_empty_index(device):
    for dt in FLOATS:
        x = em.tensor([1.0, 2.0, 3.0], dtype=dt, device=device)
        src = em.tensor([float("nan"), 5.0, 0.5], dtype=dt, device=device)
        idx = em.tensor([0, 1, 1], device=device)
        for reduce in ("amax", "amin"):
            got = f64(x.scatter_reduce(0, idx, src, reduce).numpy())
            want = torch.tensor([1.0, 2.0, 3.0]).scatter_reduce(0, torch.tensor([0, 1, 1]),
                                                                torch.tensor([float("nan"), 5.0, 0.5]), reduce).numpy()
            np.testing.assert_array_equal(got, want)
        empty = em.zeros((0,), dtype=em.int64, device=device)
        np.testing.assert_array_equal(f64(x.scatter_reduce(0, empty, em.zeros((0,), dtype=dt, device=device),
                                                           "prod", include_self=False).numpy()), [1.0, 2.0, 3.0])


def test_scatter_reduce_large_lines_are_deterministic(device, rng):
    # many rows meet in few outputs: the sums go in index order, equal to a float64 reference closely
    # and identical run to run
    x = rng.standard_normal((8, 4096)).astype(np.float32)
    idx = rng.integers(0, 8, size=(64, 4096))
    src = rng.standard_normal((64, 4096)).astype(np.float32)
    xt, it, st = em.tensor(x, device=device), em.tensor(idx, device=device), em.tensor(src, device=device)
    a = xt.scatter_reduce(0, it, st, "sum").numpy()
    np.testing.assert_array_equal(a, xt.scatter_reduce(0, it, st, "sum").numpy())
    want = torch.from_numpy(x.astype(np.float64)).scatter_reduce(0, torch.from_numpy(idx),
                                                                 torch.from_numpy(src.astype(np.float64)), "sum")
    np.testing.assert_allclose(a, want.numpy(), rtol=1e-4, atol=1e-4)
    m = xt.scatter_reduce(1, em.tensor(idx[:8] % 16, device=device), st[:8], "amax", include_self=False).numpy()
    tm = torch.from_numpy(x).scatter_reduce(1, torch.from_numpy(idx[:8] % 16), torch.from_numpy(src[:8]), "amax",
                                            include_self=False)
    np.testing.assert_array_equal(m, tm.numpy())


@pytest.mark.cpu_only  # the CPU thread pool
def test_scatter_reduce_bit_identical_on_any_thread_count(rng):
    x = rng.standard_normal((16, 2048)).astype(np.float32)
    idx = em.tensor(rng.integers(0, 16, size=(256, 2048)))
    src = em.tensor(rng.standard_normal((256, 2048)).astype(np.float32))
    n = em.get_num_threads()
    try:
        outs = []
        for k in (1, 3, n):
            em.set_num_threads(k)
            outs.append([em.tensor(x).scatter_reduce(0, idx, src, r).numpy() for r in ("sum", "mean", "prod")])
    finally:
        em.set_num_threads(n)
    for o in outs[1:]:
        for a, b in zip(outs[0], o):
            np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------- gradients
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_gradcheck(device, rng, reduce, include_self):
    # distinct values (no ties), away from zero: finite differences are exact there
    x = em.tensor(rng.uniform(0.5, 2.0, (4, 5)) * rng.choice([-1, 1], (4, 5)), dtype=WIDE)
    src = em.tensor(rng.uniform(0.5, 2.0, (3, 5)), dtype=WIDE)
    idx = em.tensor(rng.integers(0, 4, size=(3, 5)))
    # (the index is an input too, so that devcheck moves it with the others to each device it runs on)
    assert gradcheck(lambda a, b, i: em.scatter_reduce(a, 0, i, b, reduce, include_self=include_self), [x, src, idx])
    assert gradcheck(lambda a, b, i: a.scatter_reduce(-1, i.t()[:4, :2], b.t()[:4, :2], reduce,
                                                      include_self=include_self).sqr(), [x, src, idx])


def test_scatter_gradcheck_and_double_backward(device, rng):
    x = em.tensor(rng.standard_normal((4, 5)), dtype=WIDE)
    src = em.tensor(rng.standard_normal((2, 5)), dtype=WIDE)
    # distinct indices per column: with repeats torch (and ember) give every src element the gathered
    # gradient, which finite differences (only the last write counts) would not
    idx = em.tensor(np.stack([rng.permutation(4)[:2] for _ in range(5)], 1))
    assert gradcheck(lambda a, b, i: em.scatter(a, 0, i, b) * a, [x, src, idx])
    assert gradcheck(lambda a, i: em.scatter(a, 1, i[:, :3], value=3.0).exp(), [x, idx])
    # second order through the rules (they are ember ops)
    a, b = em.Var(x), em.Var(src)
    g = em.scatter_reduce(a, 0, idx, b, "prod").sum().backward(create_graph=True)
    gg = (g[a].sum() + g[b].sum()).backward()
    ta = torch.tensor(x.numpy(), requires_grad=True)
    tb = torch.tensor(src.numpy(), requires_grad=True)
    tg = torch.autograd.grad(ta.scatter_reduce(0, torch.from_numpy(idx.numpy()), tb, "prod").sum(), [ta, tb],
                             create_graph=True)
    ga, gb = torch.autograd.grad(tg[0].sum() + tg[1].sum(), [ta, tb])
    np.testing.assert_allclose(gg[a].numpy(), ga.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gg[b].numpy(), gb.numpy(), rtol=1e-4, atol=1e-5)


def torch_grads(x, idx, src, reduce, include_self, dim=0):
    ta = torch.tensor(f64(x), requires_grad=True)
    tb = torch.tensor(f64(src), requires_grad=True)
    out = ta.scatter_reduce(dim, torch.from_numpy(idx), tb, reduce, include_self=include_self)
    w = torch.arange(out.numel(), dtype=torch.float64).reshape(out.shape) + 1
    return torch.autograd.grad((out * w).sum(), [ta, tb])


def ember_grads(x, idx, src, reduce, include_self, dt, dim=0):
    a, b = em.Var(em.tensor(x, dtype=dt)), em.Var(em.tensor(src, dtype=dt))
    out = a.scatter_reduce(dim, em.tensor(idx), b, reduce, include_self=include_self)
    w = em.arange(out.numel(), dtype=dt).reshape(*out.shape) + 1
    g = (out * w).sum().backward()
    return g[a].numpy(), g[b].numpy()


@pytest.mark.parametrize("include_self", [True, False])
def test_amax_amin_ties_split_as_torch(device, include_self):
    # ties among src elements and between x and src: the gradient is shared evenly, as torch shares it
    x = np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 2.0]], WIDE_NP)
    src = np.array([[3.0, 4.0, 2.0], [3.0, 4.0, 2.0], [1.0, 4.0, 7.0]], WIDE_NP)
    idx = np.array([[0, 1, 0], [0, 1, 0], [1, 1, 1]])
    for reduce in ("amax", "amin"):
        ga, gb = ember_grads(x, idx, src, reduce, include_self, WIDE)
        ta, tb = torch_grads(x, idx, src, reduce, include_self)
        np.testing.assert_allclose(ga, ta.numpy(), rtol=1e-6)
        np.testing.assert_allclose(gb, tb.numpy(), rtol=1e-6)


@pytest.mark.parametrize("include_self", [True, False])
def test_prod_gradient_with_zeros_as_torch(device, include_self):
    # zeros in x, one zero and two zeros meeting at a position in src
    x = np.array([[0.0, 2.0, 3.0, 1.5], [4.0, 0.0, -1.0, 2.0]], WIDE_NP)
    src = np.array([[2.0, 0.0, 0.0, 3.0], [0.0, 3.0, 0.0, 0.5], [5.0, 0.0, 2.0, 0.0]], WIDE_NP)
    idx = np.array([[0, 0, 1, 1], [0, 1, 1, 1], [1, 0, 0, 1]])
    ga, gb = ember_grads(x, idx, src, "prod", include_self, WIDE)
    ta, tb = torch_grads(x, idx, src, "prod", include_self)
    np.testing.assert_allclose(ga, ta.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gb, tb.numpy(), rtol=1e-6)


def test_mean_and_scatter_gradients_as_torch(device, rng):
    x = rng.standard_normal((4, 6)).astype(WIDE_NP)
    src = rng.standard_normal((5, 6)).astype(WIDE_NP)
    idx = rng.integers(0, 2, size=(5, 6))
    for include_self in (True, False):
        ga, gb = ember_grads(x, idx, src, "mean", include_self, WIDE)
        ta, tb = torch_grads(x, idx, src, "mean", include_self)
        np.testing.assert_allclose(ga, ta.numpy(), rtol=1e-6)
        np.testing.assert_allclose(gb, tb.numpy(), rtol=1e-6)
    a, b = em.Var(em.tensor(x)), em.Var(em.tensor(src))
    g = (a.scatter(0, em.tensor(idx), b) * em.tensor(np.arange(24.0).reshape(4, 6), dtype=WIDE)).sum().backward()
    ta, tb = torch.tensor(f64(x), requires_grad=True), torch.tensor(f64(src), requires_grad=True)
    (ta.scatter(0, torch.from_numpy(idx), tb) * torch.arange(24.0, dtype=torch.float64).reshape(4, 6)).sum().backward()
    np.testing.assert_allclose(g[a].numpy(), ta.grad.numpy())
    np.testing.assert_allclose(g[b].numpy(), tb.grad.numpy())


# --------------------------------------------------------------------- errors
def test_scatter_errors(device):
    x = em.zeros((3, 4), device=device)
    idx = em.tensor([[0, 1], [2, 0]], device=device)
    src = em.ones((2, 2), device=device)
    expect_error(lambda: x.scatter_reduce(0, idx, src, "max"), "scatter_reduce", em.EmberValueError)
    expect_error(lambda: x.scatter_reduce(0, idx, src, None), "scatter_reduce", em.EmberValueError)
    expect_error(lambda: x.scatter_reduce(0, idx, 1.0, "sum"), "scatter_reduce", em.EmberTypeError)
    expect_error(lambda: x.scatter_reduce(0, idx, src, "sum", include_self=2), "scatter_reduce", em.EmberValueError)
    expect_error(lambda: x.scatter(0, idx), "scatter", em.EmberValueError)
    expect_error(lambda: x.scatter(0, idx, src, value=1.0), "scatter", em.EmberValueError)
    expect_error(lambda: x.scatter(0, idx, "a"), "scatter", em.EmberTypeError)
    expect_error(lambda: em.scatter([1.0], 0, idx, src), "scatter", em.EmberTypeError)
    expect_error(lambda: x.scatter(2, idx, src), "scatter", em.IndexOutOfRange)
    expect_error(lambda: x.scatter_reduce(-3, idx, src, "sum"), "scatter_reduce", em.IndexOutOfRange)
    expect_error(lambda: x.scatter(0, idx.to_dtype(em.float32), src), "scatter", em.DTypeError)
    expect_error(lambda: x.scatter(0, idx, src.to_dtype(em.int64)), "scatter", em.DTypeError)
    expect_error(lambda: x.scatter(0, em.tensor([[3, 0]], device=device), src[:1]), "scatter", em.IndexOutOfRange)
    expect_error(lambda: x.scatter_reduce(0, em.tensor([[-4, 0]], device=device), src[:1], "amax"), "scatter_reduce",
                 em.IndexOutOfRange)
    expect_error(lambda: x.scatter(0, em.tensor([0, 1], device=device), src[0]), "scatter", em.ShapeError)
    expect_error(lambda: x.scatter(0, em.zeros((4, 5), dtype=em.int64, device=device), em.ones((4, 5), device=device)),
                 "scatter", em.ShapeError)
    expect_error(lambda: x.scatter_reduce(1, idx, src[:, :1], "sum"), "scatter_reduce", em.ShapeError)
    expect_error(lambda: em.zeros((), device=device).scatter(0, em.zeros((), dtype=em.int64, device=device), 1.0),
                 "scatter", em.ShapeError)
    # a bad index leaves nothing half-written: the input is unchanged and the error names the index
    e = expect_error(lambda: x.scatter(1, em.tensor([[0, 9]], device=device), src[:1]), "scatter", em.IndexOutOfRange)
    assert "9" in str(e)
    np.testing.assert_array_equal(x.numpy(), np.zeros((3, 4), np.float32))


def test_scatter_device_mismatch(device, monkeypatch):
    if em.metal.backend() != "apple":
        monkeypatch.setenv("EMBER_METAL", "emulate")  # a second device on any machine
    other = "metal" if device.type == "cpu" else "cpu"
    x = em.zeros((3, 4), device=device)
    expect_error(lambda: x.scatter(0, em.tensor([[0]], device=device), em.ones((1, 1), device=other)), "scatter",
                 em.DeviceError)
    expect_error(lambda: x.scatter_reduce(0, em.tensor([[0]], device=other), em.ones((1, 1), device=device), "sum"),
                 "scatter_reduce", em.DeviceError)


def test_scatter_reduce_saved_values_modified_in_place_raise(device):
    # amax/amin/prod read x, src and their result in backward: an in-place write to any raises there
    for reduce in ("amax", "amin", "prod"):
        x, src = em.Var([1.0, 5.0, 3.0]), em.Var([4.0, 2.0])
        out = x.scatter_reduce(0, em.tensor([0, 0]), src, reduce)
        with em.no_grad():
            out[1] = 9.0
        e = expect_error(lambda out=out: out.sum().backward(), "backward", em.InplaceModifiedError)
        assert f"scatter_{reduce}" in str(e)
    # sum reads none of them: the write is harmless there
    x, src = em.Var([1.0, 5.0, 3.0]), em.Var([4.0, 2.0])
    out = x.scatter_reduce(0, em.tensor([0, 0]), src, "sum")
    with em.no_grad():
        out[1] = 9.0
    np.testing.assert_array_equal(out.sum().backward()[src].numpy(), [1.0, 1.0])
