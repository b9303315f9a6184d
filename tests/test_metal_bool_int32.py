"""bool and int32 through every Metal kernel family on the emulated device, strided and offset: casts, int32
arithmetic, comparisons writing bool, & | ^ ~, where and masks, reductions, index ops with int32 indices,
sort/topk/scan values, cat/stack, matmul, randint and sdpa's bool mask, each against numpy and the CPU."""
import numpy as np
import pytest

import ember as em

from conftest import expect_error

METAL_DTYPES = [em.float32, em.float16, em.bfloat16, em.int64, em.uint32, em.uint8, em.int32, em.bool]
VIEWS = ["contiguous", "transposed", "narrowed", "stepped", "offset", "broadcast"]


@pytest.fixture(autouse=True)
def _metal(monkeypatch):
    if em.metal.backend() != "apple":
        monkeypatch.setenv("EMBER_METAL", "emulate")
    assert em.metal_is_available()


def npdt(dt):
    """numpy's dtype for int32 and bool."""
    return np.dtype(bool) if dt is em.bool else np.dtype(dt.name)


def rand(rng, shape, dt, small=False):
    """Random values of dt: int32 over its whole range (or small, for divisions), bool about half true."""
    if dt is em.bool:
        return rng.random(shape) < 0.5
    if dt is em.int32:
        if small:  # divisors: -1 among them, never 0 (an integer x // 0 raises, test_errors.py)
            v = rng.integers(-9, 9, size=shape, dtype=np.int32)
            return np.where(v >= 0, v + 1, v).astype(np.int32)
        return rng.integers(-(2**31), 2**31, size=shape, dtype=np.int64).astype(np.int32)
    if dt.is_float:
        return rng.uniform(-4, 4, size=shape).astype(np.float32)
    return rng.integers(0, 200, size=shape).astype(dt.name)


def view(rng, shape, dt, kind, small=False):
    """(metal tensor, cpu tensor, numpy reference): the same values laid out as `kind` on both devices."""
    shape = tuple(shape)
    nd = len(shape)

    def both(base, f, g):
        t = em.tensor(base, dtype=dt)
        return f(t.to_device("metal")), f(t.to_device("cpu")), g(base)

    if kind == "contiguous" or nd == 0:
        return both(rand(rng, shape, dt, small), lambda t: t, lambda a: a)
    if kind == "transposed":
        perm = tuple(reversed(range(nd)))
        return both(rand(rng, shape[::-1], dt, small), lambda t: t.permute(*perm), lambda a: a.transpose(perm))
    if kind == "narrowed":
        base = rand(rng, shape[:-1] + (shape[-1] + 3,), dt, small)
        return both(base, lambda t: t.narrow(-1, 2, shape[-1]), lambda a: a[..., 2 : 2 + shape[-1]])
    if kind == "stepped":
        big = (shape[0] * 2,) + shape[1:-1] + (shape[-1] * 2,) if nd > 1 else (shape[0] * 2,)
        idx = (slice(None, None, 2),) + (slice(None),) * (nd - 2) + ((slice(1, None, 2),) if nd > 1 else ())
        return both(rand(rng, big, dt, small), lambda t: t[idx], lambda a: a[idx])
    if kind == "offset":
        return both(rand(rng, (3,) + shape, dt, small), lambda t: t[1], lambda a: a[1])
    if kind == "broadcast":
        base = rand(rng, (1,) + shape[1:], dt, small)
        return both(base, lambda t: t.broadcast_as(shape), lambda a: np.broadcast_to(a, shape))
    raise ValueError(kind)


def same(m, c, ref=None):
    """The metal result equals the CPU's bit for bit (dtype and shape too), and the reference if given."""
    assert m.device.type == "metal" and m.dtype == c.dtype, (m.device, m.dtype, c.dtype)
    a, b = m.numpy(), c.numpy()
    assert a.shape == b.shape
    np.testing.assert_array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))
    if ref is not None:
        np.testing.assert_array_equal(a, np.asarray(ref))


SHAPES = [(7,), (3, 5), (2, 3, 4)]


# ----------------------------------------------------------------------------- casts and copies
@pytest.mark.parametrize("kind", VIEWS)
def test_casts_between_every_pair_strided(rng, kind):
    for src in METAL_DTYPES:
        m, c, _ = view(rng, (3, 5), src, kind)
        if src.is_float:  # NaN, infinities, out-of-range and fractional values for the integer/bool targets
            vals = em.tensor([np.nan, np.inf, -np.inf, 0.5, -0.5, 3e9, -3e9, 0.0, -0.0, 2.7e10], dtype=src)
            extra = [(vals.to_device("metal"), vals)]
        else:
            extra = []
        for mm, cc in [(m, c)] + extra:
            for dst in METAL_DTYPES:
                same(mm.to_dtype(dst), cc.to_dtype(dst))


def test_bool_cast_is_nonzero_and_nan_is_true():
    x = em.tensor([0.0, -0.0, 0.25, np.nan, -np.inf], device="metal")
    np.testing.assert_array_equal(x.to_dtype(em.bool).numpy(), [False, False, True, True, True])
    i = em.tensor(np.array([0, 256, -1, 2**31 - 1]), dtype=em.int32, device="metal")
    np.testing.assert_array_equal(i.to_dtype(em.bool).numpy(), [False, True, True, True])
    np.testing.assert_array_equal(i.to_dtype(em.uint8).numpy(), np.array([0, 256, -1, 2**31 - 1]).astype(np.uint8))


@pytest.mark.parametrize("dt", [em.int32, em.bool], ids=lambda d: d.name)
@pytest.mark.parametrize("kind", VIEWS)
def test_copy_fill_and_cat_stack(rng, dt, kind):
    m, c, ref = view(rng, (4, 6), dt, kind)
    same(m.contiguous(), c.contiguous(), ref)
    same(em.cat([m, m[1:]], 0), em.cat([c, c[1:]], 0), np.concatenate([ref, ref[1:]], 0))
    same(em.stack([m, m], 1), em.stack([c, c], 1), np.stack([ref, ref], 1))
    z = em.zeros((4, 6), dtype=dt, device="metal")
    z[:, 1:4] = em.full((4, 3), 1, dtype=dt, device="metal")
    want = np.zeros((4, 6), dtype=npdt(dt))
    want[:, 1:4] = 1
    np.testing.assert_array_equal(z.numpy(), want)


# ----------------------------------------------------------------------------- elementwise
INT32_BINARY = ["add", "sub", "mul", "maximum", "minimum", "floor_divide", "remainder"]


def binop(name, a, b):
    ops = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "maximum": lambda: em.maximum(a, b),
           "minimum": lambda: em.minimum(a, b), "floor_divide": lambda: a // b, "remainder": lambda: a % b,
           "and": lambda: a & b, "or": lambda: a | b, "xor": lambda: a ^ b}
    return ops[name]()


@pytest.mark.parametrize("kind", VIEWS)
def test_int32_binary_wraps_like_numpy(rng, kind):
    for name in INT32_BINARY:
        small = name in ("floor_divide", "remainder")  # with -1 among the divisors
        ma, ca, ra = view(rng, (3, 5), em.int32, kind, small)
        mb, cb, rb = view(rng, (3, 5), em.int32, "contiguous", small)
        with np.errstate(all="ignore"):
            ref = {"add": ra + rb, "sub": ra - rb, "mul": ra * rb, "maximum": np.maximum(ra, rb),
                   "minimum": np.minimum(ra, rb), "floor_divide": np.floor_divide(ra, rb),
                   "remainder": np.remainder(ra, rb)}[name]
        same(binop(name, ma, mb), binop(name, ca, cb), ref)
        same(binop(name, mb, ma), binop(name, cb, ca))  # the strided operand second
        same(binop(name, ma, mb[0, 0]), binop(name, ca, cb[0, 0]))  # a one-element operand


def test_int32_division_edge_cases():
    lo = np.int32(-(2**31))
    a = em.tensor(np.array([lo, lo, 7, -7, 5]), dtype=em.int32, device="metal")
    b = em.tensor(np.array([-1, 1, 3, 2, -3]), dtype=em.int32, device="metal")
    np.testing.assert_array_equal((a // b).numpy(), np.array([lo, lo, 2, -4, -2], dtype=np.int32))
    np.testing.assert_array_equal((a % b).numpy(), np.array([0, 0, 1, 1, -1], dtype=np.int32))
    for bad in (0, em.tensor(np.array([1, 0, 1, 1, 1]), dtype=em.int32, device="metal")):  # as torch
        with pytest.raises(em.EmberValueError, match=r"^\[floor_divide\] integer division by zero"):
            a // bad
        with pytest.raises(em.EmberValueError, match=r"^\[remainder\] integer division by zero"):
            a % bad


@pytest.mark.parametrize("dt", METAL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", ["contiguous", "transposed", "broadcast"])
def test_comparisons_write_bool(rng, dt, kind):
    ma, ca, ra = view(rng, (4, 5), dt, kind)
    mb, cb, rb = view(rng, (4, 5), dt, "offset")
    for f in (lambda x, y: x == y, lambda x, y: x != y, lambda x, y: x < y, lambda x, y: x <= y,
              lambda x, y: x > y, lambda x, y: x >= y):
        r = f(ma, mb)
        assert r.dtype == em.bool
        same(r, f(ca, cb), f(ra.astype(np.float32) if dt is em.bfloat16 else ra, rb))
        same(f(ma, ma[0]), f(ca, ca[0]))


@pytest.mark.parametrize("dt", [em.int32, em.int64, em.uint32, em.uint8, em.bool], ids=lambda d: d.name)
@pytest.mark.parametrize("kind", VIEWS)
def test_bitwise_ops(rng, dt, kind):
    ma, ca, ra = view(rng, (3, 4), dt, kind)
    mb, cb, rb = view(rng, (3, 4), dt, "stepped")
    for name, f in (("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor)):
        same(binop(name, ma, mb), binop(name, ca, cb), f(ra, rb))
        same(binop(name, ma, mb[1]), binop(name, ca, cb[1]))
    same(~ma, ~ca, np.invert(ra))


def test_bitwise_on_floats_is_refused():
    x = em.ones(3, device="metal")
    expect_error(lambda: x & x, "bitwise_and")
    expect_error(lambda: ~x, "bitwise_not")


def test_bool_arithmetic(rng):
    m, c, r = view(rng, (5, 6), em.bool, "transposed")
    n, d, s = view(rng, (5, 6), em.bool, "offset")
    same(m + n, c + d, r | s)
    same(m * n, c * d, r & s)
    same(em.maximum(m, n), em.maximum(c, d), r | s)
    same(em.minimum(m, n), em.minimum(c, d), r & s)
    expect_error(lambda: m - n, "sub")
    expect_error(lambda: -m, "neg")


@pytest.mark.parametrize("kind", VIEWS)
def test_int32_unary(rng, kind):
    m, c, r = view(rng, (4, 5), em.int32, kind)
    with np.errstate(all="ignore"):
        same(m.abs(), c.abs(), np.abs(r))
        same(-m, -c, -r)
        same(m.sign(), c.sign(), np.sign(r))
        same(m.sqr(), c.sqr(), r * r)
        same(m.relu(), c.relu(), np.maximum(r, 0))
    same(m.clamp(-1000, 10**9), c.clamp(-1000, 10**9), np.clip(r, -1000, 10**9))
    same(m.affine(3, -7), c.affine(3, -7))
    same(m.affine(0.5, 0.25), c.affine(0.5, 0.25))


@pytest.mark.parametrize("cdt", [em.bool, em.uint8, em.int32], ids=lambda d: d.name)
@pytest.mark.parametrize("kind", VIEWS)
def test_where_and_masked_fill(rng, cdt, kind):
    mc, cc, rc = view(rng, (4, 5), cdt, kind)
    for dt in (em.int32, em.bool, em.float32):
        ma, ca, ra = view(rng, (4, 5), dt, "transposed")
        mb, cb, rb = view(rng, (4, 5), dt, "contiguous")
        same(em.where(mc, ma, mb), em.where(cc, ca, cb), np.where(rc != 0, ra, rb))
    if cdt is not em.int32:
        mx, cx, rx = view(rng, (4, 5), em.int32, "narrowed")
        same(mx.masked_fill(mc, 7), cx.masked_fill(cc, 7), np.where(rc != 0, 7, rx))


def test_boolean_mask_indexing(rng):
    m, c, r = view(rng, (5, 4), em.int32, "transposed")
    mk, ck, rk = view(rng, (5, 4), em.bool, "offset")
    same(m[mk], c[ck], r[rk])
    same(m[m > 0], c[c > 0], r[r > 0])


# ----------------------------------------------------------------------------- reductions
@pytest.mark.parametrize("dt", [em.int32, em.bool], ids=lambda d: d.name)
@pytest.mark.parametrize("kind", VIEWS)
def test_reductions(rng, dt, kind):
    m, c, r = view(rng, (4, 5, 6), dt, kind)
    for dim in (None, 0, 2, (0, 2)):
        s = m.sum(dim)
        assert s.dtype == em.int64  # torch: the sum of bool or int32 is int64
        same(s, c.sum(dim), r.astype(np.int64).sum(axis=dim))
        same(m.max(dim), c.max(dim), r.max(axis=dim))
        same(m.min(dim), c.min(dim), r.min(axis=dim))
    for dim in (0, 1, 2):
        same(m.argmax(dim), c.argmax(dim), r.argmax(axis=dim))
        same(m.argmin(dim), c.argmin(dim), r.argmin(axis=dim))
    same(m.any(1), c.any(1), r.any(axis=1))
    same(m.all(2), c.all(2), r.all(axis=2))


@pytest.mark.parametrize("dt", [em.int32, em.bool], ids=lambda d: d.name)
def test_long_row_reductions_take_the_two_pass_form(rng, dt):
    # few outputs of 70000 elements each: reduce_parts then reduce_finish; a sum past 2^31 must not wrap
    base = rand(rng, (2, 70000), dt)
    m, c = em.tensor(base, dtype=dt, device="metal"), em.tensor(base, dtype=dt, device="cpu")
    same(m.sum(1), c.sum(1), base.astype(np.int64).sum(1))
    same(m.max(1), c.max(1), base.max(1))
    same(m.argmin(1), c.argmin(1), base.argmin(1))
    big = em.full((70000,), 2**31 - 1, dtype=em.int32, device="metal")
    assert big.sum().item() == 70000 * (2**31 - 1)


# ----------------------------------------------------------------------------- index ops
@pytest.mark.parametrize("kind", VIEWS)
def test_int32_indices(rng, kind):
    m, c, r = view(rng, (5, 6), em.int32, kind)
    ids = np.array([4, -1, 0, 2, 2], dtype=np.int32)
    mi, ci = em.tensor(ids, dtype=em.int32, device="metal"), em.tensor(ids, dtype=em.int32, device="cpu")
    same(m.index_select(mi, 0), c.index_select(ci, 0), r[ids])
    same(m.index_select(mi, 1), c.index_select(ci, 1), r[:, ids])
    gi = rng.integers(0, 6, size=(5, 3)).astype(np.int32)
    mg, cg = em.tensor(gi, dtype=em.int32, device="metal"), em.tensor(gi, dtype=em.int32, device="cpu")
    same(m.gather(mg, 1), c.gather(cg, 1), np.take_along_axis(r, gi.astype(np.int64), 1))
    src_m, src_c, _ = view(rng, (5, 3), em.int32, "contiguous")
    same(m.scatter_add(mg, src_m, 1), c.scatter_add(cg, src_c, 1))
    for red in ("sum", "prod", "amax", "amin", "mean"):
        same(m.scatter_reduce(1, mg, src_m, red), c.scatter_reduce(1, cg, src_c, red))
    same(m.scatter(1, mg, src_m), c.scatter(1, cg, src_c))
    add_m, add_c, _ = view(rng, (5, 6), em.int32, "transposed")
    same(m.index_add(mi, add_m, 0), c.index_add(ci, add_c, 0))
    same(m[mi], c[ci], r[ids])
    mm, cc = m.contiguous(), c.contiguous()
    mm[mi] = em.full((5, 6), 9, dtype=em.int32, device="metal")
    cc[ci] = em.full((5, 6), 9, dtype=em.int32, device="cpu")
    same(mm, cc)


@pytest.mark.parametrize("dt", [em.float32, em.bool, em.int64], ids=lambda d: d.name)
def test_int32_indices_for_other_values(rng, dt):
    m, c, r = view(rng, (6, 4), dt, "stepped")
    ids = np.array([[5, 0, 3, 1]], dtype=np.int32)
    mi, ci = em.tensor(ids, dtype=em.int32, device="metal"), em.tensor(ids, dtype=em.int32, device="cpu")
    same(m.gather(mi, 0), c.gather(ci, 0), np.take_along_axis(r, ids.astype(np.int64), 0))
    same(m.index_select(mi[0], 0), c.index_select(ci[0], 0), r[ids[0]])
    emb = em.nn.Embedding(6, 3, device="metal")
    want = emb.weight.numpy()[ids]
    got = emb(mi)
    assert got.device.type == "metal"
    np.testing.assert_array_equal(got.numpy(), want)


def test_int32_index_out_of_range_raises():
    x = em.zeros((4, 3), device="metal")
    for bad in (4, -5, 2**31 - 1):
        ids = em.tensor(np.array([0, bad]), dtype=em.int32, device="metal")
        expect_error(lambda ids=ids: x.index_select(ids, 0), "index_select", em.IndexOutOfRange)
        expect_error(lambda ids=ids: x.gather(ids.reshape(2, 1), 0), "gather", em.IndexOutOfRange)


# ----------------------------------------------------------------------------- sort, topk, scans
@pytest.mark.parametrize("dt", [em.int32, em.bool], ids=lambda d: d.name)
@pytest.mark.parametrize("kind", ["contiguous", "transposed", "offset"])
def test_sort_topk_scan_values(rng, dt, kind):
    m, c, r = view(rng, (4, 9), dt, kind)
    for desc in (False, True):
        vm, im = m.sort(-1, descending=desc)
        vc, ic = c.sort(-1, descending=desc, stable=True)
        same(vm, vc)
        same(im, ic)
    same(m.topk(3, -1)[0], c.topk(3, -1)[0])
    same(m.cumsum(1), c.cumsum(1), np.cumsum(r.astype(np.int64), 1))
    assert m.cumsum(0).dtype == em.int64
    same(m.cummax(1)[0], c.cummax(1)[0], np.maximum.accumulate(r, 1))
    same(m.cummin(0)[0], c.cummin(0)[0], np.minimum.accumulate(r, 0))


def test_long_int32_sort_goes_through_device_scratch(rng):
    base = rand(rng, (2, 5000), em.int32)  # past a threadgroup's 4096 elements
    v, i = em.tensor(base, dtype=em.int32, device="metal").sort(1)
    np.testing.assert_array_equal(v.numpy(), np.sort(base, 1))
    np.testing.assert_array_equal(i.numpy(), np.argsort(base, 1, kind="stable"))


# ----------------------------------------------------------------------------- matmul, randint, sdpa
def test_int32_matmul_wraps(rng):
    a = rand(rng, (3, 4, 5), em.int32)
    b = rand(rng, (5, 6), em.int32)
    ma, mb = em.tensor(a, dtype=em.int32, device="metal"), em.tensor(b, dtype=em.int32, device="metal")
    with np.errstate(all="ignore"):
        want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    np.testing.assert_array_equal((ma @ mb).numpy(), want)
    np.testing.assert_array_equal((ma.transpose(1, 2).contiguous().transpose(1, 2) @ mb).numpy(), want)


def test_randint_int32():
    em.manual_seed(3)
    t = em.randint(-5, 7, (2000,), dtype=em.int32, device="metal")
    assert t.dtype == em.int32 and t.device.type == "metal"
    a = t.numpy()
    assert a.min() >= -5 and a.max() < 7 and len(np.unique(a)) == 12


def test_sdpa_bool_mask_matches_uint8(rng):
    q, k, v = (em.tensor(rng.standard_normal((1, 2, 5, 8)).astype(np.float32), device="metal") for _ in range(3))
    keep = rng.random((5, 5)) < 0.7
    keep[:, 0] = True  # every query keeps a key
    mb = em.tensor(keep, dtype=em.bool, device="metal")
    mu = em.tensor(keep.astype(np.uint8), device="metal")
    a = em.nn.ops.sdpa(q, k, v, mask=mb)
    b = em.nn.ops.sdpa(q, k, v, mask=mu)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    c = em.nn.ops.sdpa(q.to_device("cpu"), k.to_device("cpu"), v.to_device("cpu"), mask=mb.to_device("cpu"))
    np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-5, atol=1e-6)


def test_bool_index_add_and_scatter_reduce_are_logical():
    # torch's rules: a bool sum (index_add, scatter_add, scatter_reduce sum/amax) is or, prod/amin is and
    base = np.array([True, False, False, True])
    ids = np.array([0, 1, 1, 2, 0])
    src = np.array([True, True, False, False, True])
    t = em.tensor(base, dtype=em.bool, device="metal")
    i = em.tensor(ids, dtype=em.int32, device="metal")
    s = em.tensor(src, dtype=em.bool, device="metal")
    hit_or, hit_and = base.copy(), base.copy()
    np.logical_or.at(hit_or, ids, src)
    np.logical_and.at(hit_and, ids, src)
    for got, want in ((t.index_add(i, s, 0), hit_or), (t.scatter_add(i, s, 0), hit_or),
                      (t.scatter_reduce(0, i, s, "sum"), hit_or), (t.scatter_reduce(0, i, s, "amax"), hit_or),
                      (t.scatter_reduce(0, i, s, "prod"), hit_and), (t.scatter_reduce(0, i, s, "amin"), hit_and)):
        assert got.dtype == em.bool
        np.testing.assert_array_equal(got.numpy().view(np.uint8), want.view(np.uint8))  # bytes stay 0/1
    expect_error(lambda: t.scatter_reduce(0, i, s, "mean"), "scatter_reduce")
    expect_error(lambda: t.reshape(2, 2) @ t.reshape(2, 2), "matmul")
