"""The unary math functors added to the C++ unary family (log1p expm1 rsqrt log2 log10 tan sinh cosh
asin acos atan trunc): float32 within a few ulp of the float64 reference on dense grids, special
values as numpy, every float dtype and layout, gradients by finite differences (tests/devcheck.py: on a
device without float64, its float32 gradients against the CPU's float64 ones), int rules."""
import numpy as np
import pytest
import torch
from devcheck import gradcheck

import ember as em

from conftest import FLOATS, INTS, TOL, WIDE_NP, expect_error, f64, make_view, npdt

REF = {"log1p": np.log1p, "expm1": np.expm1, "rsqrt": lambda v: 1.0 / np.sqrt(v), "log2": np.log2,
       "log10": np.log10, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin,
       "acos": np.arccos, "atan": np.arctan, "trunc": np.trunc}
# domains of the accuracy sweep (a grid dense in float32 plus its extremes) and the bound in ulp
DOMAIN = {"log1p": (-0.999, 1e6), "expm1": (-30.0, 88.0), "rsqrt": (1e-30, 1e30), "log2": (1e-38, 3e38),
          "log10": (1e-38, 3e38), "tan": (-1e4, 1e4), "sinh": (-89.0, 89.0), "cosh": (-89.0, 89.0),
          "asin": (-1.0, 1.0), "acos": (-1.0, 1.0), "atan": (-1e30, 1e30), "trunc": (-1e9, 1e9)}
MAX_ULP = 4


def _grid(lo, hi, n=400_000):
    """Linear and (for wide ranges) logarithmic points of [lo, hi], as float32."""
    pts = [np.linspace(lo, hi, n)]
    if hi / max(abs(lo), 1e-30) > 1e3 or lo < 0 < hi:
        mag = np.geomspace(1e-30, max(abs(lo), abs(hi)), n)
        pts += [mag[mag <= hi]] + ([-mag[-mag >= lo]] if lo < 0 else [])
    return np.unique(np.concatenate(pts).astype(np.float32))


def _ulp_err(got, x, fn):
    ref = fn(x.astype(np.float64))
    ok = np.isfinite(ref) & (np.abs(ref) < np.finfo(np.float32).max)
    ref, g = ref[ok], got[ok].astype(np.float64)
    ulp = np.spacing(np.maximum(np.abs(ref), np.finfo(np.float32).tiny).astype(np.float32)).astype(np.float64)
    return np.abs(g - ref) / ulp, x[ok]


@pytest.mark.parametrize("name", sorted(REF))
def test_float32_within_a_few_ulp(name):
    x = _grid(*DOMAIN[name])
    got = getattr(em.tensor(x), name)().numpy()
    err, xs = _ulp_err(got, x, REF[name])
    worst = int(np.argmax(err))
    assert err[worst] <= MAX_ULP, f"{name}({xs[worst]!r}) is {err[worst]:.2f} ulp off"


SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1e-30, -1e-30, 1e-40, np.inf, -np.inf, np.nan, 2.0, 8.0,
                    1000.0, 100.0, 1.5, -2.0, 89.5, -89.5, 1e20], dtype=np.float32)


@pytest.mark.parametrize("name", sorted(REF))
def test_special_values_as_numpy(name):
    with np.errstate(all="ignore"):
        ref = REF[name](SPECIAL.astype(np.float64)).astype(np.float32)
    got = getattr(em.tensor(SPECIAL), name)().numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    fin = np.isfinite(ref)
    np.testing.assert_array_equal(got[~fin & ~np.isnan(ref)], ref[~fin & ~np.isnan(ref)])  # infinities
    np.testing.assert_allclose(got[fin], ref[fin], rtol=5e-7, atol=0)
    zero = ref == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(ref[zero]))  # the sign of zero
    if name == "trunc":
        np.testing.assert_array_equal(got[fin], ref[fin])
    if name == "log2":  # exact at powers of two
        p2 = 2.0 ** np.arange(-149, 128)
        np.testing.assert_array_equal(em.tensor(p2.astype(np.float32)).log2().numpy(), np.arange(-149, 128))


@pytest.mark.parametrize("name", sorted(REF))
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", ["contiguous", "transposed", "stepped", "broadcast"])
def test_every_float_dtype_and_layout(rng, name, dt, kind):
    lo, hi = {"log1p": (-0.9, 3), "rsqrt": (0.1, 5), "log2": (0.1, 5), "log10": (0.1, 5), "asin": (-0.99, 0.99),
              "acos": (-0.99, 0.99), "tan": (-1.5, 1.5)}.get(name, (-3, 3))
    t, a = make_view(rng, (5, 6), dt, kind, lo=lo, hi=hi)
    out = getattr(t, name)()
    assert out.dtype is dt and out.shape == (5, 6)
    ref = REF[name](f64(a))
    r, at = TOL[dt.name]
    scale = 4 if name == "tan" and dt in (em.float16, em.bfloat16) else 1  # tan's slope near pi/2
    np.testing.assert_allclose(f64(out.numpy()), ref, rtol=r * scale, atol=at)
    # the functional form, and torch's own answer in the dtype for the halves
    np.testing.assert_array_equal(getattr(em, name)(t).numpy().view(np.uint8), out.numpy().view(np.uint8))
    if dt is em.float32:
        tref = getattr(torch, name)(torch.from_numpy(np.ascontiguousarray(a))).numpy()
        np.testing.assert_allclose(out.numpy(), tref, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("name", sorted(set(REF) - {"trunc"}))
def test_gradients_by_finite_differences(rng, name):
    lo, hi = {"log1p": (-0.5, 2), "rsqrt": (0.5, 3), "log2": (0.5, 3), "log10": (0.5, 3), "asin": (-0.9, 0.9),
              "acos": (-0.9, 0.9), "tan": (-1.2, 1.2)}.get(name, (-2, 2))
    x = em.tensor(rng.uniform(lo, hi, (3, 4)).astype(WIDE_NP))
    gradcheck(lambda v: getattr(v, name)(), [x])
    gradcheck(lambda v: getattr(v, name)() * v, [x])  # second factor: exercises the rule's graph
    xv = em.Var(x)
    g1 = getattr(xv, name)().sum().backward(create_graph=True)[xv]
    gradcheck(lambda v: em.Tensor.sum(getattr(v, name)()), [x])
    assert g1.op is not None  # second order: the rule is made of differentiable ops


def test_trunc_has_no_gradient_and_works_on_ints():
    x = em.Var([1.7, -2.5])
    with pytest.raises(em.NoGradientPath):
        x.trunc().sum().backward()
    gs = (x.trunc() + x).sum().backward()
    np.testing.assert_array_equal(gs[x].numpy(), [1.0, 1.0])
    for dt in INTS:
        v = np.array([0, 3, 250], dtype=npdt(dt))
        np.testing.assert_array_equal(em.tensor(v).trunc().numpy(), v)


@pytest.mark.parametrize("name", sorted(set(REF) - {"trunc"}))
def test_float_only_ops_refuse_ints(name):
    expect_error(lambda: getattr(em.tensor([1, 2]), name)(), name, em.DTypeError)
