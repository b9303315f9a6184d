"""Floor division and remainder (`//`, `%`, floor_divide, remainder) against numpy: every dtype, strided
views, broadcasting, scalars on either side, zero divisors and non-finite values, and their gradients."""
import numpy as np
import pytest
from devcheck import gradcheck

import ember as em

from conftest import ALL, FLOATS, VIEWS, WIDE_NP, f64, make_view, npdt


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
    if not dt.is_float:  # an integer x // 0 raises (test_errors.py): nonzero divisors, laid out the same
        bn = np.where(bn == 0, np.ones_like(bn), bn)
        b = em.tensor(np.ascontiguousarray(bn.T)).permute(1, 0)
    same(a // b, reference(an, bn, dt, np.floor_divide))
    same(a % b, reference(an, bn, dt, np.remainder))
    same(a.floor_divide(b), reference(an, bn, dt, np.floor_divide))
    same(a.remainder(b), reference(an, bn, dt, np.remainder))


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_signs_zero_divisors_and_broadcast(dt):
    signed = dt.is_float or dt is em.int64
    vals = [-7, -6, -1, 0, 1, 5, 6, 7, 100] if signed else [0, 1, 5, 6, 7, 100, 255]
    divs = [-3, -1, 0, 1, 2, 3] if signed else [0, 1, 2, 3, 7]
    if not dt.is_float:  # an integer x // 0 and x % 0 raise, as in torch (numpy gives 0)
        ta = em.tensor(np.array(vals, dtype=npdt(dt)))
        for bad in (0, em.tensor(np.array(divs, dtype=npdt(dt))).reshape(-1, 1)):
            with pytest.raises(em.EmberValueError, match="division by zero"):
                ta // bad
            with pytest.raises(em.EmberValueError, match="division by zero"):
                ta % bad
        divs = [d for d in divs if d]
    a = np.array(vals, dtype=npdt(dt)).reshape(-1, 1)
    b = np.array(divs, dtype=npdt(dt)).reshape(1, -1)
    ta, tb = em.tensor(a), em.tensor(b)
    same(ta // tb, reference(a, b, dt, np.floor_divide))
    same(ta % tb, reference(a, b, dt, np.remainder))


@pytest.mark.parametrize("dt", [d for d in (em.float32, em.float64) if d in FLOATS], ids=lambda d: d.name)
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
    np.testing.assert_array_equal((i % np.array([2.5, 2.5, 2.5], dtype=np.float32)).numpy(),
                                  np.remainder(np.float32([7, -7, 8]), np.float32(2.5)))


def test_gradients():
    rng = np.random.default_rng(5)
    an, bn = rng.uniform(-9, 9, (4, 6)), rng.choice([-2.5, -1.5, 1.25, 3.0], size=(1, 6))  # broadcast divisor
    # away from the jumps of floor(a / b), remainder is smooth: check it with finite differences
    assert gradcheck(lambda a, b: a % b, [em.tensor(an, device=em.cpu), em.tensor(bn, device=em.cpu)])
    a, b = em.Var(an.astype(WIDE_NP)), em.Var(bn.astype(WIDE_NP))
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
    expect_error(lambda: em.zeros(2) % [[1], [2, 3]], "remainder", em.DTypeError)
    expect_error(lambda: em.zeros(2) // "x", "floor_divide", em.EmberTypeError)


def hard_float_pairs(rng, n, dtype=np.float32):
    """Pairs where an fmod through a rounded quotient goes wrong: quotients next to integers (a = k*b
    and a neighbour), around the bounds of the vectorised paths (2^29 for float32, 2^53 for float64)
    and far past them, every exponent, subnormals, signed zeros, infinities and NaNs; in random order."""
    big = dtype == np.float64
    emax, bits, bound = (1000, 53, 53) if big else (120, 24, 29)
    b = (rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))).astype(dtype)
    k = np.round(np.exp2(rng.uniform(0, bits + 16, n)) * rng.choice([-1, 1], n))
    k = np.where(rng.random(n) < 0.3, np.exp2(rng.uniform(bound - 2, bound + 2, n)), k)  # the bound, k not whole
    a = (k * b.astype(np.float64)).astype(dtype) if not big else k * b
    a = np.where(rng.random(n) < 0.5, np.nextafter(a, rng.choice([-np.inf, np.inf], n).astype(dtype)), a)
    wide = (rng.standard_normal(n) * np.exp2(rng.integers(-emax - 20, emax, n).astype(np.float64))).astype(dtype)
    a = np.where(rng.random(n) < 0.3, wide, a)
    tiny = np.finfo(dtype).smallest_subnormal
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, tiny, -tiny, np.finfo(dtype).max, 2.0 ** bound,
                        2.0 ** bound + 2.0 ** (bound - bits + 2)], dtype=dtype)
    a = np.where(rng.random(n) < 0.05, rng.choice(special, n), a)
    b = np.where(rng.random(n) < 0.05, rng.choice(special, n), b)
    return a.astype(dtype), b.astype(dtype)


@pytest.mark.parametrize("dt", [d for d in (em.float32, em.float16, em.bfloat16, em.float64) if d in FLOATS],
                         ids=lambda d: d.name)
def test_float_divmod_is_exact_on_hard_operands(dt, rng):
    a, b = hard_float_pairs(rng, 20011, np.float64 if dt is em.float64 else np.float32)  # 78 blocks of 256, a tail
    ta, tb = (em.tensor(x).to_dtype(dt) for x in (a, b))
    an, bn = ta.numpy(), tb.numpy()
    for fn, ref_fn in ((lambda x, y: x // y, np.floor_divide), (lambda x, y: x % y, np.remainder)):
        for x, y, xn, yn in ((ta, tb, an, bn),  # dense
                             (ta[1::2], tb[::2][:-1], an[1::2], bn[::2][:-1]),  # strided, offset
                             (ta, tb[7], an, bn[7:8]), (ta[5], tb, an[5:6], bn)):  # a scalar on either side
            got, ref = fn(x, y).numpy(), reference(xn, yn, dt, ref_fn)
            np.testing.assert_array_equal(f64(got), f64(ref))
            np.testing.assert_array_equal(np.signbit(f64(got)), np.signbit(f64(ref)))  # -0.0 where numpy has it


DIVMOD_ISA_SCRIPT = """
import sys, numpy as np, ember as em
sys.path.insert(0, sys.argv[1])
from test_divmod import hard_float_pairs
bad = 0
for dtype in (np.float32, np.float64):
    a, b = hard_float_pairs(np.random.default_rng(5), 50000, dtype)
    with np.errstate(all="ignore"):
        refs = (np.floor_divide(a, b), np.remainder(a, b))
    gots = (em.tensor(a) // em.tensor(b), em.tensor(a) % em.tensor(b))
    bad += sum(int((~((g.numpy() == r) & (np.signbit(g.numpy()) == np.signbit(r)) | np.isnan(r) & np.isnan(g.numpy())))
                   .sum()) for g, r in zip(gots, refs))
print(em._C.isa(), bad)
"""


@pytest.mark.cpu_only
def test_float_divmod_exact_on_every_isa():
    # the float fmod's 2^29 bound is what makes it exact without an FMA (the base x86-64 build), and the
    # double one needs an FMA
    import os
    import subprocess
    import sys
    seen = set()
    for isa in ("base", "avx2", "avx512"):
        env = dict(os.environ, EMBER_ISA=isa)
        r = subprocess.run([sys.executable, "-c", DIVMOD_ISA_SCRIPT, os.path.dirname(__file__)], check=False, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        got_isa, bad = r.stdout.split()
        seen.add(got_isa)
        assert bad == "0", (isa, got_isa)
    assert "base" in seen
