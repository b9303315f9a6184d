"""matmul vs numpy: 1-D..n-D, broadcast batch dims, transposed/narrowed/stepped/offset/broadcast operands,
0-size dims, every dtype (f16/bf16 through f32, ints exact), and the error paths."""
import numpy as np
import pytest

import ember as em

from conftest import ALL, FLOATS, WIDE, WIDE_NP, expect_error, f64, make_view, npdt

REL = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 1e-2}

SHAPES = [((4,), (4,)), ((3,), (3, 5)), ((2, 3), (3,)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
          ((2, 3), (6, 3, 4)), ((2, 1, 3, 4), (5, 4, 2)), ((1, 2, 3), (4, 3, 2)), ((3, 1, 7), (3, 7, 1)),
          ((0, 3), (3, 4)), ((2, 0), (0, 3)), ((2, 3), (3, 0)), ((0, 2, 3), (3, 2)), ((1, 1), (1, 1)),
          ((2, 2, 4, 5), (2, 1, 5, 3))]


def check(out, a, b, dt):
    if dt.is_float:
        x, y = f64(a), f64(b)
        want = np.matmul(x, y)
        scale = np.matmul(np.abs(x), np.abs(y)) + 1e-30
        got = f64(out.numpy())
        assert got.shape == want.shape, (got.shape, want.shape)
        err = np.abs(got - want) / scale
        assert err.size == 0 or err.max() <= REL[dt.name], err.max()
    else:
        want = np.matmul(a, b)  # wraps in the dtype like ember
        np.testing.assert_array_equal(out.numpy(), want)
    assert out.dtype is dt


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_matmul_shapes_and_views(dt, rng, device):
    kinds = ["contiguous", "transposed", "narrowed", "stepped", "offset", "broadcast"]
    for sa, sb in SHAPES:
        for i, ka in enumerate(kinds):
            kb = kinds[(i * 5 + 1) % len(kinds)]
            ta, a = make_view(rng, sa, dt, ka, device, lo=-2, hi=2)
            tb, b = make_view(rng, sb, dt, kb, device, lo=-2, hi=2)
            check(ta @ tb, a, b, dt)
        check(ta.matmul(tb), a, b, dt)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_matmul_transposes_use_blas_modes(dt, rng):
    # every combination of row-/column-major operands, with a padded leading dimension
    for ta_t in (False, True):
        for tb_t in (False, True):
            a = rng.uniform(-1, 1, size=(8, 13)).astype(npdt(dt))
            b = rng.uniform(-1, 1, size=(13, 9)).astype(npdt(dt))
            A = em.tensor(a.T.copy()).t() if ta_t else em.tensor(a)
            B = em.tensor(b.T.copy()).t() if tb_t else em.tensor(b)
            check(A @ B, a, b, dt)
            pa = np.zeros((8, 20), dtype=npdt(dt))
            pa[:, 3:16] = a
            check(em.tensor(pa)[:, 3:16] @ B, a, b, dt)


def test_matmul_batched_large_and_shared_rhs(rng):
    a = rng.standard_normal((6, 37, 64)).astype(np.float32)
    b = rng.standard_normal((64, 29)).astype(np.float32)
    check(em.tensor(a) @ em.tensor(b), a, b, em.float32)
    check(em.tensor(a)[:, 1:] @ em.tensor(b), a[:, 1:], b, em.float32)
    check(em.tensor(a)[::2] @ em.tensor(b), a[::2], b, em.float32)
    bb = rng.standard_normal((6, 64, 29)).astype(np.float32)
    check(em.tensor(a) @ em.tensor(bb).transpose(1, 2).contiguous().transpose(1, 2), a, bb, em.float32)
    m = rng.standard_normal((128, 128)).astype(WIDE_NP)
    check(em.tensor(m) @ em.tensor(m).t(), m, m.T, WIDE)


def test_matmul_int_exact(rng):
    a = rng.integers(-1000, 1000, size=(4, 50), dtype=np.int64)
    b = rng.integers(-1000, 1000, size=(50, 3), dtype=np.int64)
    np.testing.assert_array_equal((em.tensor(a) @ em.tensor(b)).numpy(), a @ b)
    u = rng.integers(0, 255, size=(3, 40)).astype(np.uint8)
    np.testing.assert_array_equal((em.tensor(u) @ em.tensor(u.T.copy())).numpy(), u @ u.T)  # wraps mod 256


def test_matmul_errors():
    e = expect_error(lambda: em.zeros(2, 3) @ em.zeros(4, 5), "matmul", em.ShapeError)
    assert "(2, 3)" in str(e) and "(4, 5)" in str(e) and isinstance(e, ValueError)
    expect_error(lambda: em.zeros(3) @ em.zeros(4), "matmul", em.ShapeError)
    expect_error(lambda: em.zeros(2, 2, 3) @ em.zeros(3, 3, 4), "matmul", em.ShapeError)
    expect_error(lambda: em.zeros(2, 3) @ em.zeros(3, 4, dtype=em.float16), "matmul", em.DTypeError)
    expect_error(lambda: em.zeros(()) @ em.zeros(3), "matmul", em.ShapeError)
    expect_error(lambda: em.zeros(2, 3).matmul(em.zeros(3, 4, dtype=em.int64)), "matmul", em.DTypeError)
