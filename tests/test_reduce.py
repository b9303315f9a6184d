"""Reductions vs numpy: sum/mean/max/min/argmax/argmin/logsumexp over None, ints, negative dims and tuples,
keepdim, every view kind and dtype, long rows/columns accurate, and the error paths."""
import numpy as np
import pytest

import ember as em

from conftest import ALL, FLOATS, VIEWS, WIDE_NP, expect_error, f64, make_view

SUM_TOL = {"float32": 2e-6, "float16": 2e-3, "bfloat16": 1e-2, "float64": 1e-13}


def dims_cases(nd):
    out = ([None, ()] if nd else [None]) + list(range(-nd, nd))
    if nd >= 2:
        out += [(0, nd - 1), (-1, 0), tuple(range(nd))]
    if nd >= 3:
        out += [(0, 2), (1, -1), (0, 1)]
    return out


def np_axis(dim):
    return None if dim is None else dim


def check_sum(got, a, dim, keepdim, dt):
    x = f64(a)
    if dt.is_float:
        want = x.sum(axis=np_axis(dim), keepdims=keepdim)
        scale = np.abs(x).sum(axis=np_axis(dim), keepdims=keepdim) + 1e-30
        g = f64(got.numpy())
        assert g.shape == np.shape(want)
        err = np.abs(g - want) / scale
        assert np.all(err <= SUM_TOL[dt.name]), (dt, dim, err.max())
    else:
        # integer sums are int64 (as in torch), so a uint8 or uint32 sum does not wrap; int64 wraps
        want = a.sum(axis=np_axis(dim), keepdims=keepdim, dtype=np.int64)
        assert got.dtype == em.int64
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_sum_max_min(dt, rng, device):
    for shape in [(5,), (3, 4), (2, 3, 4), (4, 1, 3), (2, 0, 3), ()]:
        for kind in VIEWS:
            t, a = make_view(rng, shape, dt, kind, device)
            for dim in dims_cases(len(shape)):
                keepdim = bool(rng.integers(0, 2))
                check_sum(t.sum(dim, keepdim=keepdim), a, dim, keepdim, dt)
                reduced = range(a.ndim) if dim is None else np.atleast_1d(dim).astype(int)
                if any(a.shape[d] == 0 for d in reduced):  # max/min over an empty dim has no value
                    expect_error(lambda t=t, dim=dim: t.max(dim), "max", em.ShapeError)
                    continue
                for name in ("max", "min"):
                    got = getattr(t, name)(dim=dim, keepdim=keepdim)
                    want = getattr(np, name)(a, axis=np_axis(dim), keepdims=keepdim)
                    assert got.dtype is dt
                    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_argmax_argmin(dt, rng, device):
    for shape in [(7,), (3, 5), (2, 3, 4)]:
        for kind in VIEWS:
            t, a = make_view(rng, shape, dt, kind, device, lo=-2, hi=2)
            for dim in [None] + list(range(-len(shape), len(shape))):
                for keepdim in (False, True):
                    for name in ("argmax", "argmin"):
                        got = getattr(t, name)(dim, keepdim=keepdim)
                        assert got.dtype is em.int64
                        want = getattr(np, name)(a.astype(np.float64), axis=dim, keepdims=keepdim)
                        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{name} {dim} {kind}")


def test_argmax_ties_and_nan():
    t = em.tensor(np.array([[1, 3, 3, 0], [2, 2, 2, 2]], dtype=np.float32))
    np.testing.assert_array_equal(t.argmax(1).numpy(), [1, 0])  # first of the ties, like numpy
    np.testing.assert_array_equal(t.argmin(1).numpy(), [3, 0])
    n = em.tensor(np.array([1.0, np.nan, 5.0, np.nan], dtype=np.float32))
    assert n.argmax().item() == 1 and n.argmin().item() == 1  # NaN wins, like numpy
    assert np.isnan(n.max().item()) and np.isnan(n.min().item())
    cols = em.tensor(np.array([[1.0, np.nan], [np.nan, 2.0], [3.0, 0.0]], dtype=np.float32))
    assert np.isnan(cols.max(0).numpy()).all() and np.isnan(cols.min(0).numpy()).all()


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_mean_and_logsumexp(dt, rng):
    for shape in [(6,), (3, 4), (2, 3, 5)]:
        for kind in ("contiguous", "transposed", "stepped", "broadcast"):
            t, a = make_view(rng, shape, dt, kind)
            x = f64(a)
            for dim in dims_cases(len(shape)):
                if dim == ():
                    continue
                keepdim = bool(rng.integers(0, 2))
                got = t.mean(dim, keepdim=keepdim)
                assert got.dtype is dt
                want = x.mean(axis=dim, keepdims=keepdim)
                np.testing.assert_allclose(f64(got.numpy()), want, rtol=SUM_TOL[dt.name] * 10, atol=SUM_TOL[dt.name] * 5)
                got = t.logsumexp(dim, keepdim=keepdim)
                m = x.max(axis=dim, keepdims=True)
                want = np.log(np.exp(x - m).sum(axis=dim, keepdims=True)) + m
                if not keepdim:
                    want = want.squeeze(axis=dim) if dim is not None else want.reshape(())
                # each step (sub, exp, sum, log, add) rounds to the dtype: halves get an absolute tolerance
                atol = {"float16": 1e-2, "bfloat16": 4e-2}.get(dt.name, 1e-5)
                np.testing.assert_allclose(f64(got.numpy()), want, rtol=SUM_TOL[dt.name] * 10, atol=atol)
    big = em.tensor(np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], dtype=np.float32))
    lse = big.logsumexp(1).numpy()
    assert abs(lse[0] - (1000 + np.log(2))) < 1e-3 and lse[1] == -np.inf
    expect_error(lambda: em.ones(3, dtype=em.int64).mean(), "mean", em.DTypeError)
    assert np.isnan(em.zeros(0).mean().item())


def test_sum_of_million_element_rows_accurate():
    rng = np.random.default_rng(7)
    x = (rng.random((3, 1_000_000)) + 0.1).astype(np.float32)
    want = x.astype(np.float64).sum(axis=1)
    got = em.tensor(x).sum(1).numpy()
    assert np.max(np.abs(got - want) / want) < 1e-6
    # one long row (split across threads) and the whole tensor
    got1 = em.tensor(x[0]).sum().item()
    assert abs(got1 - want[0]) / want[0] < 1e-6
    assert abs(em.tensor(x).sum().item() - want.sum()) / want.sum() < 1e-6
    # 1e8 + a million 1s: a plain float32 running sum stays at 1e8; ember's lanes move into double every
    # 16 additions, so at most 15 ones are lost (numpy's pairwise sum loses 8, torch's 48)
    y = np.ones(1_000_001, dtype=np.float32)
    y[0] = 1e8
    assert abs(em.tensor(y).sum().item() - (1e8 + 1e6)) <= 16
    # columns: reducing dim 0 of a tall matrix, and a strided (non-contiguous) row
    cols = em.tensor(x.T.copy()).sum(0).numpy()
    assert np.max(np.abs(cols - want) / want) < 1e-6
    st = em.tensor(x)[:, ::2].sum(1).numpy()
    want_st = x[:, ::2].astype(np.float64).sum(1)
    assert np.max(np.abs(st - want_st) / want_st) < 1e-6
    part = x[0, :50_000].astype(np.float16)  # the f16 sum (~3e4) must stay below f16's max, 65504
    h = em.tensor(part).sum().to_dtype(em.float32).item()  # float32 holds every float16 exactly, on any device
    exact = part.astype(np.float64).sum()
    assert abs(h - exact) / exact < 1e-3


def test_long_int_rows_exact():
    # int64 sums/max over a long row are exact (no float64 detour that loses low bits)
    x = np.full(300_000, 2**53 + 1, dtype=np.int64)
    x[17] = 2**60 + 3
    t = em.tensor(x)
    assert t.sum().item() == int(x.sum())
    assert t.max().item() == 2**60 + 3 and t.min().item() == 2**53 + 1
    assert t.argmax().item() == 17
    u = em.tensor(np.full(200_000, 255, dtype=np.uint8))
    assert u.sum().item() == 255 * 200_000  # int64, like torch: no wrap at 256


def test_reduce_errors():
    t = em.zeros(2, 3)
    expect_error(lambda: t.sum(2), "sum", em.IndexOutOfRange)
    expect_error(lambda: t.max(-3), "max", em.IndexOutOfRange)
    expect_error(lambda: t.argmax(5), "argmax", em.IndexOutOfRange)
    expect_error(lambda: t.mean((0, 4)), "mean", em.IndexOutOfRange)
    expect_error(lambda: em.zeros(0, 3).max(0), "max", em.ShapeError)
    expect_error(lambda: em.zeros(0).argmin(), "argmin", em.ShapeError)
    assert em.zeros(0, 3).max(1).shape == (0,)
    np.testing.assert_array_equal(em.zeros(0, 3).sum(0).numpy(), np.zeros(3))
    # a repeated dim is refused, as numpy and torch do (it likely hides a typo for another dim)
    expect_error(lambda: t.sum((0, 0, 1)), "sum", em.EmberValueError)
    expect_error(lambda: t.mean((1, -1)), "mean", em.EmberValueError)
    assert isinstance(em.EmberValueError("x"), ValueError)


def test_counting_a_mask_does_not_wrap():
    # the accuracy pattern: 1000 matches counted from a uint8 comparison mask (a uint8 sum would say 232)
    a = em.tensor(np.arange(1000) % 7)
    assert (a == a).sum().item() == 1000
    assert (a == 3).sum(0).item() == int((np.arange(1000) % 7 == 3).sum())
    big = em.full((3,), 2**31, dtype=em.uint32)
    assert big.sum().dtype == em.int64 and big.sum().item() == 3 * 2**31


@pytest.mark.parametrize("dt", [em.uint8, em.uint32], ids=lambda d: d.name)
def test_integer_sums_into_int64_at_size(dt, rng):
    # The int64 sum of uint8/uint32 adds them where they lie: rows longer than its 2^16-element blocks,
    # many rows and a few long split ones, offset and transposed views (those go through an int64 copy);
    # each compared with numpy's int64 sum.
    hi = 256 if dt is em.uint8 else 2**32
    a = rng.integers(hi - 8, hi, size=(5, 140_001), dtype=np.uint64).astype(np.uint8 if dt is em.uint8 else np.uint32)
    t = em.tensor(a)
    for view, ref in [(t, a), (t[1:, 3:], a[1:, 3:]), (t[:2], a[:2]), (t.t(), a.T)]:
        for dim in (None, -1, 0):
            got = view.sum(dim)
            assert got.dtype is em.int64
            np.testing.assert_array_equal(got.numpy(), ref.sum(axis=dim, dtype=np.int64))


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_max_min_rows_propagate_nan_at_any_position(dt, rng):
    # row lengths around the vector kernels' block sizes; a NaN in the first element, inside the vector
    # blocks or in the tail makes that row's max and min NaN; +-inf elsewhere are ordinary values
    for n in (1, 7, 31, 32, 33, 64, 100, 1000):
        a = rng.standard_normal((6, n))
        a[0, 0] = np.nan
        a[1, n // 2] = np.nan
        a[2, n - 1] = np.nan
        a[3, rng.integers(0, n)] = np.inf
        a[4, rng.integers(0, n)] = -np.inf
        t = em.tensor(a.astype(WIDE_NP)).to_dtype(dt)
        ref = f64(t.numpy())
        for name in ("max", "min"):
            got = f64(getattr(t, name)(-1).numpy())
            np.testing.assert_array_equal(got, getattr(np, name)(ref, axis=-1))
            whole = float(f64(getattr(t[3:], name)().numpy()))
            assert whole == getattr(np, name)(ref[3:])
