"""Floor division and remainder (`//`, `%`, floor_divide, remainder) against numpy: every dtype, strided
views, broadcasting, scalars on either side, zero divisors and non-finite values, and their gradients."""
import numpy as np
import pytest

import ember as em

from conftest import ALL, VIEWS, f64, make_view, npdt


def reference(a, b, dt, fn):
    """numpy's result in dt; halves are computed in float32 and rounded once, as ember does."""
    if dt in (em.float16, em.bfloat16):
        with np.errstate(all="ignore"):
            r = fn(f64(a).astype(np.float32), f64(b).astype(np.float32))
        return em.tensor(r).to_dtype(dt).numpy()
    with np.errstate(all="ignore"):
        return fn(a, b)


def same(t, ref):
    got = t.numpy()
    assert got.dtype == ref.dtype and got.shape == ref.shape
    # exact (both follow the same rounding rules); as float64 so that bfloat16 NaNs compare as NaNs
    np.testing.assert_array_equal(f64(got), f64(ref))


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", VIEWS)
def test_matches_numpy_on_views(dt, kind, rng):
    a, an = make_view(rng, (5, 7), dt, kind, lo=-40, hi=40)
    b, bn = make_view(rng, (5, 7), dt, "transposed", lo=-6, hi=6)
    same(a // b, reference(an, bn, dt, np.floor_divide))
    same(a % b, reference(an, bn, dt, np.remainder))
    same(a.floor_divide(b), reference(an, bn, dt, np.floor_divide))
    same(a.remainder(b), reference(an, bn, dt, np.remainder))


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_signs_zero_divisors_and_broadcast(dt):
    signed = dt.is_float or dt is em.int64
    vals = [-7, -6, -1, 0, 1, 5, 6, 7, 100] if signed else [0, 1, 5, 6, 7, 100, 255]
    divs = [-3, -1, 0, 1, 2, 3] if signed else [0, 1, 2, 3, 7]
    a = np.array(vals, dtype=npdt(dt)).reshape(-1, 1)
    b = np.array(divs, dtype=npdt(dt)).reshape(1, -1)
    ta, tb = em.tensor(a), em.tensor(b)
    same(ta // tb, reference(a, b, dt, np.floor_divide))  # ints: x // 0 == 0 and x % 0 == 0, as numpy
    same(ta % tb, reference(a, b, dt, np.remainder))


@pytest.mark.parametrize("dt", [em.float32, em.float64])
def test_non_finite_and_signed_zero(dt):
    a = np.array([np.inf, -np.inf, np.nan, 5.0, -5.0, 0.0, -0.0, 1e30, 5.5], dtype=npdt(dt)).reshape(-1, 1)
    b = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 2.0, -2.0, 1e-30], dtype=npdt(dt)).reshape(1, -1)
    fd, rm = em.tensor(a) // em.tensor(b), em.tensor(a) % em.tensor(b)
    for got, ref in ((fd, reference(a, b, dt, np.floor_divide)), (rm, reference(a, b, dt, np.remainder))):
        g = got.numpy()
        np.testing.assert_array_equal(g, ref)
        np.testing.assert_array_equal(np.signbit(g), np.signbit(ref))  # -0.0 where numpy has it


def test_scalars_on_either_side_and_promotion():
    i = em.tensor([7, -7, 8])
    np.testing.assert_array_equal((i // 2).numpy(), np.array([3, -4, 4]))
    np.testing.assert_array_equal((i % 3).numpy(), np.array([1, 2, 2]))
    np.testing.assert_array_equal((20 // i).numpy(), np.array([2, -3, 2]))
    np.testing.assert_array_equal((20 % i).numpy(), np.array([6, -1, 4]))
    f = i // 2.5  # a float scalar promotes an int tensor, as for the other operators
    assert f.dtype == em.float32
    np.testing.assert_array_equal(f.numpy(), np.floor_divide(np.float32([7, -7, 8]), np.float32(2.5)))
    np.testing.assert_array_equal((i % np.array([2.5, 2.5, 2.5])).numpy(),
                                  np.remainder(np.float32([7, -7, 8]), np.float32(2.5)))


def test_gradients():
    rng = np.random.default_rng(5)
    a = em.Var(rng.uniform(-9, 9, (4, 6)))
    b = em.Var(rng.choice([-2.5, -1.5, 1.25, 3.0], size=(1, 6)))  # broadcast divisor
    # away from the jumps of floor(a / b), remainder is smooth: check it with finite differences
    assert em.testing.gradcheck(lambda a, b: a % b, [a, b])
    gs = ((a % b) * 3.0).sum().backward()
    np.testing.assert_allclose(gs[a].numpy(), np.full((4, 6), 3.0))
    np.testing.assert_allclose(gs[b].numpy(), (-3.0 * np.floor(a.numpy() / b.numpy())).sum(0, keepdims=True))
    # floor division is piecewise constant: no gradient reaches its inputs (like floor)
    gs = ((a // b) * 3.0 + a).sum().backward()
    np.testing.assert_allclose(gs[a].numpy(), np.ones((4, 6)))
    assert b not in gs


def test_errors():
    from conftest import expect_error

    expect_error(lambda: em.zeros(2, 3) // em.zeros(3, 2), "floor_divide", em.ShapeError)
    expect_error(lambda: em.zeros(2) % em.zeros(2, dtype=em.int64), "remainder", em.DTypeError)
    expect_error(lambda: em.zeros(2) // "x", "floor_divide", em.DTypeError)
