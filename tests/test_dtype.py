"""DTypes: attributes, f16/bf16 conversions bit-exact with an exact rounding reference, casts between all dtypes."""
import pickle

import ml_dtypes
import numpy as np
import pytest

import ember as em

from conftest import ALL, FLOATS, INTS, NP, WIDE, WIDE_NP, expect_error, make_view, npdt

# The numpy references cast out-of-range values on purpose (to inf, or NaN for ints): that is the
# behaviour being compared, so numpy's warnings about it are expected here.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning",
                                        "ignore:invalid value encountered in cast:RuntimeWarning")

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_dtype_attributes():
    want = {"float32": (4, True), "float16": (2, True), "bfloat16": (2, True), "float64": (8, True),
            "int64": (8, False), "uint32": (4, False), "uint8": (1, False), "int32": (4, False),
            "bool": (1, False)}
    assert [d.name for d in em.ALL_DTYPES] == list(want)
    assert [d.name for d in ALL] == [n for n in want if n in {d.name for d in ALL}]  # the device's, in order
    for d in em.ALL_DTYPES:
        assert isinstance(d, em.DType)
        assert (d.itemsize, d.is_float) == want[d.name]
        assert getattr(em, d.name) is d
        assert pickle.loads(pickle.dumps(d)) is d
    for d in ALL:  # tensors only in what the device holds
        assert em.zeros(3, dtype=d).dtype is d
        assert em.zeros(3, dtype=d).numpy().dtype == npdt(d)
    assert em.float32 != em.float64


def test_dtype_by_name_and_numpy_dtype(device):
    assert em.zeros(2, dtype="float16").dtype is em.float16
    assert em.zeros(2, dtype=np.float16).dtype is em.float16
    if WIDE is em.float64:
        assert em.zeros(2, dtype=np.float64).dtype is em.float64
    else:  # the name resolves; the device refuses the dtype
        expect_error(lambda: em.zeros(2, dtype=np.float64, device=device), "zeros", em.DTypeError)
    expect_error(lambda: em.zeros(2, dtype="complex64"), "dtype", em.DTypeError)
    expect_error(lambda: em.zeros(2, dtype="nonsense"), "dtype", TypeError)
    # None means "the default" only where an argument defaults to it; a cast needs a dtype
    # (np.dtype(None) would silently be float64)
    expect_error(lambda: em.zeros(2).to_dtype(None), "dtype", em.DTypeError)
    assert em.zeros(2, dtype=None).dtype is em.float32


def all_halves():
    return np.arange(65536, dtype=np.uint32).astype(np.uint16)


# The largest finite 16-bit pattern and the first power of two past it, per format: the rounding
# threshold to inf is the midpoint between the two.
_HALF_GRID = {"float16": (0x7BFF, 2.0**16, np.float16), "bfloat16": (0x7F7F, 2.0**128, BF16)}


def round_to_half_bits(x, fmt):
    """The bits of ``x`` (float32 or float64 values) rounded once, to nearest even, to ``fmt``.

    Exact, and independent of any package's cast: every grid value of a 16-bit float and every
    midpoint between two of them is a float64, so comparing |x| with the midpoint decides the
    rounding. NaN inputs give a NaN pattern."""
    top, past, npt = _HALF_GRID[fmt]
    x = np.asarray(x, dtype=np.float64)
    grid = np.arange(top + 1, dtype=np.uint16).view(npt).astype(np.float64)  # ascending, bits == index
    grid = np.append(grid, past)  # index top + 1 is the inf pattern (0x7C00 / 0x7F80)
    ax = np.abs(x)
    lo = np.clip(np.searchsorted(grid, ax, side="right") - 1, 0, top)
    mid = (grid[lo] + grid[lo + 1]) / 2
    up = (ax > mid) | ((ax == mid) & (lo % 2 == 1))
    bits = (lo + up).astype(np.uint16) | np.where(np.signbit(x), 0x8000, 0).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7E00 if fmt == "float16" else 0x7FC0), bits).astype(np.uint16)


def half_reference(x, dt):
    """``x`` rounded once to the ember half dtype ``dt``, as a numpy array of that dtype."""
    return round_to_half_bits(x, dt.name).view(npdt(dt))


def test_rounding_reference_is_exact():
    # The reference itself: grid points map to themselves, nudges off a midpoint go to the near side,
    # a midpoint to the even side, and the overflow threshold rounds to inf by ties-to-even.
    assert round_to_half_bits([1.0, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 65519.0, 65520.0, -0.0], "float16").tolist() \
        == [0x3C00, 0x3C00, 0x3C02, 0x7BFF, 0x7C00, 0x8000]
    assert round_to_half_bits([1.0 + 2.0**-8, 1.0 + 2.0**-8 + 2.0**-40, 3.0e38, 1e300], "bfloat16").tolist() \
        == [0x3F80, 0x3F81, 0x7F62, 0x7F80]


def test_f16_to_f32_all_patterns():
    bits = all_halves()
    t = em.tensor(bits.view(np.float16))
    got = t.to_dtype(em.float32).numpy()
    want = bits.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))  # signed zeros too
    # f16 -> f64 is exact as well (f32 again without float64)
    np.testing.assert_array_equal(t.to_dtype(WIDE).numpy()[~nan], want[~nan].astype(WIDE_NP))


def test_bf16_to_f32_all_patterns():
    bits = all_halves()
    t = em.tensor(bits.view(BF16))
    got = t.to_dtype(em.float32).numpy()
    want = bits.view(BF16).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def rounding_probe_f32(grid_bits, grid_dtype):
    """Every grid value, every midpoint between neighbours, and one f32 ulp either side of it."""
    vals = grid_bits.view(grid_dtype).astype(np.float32)
    fin = vals[np.isfinite(vals)]
    fin = np.unique(fin)
    mids = ((fin[:-1].astype(np.float64) + fin[1:].astype(np.float64)) / 2).astype(np.float32)
    up = np.nextafter(mids, np.float32(np.inf))
    down = np.nextafter(mids, np.float32(-np.inf))
    rng = np.random.default_rng(0)
    random_bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.996, 65520, -65520, 6e-8, 2.98e-8,
                      2.9802322e-08, 5.9604645e-08, 1e-45, -1e-45, 3.4e38, 1.17549435e-38, 6.1035156e-05,
                      6.097555e-05], dtype=np.float32)
    return np.concatenate([fin, mids, up, down, random_bits, edges])


def check_bits(got, want):
    got_bits, want_bits = got.view(np.uint16), want.view(np.uint16)
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    bad = np.nonzero(got_bits[~nan] != want_bits[~nan])[0]
    assert bad.size == 0, f"{bad.size} mismatches, first inputs differ at {bad[:5]}"


def test_f32_to_f16_round_to_nearest_even():
    x = rounding_probe_f32(all_halves(), np.float16)
    check_bits(em.tensor(x).to_dtype(em.float16).numpy(), half_reference(x, em.float16))


def test_f32_to_bf16_round_to_nearest_even():
    x = rounding_probe_f32(all_halves(), BF16)
    check_bits(em.tensor(x).to_dtype(em.bfloat16).numpy(), half_reference(x, em.bfloat16))


@pytest.mark.cpu_only  # the source values are float64, which only the CPU holds
@pytest.mark.parametrize("dt", [em.float16, em.bfloat16], ids=lambda d: d.name)
def test_f64_to_halves_single_rounding(dt):
    # A double just off a half-way point of the 16-bit grid must round to its own side; going
    # through f32 first would land exactly on the tie and round to even instead.
    rng = np.random.default_rng(1)
    halves = all_halves().view(npdt(dt))
    fin = np.unique(halves[np.isfinite(halves)].astype(np.float64))
    mids = (fin[:-1] + fin[1:]) / 2
    nudge = np.abs(mids) * 2.0**-40 + 1e-300
    x = np.concatenate([mids + nudge, mids - nudge, mids, rng.standard_normal(100_000) * 1e3,
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 65519.99999, 65520.0, 1e300, 1e-300, -1e-300,
                         3.3961e38, 3.3962e38, 3.4e38, 1e-45, 2.0**-133, 2.0**-134 * 1.0000001]])
    check_bits(em.tensor(x).to_dtype(dt).numpy(), half_reference(x, dt))


def test_half_to_half_casts():
    bits = all_halves()
    f16 = em.tensor(bits.view(np.float16))
    check_bits(f16.to_dtype(em.bfloat16).numpy(), half_reference(bits.view(np.float16).astype(np.float64), em.bfloat16))
    bf = em.tensor(bits.view(BF16))
    check_bits(bf.to_dtype(em.float16).numpy(), half_reference(bits.view(BF16).astype(np.float64), em.float16))


def test_half_arithmetic_rounds_once():
    # a + b for halves is computed in f32 and rounded once, like numpy's float16 ops
    rng = np.random.default_rng(2)
    a = rng.standard_normal(10_000).astype(np.float16)
    b = rng.standard_normal(10_000).astype(np.float16)
    got = (em.tensor(a) + em.tensor(b)).numpy()
    np.testing.assert_array_equal(got.view(np.uint16), (a + b).view(np.uint16))
    a16, b16 = a.astype(BF16), b.astype(BF16)
    got = (em.tensor(a16) * em.tensor(b16)).numpy()
    want = half_reference(a16.astype(np.float64) * b16.astype(np.float64), em.bfloat16)  # the product is exact in f32
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def cast_source(rng, src, dst, shape):
    """Values for src that convert without undefined behaviour to dst (numpy leaves some unspecified)."""
    if src.is_float:
        lo = 0.0 if dst in (em.uint32, em.uint8) else -100.0
        hi = 250.0 if dst is em.uint8 else 1000.0
        if dst is em.float16 or src is em.float16:
            hi = min(hi, 600.0)
        return rng.uniform(lo, hi, size=shape).astype(npdt(src))
    if src is em.int64:
        return rng.integers(-70000, 70000, size=shape, dtype=np.int64)  # wraps into u8 / u32 like numpy
    return rng.integers(0, np.iinfo(npdt(src)).max, size=shape, dtype=np.uint64).astype(npdt(src))


@pytest.mark.parametrize("src", ALL, ids=lambda d: d.name)
@pytest.mark.parametrize("dst", ALL, ids=lambda d: d.name)
def test_cast_matches_numpy(src, dst, rng):
    for kind in ("contiguous", "transposed", "stepped"):
        shape = (5, 7)
        base = cast_source(rng, src, dst, shape if kind != "transposed" else shape[::-1])
        if kind == "contiguous":
            t, ref = em.tensor(base), base
        elif kind == "transposed":
            t, ref = em.tensor(base).t(), base.T
        else:
            t, ref = em.tensor(base)[::2, 1::3], base[::2, 1::3]
        if dst in (em.float16, em.bfloat16):  # every value converts with a single rounding
            want = half_reference(ref.astype(np.float64), dst)
        else:
            want = ref.astype(npdt(dst)) if src is not em.bfloat16 else ref.astype(np.float32).astype(npdt(dst))
        out = t.to_dtype(dst)
        assert out.dtype is dst and out.shape == ref.shape
        got = out.numpy()
        assert got.dtype == npdt(dst)
        if dst in (em.float16, em.bfloat16):
            np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
        else:
            np.testing.assert_array_equal(got, want)


def test_cast_to_same_dtype_is_identity_and_names_accepted():
    t = em.tensor([1.0, 2.0])
    assert t.to_dtype(em.float32) is t
    assert t.to_dtype(WIDE.name).dtype is WIDE and t.to_dtype("bfloat16").dtype is em.bfloat16
    assert t.astype(np.float16).dtype is em.float16


def test_cast_special_floats_to_int_do_not_crash():
    # NaN / inf / out-of-range have no integer value; the cast must still return (values unspecified)
    x = em.tensor(np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 3.5], dtype=np.float32))
    for d in INTS:
        y = x.to_dtype(d).numpy()
        assert y.shape == (6,) and y[-1] == 3
    for d in (em.float16, em.bfloat16):
        assert x.to_dtype(d).to_dtype(em.int64).numpy()[-1] == 3


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_nan_inf_survive_casts_between_floats(dt):
    x = em.tensor(np.array([np.nan, np.inf, -np.inf, -0.0], dtype=WIDE_NP)).to_dtype(dt)
    y = x.to_dtype(WIDE).numpy()
    assert np.isnan(y[0]) and y[1] == np.inf and y[2] == -np.inf and np.signbit(y[3])


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_view_kinds_cast(dt, rng):
    for kind in ("narrowed", "offset", "broadcast"):
        t, ref = make_view(rng, (3, 4), dt, kind, lo=0, hi=50)
        np.testing.assert_array_equal(t.to_dtype(WIDE).numpy(), ref.astype(WIDE_NP))


def test_np_mapping_table_complete():
    assert set(NP) == {d.name for d in em.ALL_DTYPES}


def test_ml_dtypes_loads_only_when_a_bfloat16_array_is_needed():
    # importing ml_dtypes takes about a second: `import ember` must not pay it, bfloat16 numpy interop must
    import os
    import subprocess
    import sys

    code = ("import sys, ember as em\n"
            "before = 'ml_dtypes' in sys.modules\n"
            "a = em.tensor([1.5, -2.25], dtype=em.bfloat16).numpy()\n"
            "import ml_dtypes\n"
            "back = em.tensor(a)\n"
            "print(before, a.dtype == ml_dtypes.bfloat16, back.dtype is em.bfloat16, back.tolist())\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True", "True", "[1.5,", "-2.25]"]
