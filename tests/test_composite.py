"""The small ops built from existing kernels (issue 18 §4): chunk split unbind tril triu eye linspace
masked_fill var std any all isnan isinf isfinite isclose allclose repeat tile flip one_hot Dropout,
against torch, with their gradients and their errors."""
import numpy as np
import pytest
import torch
from devcheck import gradcheck

import ember as em

from conftest import TOL, WIDE, WIDE_NP, expect_error, make_view

RTOL = TOL[WIDE.name][0]  # results in WIDE against float64 torch references


def T(a):
    return torch.from_numpy(np.ascontiguousarray(a))


@pytest.mark.parametrize("kind", ["contiguous", "transposed", "offset"])
def test_chunk_split_unbind_match_torch(rng, kind):
    t, a = make_view(rng, (5, 7), WIDE, kind)
    r = T(a)
    for dim in (0, 1, -1):
        for n in (1, 2, 3, 7, 9):
            assert [c.shape for c in t.chunk(n, dim)] == [tuple(c.shape) for c in r.chunk(n, dim)]
            for c, rc in zip(t.chunk(n, dim), r.chunk(n, dim)):
                np.testing.assert_array_equal(c.numpy(), rc.numpy())
                assert c.storage.same_buffer(t.storage)  # views
            for c, rc in zip(t.split(n, dim), r.split(n, dim)):
                np.testing.assert_array_equal(c.numpy(), rc.numpy())
        for c, rc in zip(t.unbind(dim), r.unbind(dim)):
            np.testing.assert_array_equal(c.numpy(), rc.numpy())
    for c, rc in zip(t.split([2, 0, 3], 0), r.split([2, 0, 3], 0)):
        np.testing.assert_array_equal(c.numpy(), rc.numpy())
    for c, rc in zip(em.chunk(t, 2, 1), torch.chunk(r, 2, 1)):
        np.testing.assert_array_equal(c.numpy(), rc.numpy())


def test_split_gradients():
    x = em.Var(np.arange(12, dtype=WIDE_NP).reshape(3, 4))
    a, b = x.split([1, 3], 1)
    c = x.unbind(0)[2]
    gs = (a * 2.0 + b.sum(1, keepdim=True) + c.sum()).sum().backward()
    gradcheck(lambda v: v.chunk(3, 1)[1] * v.unbind(1)[0].reshape(3, 1), [em.tensor(np.ones((3, 4), WIDE_NP))])
    assert gs[x].shape == (3, 4)


def test_split_errors():
    t = em.zeros(4, 3)
    expect_error(lambda: t.chunk(0), "chunk", em.EmberValueError)
    expect_error(lambda: t.split([1, 2], 0), "split", em.EmberValueError)
    expect_error(lambda: t.split(0, 0), "split", em.EmberValueError)
    expect_error(lambda: t.unbind(2), "unbind", em.IndexOutOfRange)
    expect_error(lambda: em.zeros(()).unbind(0), "unbind")


@pytest.mark.parametrize("diag", [-2, -1, 0, 1, 3])
@pytest.mark.parametrize("dtype", [em.float32, em.int64, em.uint8])
def test_tril_triu_match_torch(rng, diag, dtype):
    t, a = make_view(rng, (2, 4, 5), dtype, "transposed")
    r = T(a)
    np.testing.assert_array_equal(t.tril(diag).numpy(), r.tril(diag).numpy())
    np.testing.assert_array_equal(t.triu(diag).numpy(), r.triu(diag).numpy())
    np.testing.assert_array_equal(em.tril(t, diag).numpy(), torch.tril(r, diag).numpy())
    assert t.tril(diag).dtype is dtype


def test_tril_triu_gradients_and_errors(rng):
    gradcheck(lambda x: x.tril(1) * 3.0 + x.triu(-1), [em.tensor(rng.standard_normal((3, 4)).astype(WIDE_NP))])
    expect_error(lambda: em.zeros(3).tril(), "tril", em.ShapeError)
    expect_error(lambda: em.zeros(3, 3).triu(0.5), "triu", em.EmberTypeError)


def test_eye_and_linspace_match_torch():
    for n, m in ((3, None), (2, 5), (4, 1), (0, 3)):
        np.testing.assert_array_equal(em.eye(n, m).numpy(), torch.eye(n, m if m is not None else n).numpy())
    assert em.eye(2, dtype=em.int64).dtype is em.int64
    for args in ((0, 1, 5), (-3.5, 7.25, 11), (2, 2, 3), (1, -1, 2), (0, 1, 1), (0, 1, 0), (0, 10, 101)):
        tol = 1e-15 if WIDE is em.float64 else TOL[WIDE.name][0]  # float32: the float64 values rounded once
        np.testing.assert_allclose(em.linspace(*args, dtype=WIDE).numpy(),
                                   torch.linspace(*args, dtype=torch.float64).numpy(), rtol=tol, atol=tol)
        # float32: ember rounds the float64 values once, torch steps in float32 (a last-bit difference)
        np.testing.assert_allclose(em.linspace(*args).numpy(), torch.linspace(*args).numpy(), rtol=2e-7, atol=1e-7)
    assert em.linspace(0, 1, 7).numpy()[-1] == 1.0
    expect_error(lambda: em.eye(-1), "eye", em.ShapeError)
    expect_error(lambda: em.linspace(0, 1, -2), "linspace", em.EmberValueError)
    expect_error(lambda: em.linspace(0, float("inf"), 3), "linspace", em.EmberValueError)


def test_masked_fill_matches_torch(rng):
    a = rng.standard_normal((3, 4)).astype(WIDE_NP)
    t, r = em.tensor(a), T(a)
    m = a > 0.3
    np.testing.assert_array_equal(t.masked_fill(t.gt(0.3), -1.0).numpy(), r.masked_fill(T(m), -1.0).numpy())
    np.testing.assert_array_equal(t.masked_fill(m[0], 5).numpy(), r.masked_fill(T(m[0]), 5).numpy())  # broadcast
    i = em.tensor([1, 2, 3])
    assert i.masked_fill(i.gt(1), 2.7).dtype is em.int64  # the dtype stays, as in torch
    np.testing.assert_array_equal(i.masked_fill(i.gt(1), 2.7).numpy(), torch.tensor([1, 2, 3]).masked_fill(
        torch.tensor([False, True, True]), 2.7).numpy())
    x = em.Var(a)
    gs = x.masked_fill(x.gt(0.3), 0.0).sum().backward()
    np.testing.assert_array_equal(gs[x].numpy(), (~m).astype(np.float64))
    expect_error(lambda: t.masked_fill(em.ones(3, 4), 1.0), "masked_fill", em.DTypeError)
    expect_error(lambda: t.masked_fill(em.ones(4, 4, dtype=em.uint8), 1.0), "masked_fill", em.ShapeError)
    expect_error(lambda: t.masked_fill(t.gt(0), "x"), "masked_fill", em.EmberTypeError)


@pytest.mark.parametrize("dim", [None, 0, 1, (0, 2), -1])
@pytest.mark.parametrize("correction", [0, 1, 2])
def test_var_std_match_torch(rng, dim, correction):
    t, a = make_view(rng, (4, 5, 3), WIDE, "transposed")
    r = T(a).double()
    for name in ("var", "std"):
        for keepdim in (False, True):
            ours = getattr(t, name)(dim, keepdim=keepdim, correction=correction)
            ref = getattr(r, name)(dim, keepdim=keepdim, correction=correction)
            np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=RTOL)
    np.testing.assert_allclose(t.var(dim, True).numpy(), r.var(dim, True).numpy(), rtol=RTOL)
    np.testing.assert_allclose(em.std(t, dim, False).numpy(), torch.std(r, dim, False).numpy(), rtol=RTOL)


def test_var_std_gradients_and_errors(rng):
    gradcheck(lambda x: (x.var(1), x.std(0, correction=0)), [em.tensor(rng.standard_normal((3, 4)).astype(WIDE_NP))])
    assert np.isnan(em.tensor([1.0]).var().item())
    with pytest.warns(UserWarning):  # torch warns about the degrees of freedom, and gives nan too
        assert np.isnan(torch.tensor([1.0]).var().item())
    expect_error(lambda: em.tensor([1, 2]).var(), "var", em.DTypeError)
    expect_error(lambda: em.zeros(3).var(unbiased=True, correction=1), "var", em.EmberValueError)
    assert em.zeros(3, dtype=em.float16).std().dtype is em.float16


@pytest.mark.parametrize("dtype", [em.float32, em.int64, em.uint8, em.int32, em.bool])
def test_any_all_match_torch(rng, dtype):
    a = (rng.integers(0, 3, (3, 4, 2)) * (rng.random((3, 4, 2)) < 0.3)).astype(WIDE_NP)
    t, r = em.tensor(a).to_dtype(dtype), T(a).bool()
    for dim in (None, 0, 2, (0, 1)):
        for name in ("any", "all"):
            ours = getattr(t, name)(dim) if dim is not None else getattr(t, name)()
            ref = getattr(r, name)(dim) if dim is not None else getattr(r, name)()
            assert ours.dtype is em.bool
            np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    assert em.tensor([float("nan")]).all().item() == 1 and em.zeros(0).all().item() == 1
    assert em.zeros(0).any().item() == 0 and em.any(np.array([0, 2])).item() == 1


def test_isnan_isinf_isfinite_isclose_match_torch():
    v = np.array([0.0, -1.5, np.inf, -np.inf, np.nan, 1e30, 1.0 + 1e-6], dtype=np.float32)
    w = np.array([1e-9, -1.5, np.inf, np.inf, np.nan, 1.00001e30, 1.0], dtype=np.float32)
    t, r = em.tensor(v), torch.tensor(v)
    for name in ("isnan", "isinf", "isfinite"):
        np.testing.assert_array_equal(getattr(t, name)().numpy(), getattr(r, name)().numpy().astype(np.uint8))
        np.testing.assert_array_equal(getattr(em, name)(v).numpy(), getattr(torch, name)(r).numpy().astype(np.uint8))
    for name in ("isnan", "isinf", "isfinite"):
        i = em.tensor([1, 2])
        np.testing.assert_array_equal(getattr(i, name)().numpy(), getattr(torch.tensor([1, 2]), name)().numpy())
    for kw in ({}, {"equal_nan": True}, {"rtol": 0.0, "atol": 1e-8}, {"rtol": 1e-3}):
        np.testing.assert_array_equal(em.isclose(t, w, **kw).numpy(),
                                      torch.isclose(r, torch.tensor(w), **kw).numpy().astype(np.uint8))
        assert em.allclose(t, w, **kw) == torch.allclose(r, torch.tensor(w), **kw)
    assert em.allclose(em.tensor([1, 2]), em.tensor([1, 2])) and not em.tensor([1, 2]).allclose([1, 3])
    assert em.isclose(em.tensor([1, 250], dtype=em.uint8), em.tensor([3, 250], dtype=em.uint8),
                      atol=1.0).tolist() == [0, 1]  # ints compare in float64, no wraparound
    expect_error(lambda: em.isclose(t, w, rtol=-1.0), "isclose", em.EmberValueError)


@pytest.mark.parametrize("reps", [(2, 3), (1, 1), (2, 1, 3), (0, 2), (3, 1, 1, 2)])
def test_repeat_tile_match_torch(rng, reps):
    t, a = make_view(rng, (2, 3), em.float32, "transposed")
    r = T(a)
    np.testing.assert_array_equal(t.repeat(*reps).numpy(), r.repeat(*reps).numpy())
    np.testing.assert_array_equal(t.repeat(reps).numpy(), r.repeat(reps).numpy())
    np.testing.assert_array_equal(t.tile(reps[-1:]).numpy(), r.tile(reps[-1:]).numpy())
    np.testing.assert_array_equal(em.tile(t, reps).numpy(), torch.tile(r, reps).numpy())


def test_repeat_gradient_and_errors(rng):
    gradcheck(lambda x: x.repeat(2, 1, 3) * 1.5, [em.tensor(rng.standard_normal((2, 3)).astype(WIDE_NP))])
    expect_error(lambda: em.zeros(2, 3).repeat(2), "repeat", em.ShapeError)
    expect_error(lambda: em.zeros(2, 3).repeat(2, -1), "repeat", em.EmberValueError)


@pytest.mark.parametrize("dims", [(0,), (1,), (-1,), (0, 2), (0, 1, 2)], ids=str)
def test_flip_matches_torch(rng, dims):
    t, a = make_view(rng, (3, 4, 2), WIDE, "offset")
    np.testing.assert_array_equal(t.flip(dims).numpy(), T(a).flip(dims).numpy())
    np.testing.assert_array_equal(em.flip(t, dims).numpy(), torch.flip(T(a), dims).numpy())
    gradcheck(lambda x: x.flip(dims) * em.tensor(np.arange(24, dtype=WIDE_NP).reshape(3, 4, 2)), [t])
    f = t.flip(dims)
    assert not f.storage.same_buffer(t.storage)  # a copy, as torch's flip
    expect_error(lambda: t.flip(3), "flip", em.IndexOutOfRange)
    expect_error(lambda: t.flip(0, 0), "flip", em.EmberValueError)


def test_one_hot_matches_torch():
    ids = np.array([[0, 3], [2, 1]])
    np.testing.assert_array_equal(em.nn.functional.one_hot(em.tensor(ids)).numpy(),
                                  torch.nn.functional.one_hot(T(ids)).numpy())
    got = em.nn.functional.one_hot(ids, 6)
    assert got.dtype is em.int64 and got.shape == (2, 2, 6)
    np.testing.assert_array_equal(got.numpy(), torch.nn.functional.one_hot(T(ids), 6).numpy())
    expect_error(lambda: em.nn.functional.one_hot(em.tensor([0, 4]), 3), "one_hot", em.IndexOutOfRange)
    expect_error(lambda: em.nn.functional.one_hot(em.tensor([-1, 0]), 3), "one_hot", em.IndexOutOfRange)
    expect_error(lambda: em.nn.functional.one_hot(em.tensor([0.0]), 3), "one_hot", em.DTypeError)


def test_dropout_modes_seed_and_statistics():
    d = em.nn.Dropout(0.25)
    x = em.ones(200, 100)
    em.manual_seed(7)
    a = d(x)
    em.manual_seed(7)
    b = d(x)
    np.testing.assert_array_equal(a.numpy(), b.numpy())  # a seeded mask
    vals = np.unique(a.numpy())
    np.testing.assert_allclose(vals, [0.0, 1.0 / 0.75], rtol=1e-6)
    kept = (a.numpy() != 0).mean()
    assert abs(kept - 0.75) < 0.01  # 20000 draws: 4.4 standard deviations of slack
    d.eval()
    assert d(x) is x
    d.train()
    v = em.Var(np.ones((4, 5), WIDE_NP))
    em.manual_seed(3)
    out = d(v)
    gs = out.sum().backward()
    np.testing.assert_array_equal(gs[v].numpy(), out.numpy())  # the gradient is the scaled mask
    assert em.nn.functional.dropout(x, 0.5, training=False) is x
    assert em.nn.functional.dropout(x, 1.0).numpy().sum() == 0
    expect_error(lambda: em.nn.Dropout(1.5), "Dropout", em.EmberValueError)
    expect_error(lambda: em.nn.functional.dropout(em.tensor([1, 2]), 0.5), "dropout", em.DTypeError)
    m = em.nn.Sequential(em.nn.Linear(3, 3), em.nn.Dropout(0.5))
    m.eval()
    assert not m[1].training
