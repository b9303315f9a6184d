"""Data movement on the emulated Metal device against numpy and the CPU backend: strided copies, copy_into a
strided destination, fill, casts between every dtype pair (bit for bit with the CPU), where, cat."""
import itertools

import numpy as np
import pytest

import ember as em
from ember import _C

from conftest import expect_error, make_view, npdt, rand_np, rand_shape

METAL_DTYPES = [em.float32, em.float16, em.bfloat16, em.int64, em.uint32, em.uint8]
VIEWS = ["contiguous", "transposed", "narrowed", "stepped", "offset", "broadcast"]


@pytest.fixture(autouse=True)
def _metal(monkeypatch):
    if em.metal.backend() != "apple":
        monkeypatch.setenv("EMBER_METAL", "emulate")
    assert em.metal_is_available()


def bits(a):
    """The raw bytes of an array, so that NaN payloads and signed zeros compare exactly."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(a.shape + (a.dtype.itemsize,))


def metal(t):
    return t.to_device("metal")


# ----------------------------------------------------------------------------- copies
@pytest.mark.parametrize("dt", METAL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", VIEWS)
def test_contiguous_copy_of_views(rng, dt, kind):
    for nd in (1, 2, 4):
        shape = rand_shape(rng, nd)
        t, ref = make_view(rng, shape, dt, kind, device="metal")
        c = t.copy()
        assert c.is_contiguous() and c.device.type == "metal"
        np.testing.assert_array_equal(bits(c.numpy()), bits(ref))


def test_copy_of_empty_and_zero_dim_tensors():
    e = em.zeros((3, 0, 2), device="metal")
    assert e.copy().shape == (3, 0, 2) and e.copy().numpy().size == 0
    s = em.tensor(2.5, device="metal")
    assert s.copy().item() == 2.5 and s.copy().shape == ()


def test_large_contiguous_copy_with_a_tail():
    n = 4 * 1000 + 3  # not a multiple of the 4 elements each thread copies
    x = em.arange(n, dtype=em.int64, device="metal")
    np.testing.assert_array_equal(x[1:].copy().numpy(), np.arange(1, n))


@pytest.mark.parametrize("dt", METAL_DTYPES, ids=lambda d: d.name)
def test_copy_into_strided_destinations(rng, dt):
    for _ in range(4):
        shape = rand_shape(rng, 3, 2, 6)
        base = rand_np(rng, (shape[2] + 2, shape[1] * 2, shape[0] + 1), dt)  # a permuted, stepped, offset target
        dst = metal(em.tensor(base))
        view = dst.permute(2, 1, 0)[1:, ::2, :shape[2]]
        ref_view = base.transpose(2, 1, 0)[1:, ::2, :shape[2]]
        assert view.shape == ref_view.shape
        src, _ = make_view(rng, view.shape, dt, "transposed", device="metal")
        src_ref = src.numpy()
        _C.copy_into(src._storage, src._layout, view._storage, view._layout, "copy")
        want = base.copy()
        want.transpose(2, 1, 0)[1:, ::2, :shape[2]] = src_ref
        np.testing.assert_array_equal(bits(dst.numpy()), bits(want))


def test_slice_set_writes_the_shared_storage():
    t = em.zeros((4, 6), device="metal")
    v = t.transpose(0, 1)
    v.slice_set(em.arange(8, dtype=em.float32, device="metal").reshape(2, 4), 0, 3)
    want = np.zeros((4, 6), np.float32)
    want.T[3:5] = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(t.numpy(), want)


def test_overlapping_copy_reads_the_old_values():
    # Source and destination overlap in one buffer: the result is as if the source were copied first.
    x = em.arange(10, dtype=em.float32, device="metal")
    _C.copy_into(x._storage, x[:-1]._layout, x._storage, x[1:]._layout, "copy")
    want = np.arange(10, dtype=np.float32)
    want[1:] = want[:-1].copy()
    np.testing.assert_array_equal(x.numpy(), want)
    y = em.arange(12, dtype=em.int64, device="metal").reshape(3, 4)
    _C.copy_into(y._storage, y.transpose(0, 1)[:3, :3]._layout, y._storage, y[:3, :3]._layout, "copy")
    w = np.arange(12).reshape(3, 4)
    w[:3, :3] = w.T[:3, :3].copy()
    np.testing.assert_array_equal(y.numpy(), w)


def test_copy_into_version_and_errors():
    t = em.zeros((2, 3), device="metal")
    v0 = t._storage.version
    t.slice_set(em.ones((1, 3), device="metal"), 0, 1)
    assert t._storage.version > v0  # the entry point bumps: autograd sees in-place writes on Metal too
    expect_error(lambda: t.slice_set(em.ones((1, 3), dtype=em.float16, device="metal"), 0, 0), "slice_set",
                 em.DTypeError)
    expect_error(lambda: t.broadcast_as((4, 2, 3)).slice_set(em.ones((4, 1, 3), device="metal"), 1, 0), "slice_set",
                 em.EmberValueError)


# ----------------------------------------------------------------------------- fill
@pytest.mark.parametrize("dt", METAL_DTYPES, ids=lambda d: d.name)
def test_fill_converts_like_the_cpu(dt):
    for value in (0.0, 1.0, -1.5, 2.5, 300.7, 1e10, -7e20, float("inf"), float("nan"), 65519.0, 3.0e38):
        # Through the core (em.full refuses nan / inf for ints): the conversion itself is compared.
        m, c = em.zeros((3, 5), dtype=dt, device="metal"), em.zeros((3, 5), dtype=dt)
        _C.fill(m._storage, m._layout, value)
        _C.fill(c._storage, c._layout, value)
        np.testing.assert_array_equal(bits(m.numpy()), bits(c.numpy()), err_msg=f"{value}")


@pytest.mark.parametrize("dt", METAL_DTYPES, ids=lambda d: d.name)
def test_fill_of_strided_views(rng, dt):
    base = rand_np(rng, (5, 8, 3), dt)
    t = metal(em.tensor(base))
    t.permute(2, 0, 1)[1:, ::2, 1::3].fill_(7)
    t[4].zero_set()
    want = base.copy()
    want.transpose(2, 0, 1)[1:, ::2, 1::3] = 7
    want[4] = 0
    np.testing.assert_array_equal(bits(t.numpy()), bits(want))


# ----------------------------------------------------------------------------- casts
SPECIAL = np.array([0.0, -0.0, 0.5, 1.5, 2.5, -2.5, 255.0, 256.0, 300.7, -1.0, -300.2, 65504.0, 65520.0, 1e6, 4.3e9,
                    -4.3e9, 1e19, 1.7e19, -9.2e18, 9.3e18, 3.0e38, float("inf"), float("-inf"), float("nan"),
                    1e-8, -3e-5, 6e-8, 1.00048828125, 1.0009765625], np.float64)


def cast_inputs(rng, dt):
    """Values of dt covering the conversion edge cases (halves round, ints wrap, NaN, huge)."""
    if dt.is_float:
        vals = np.concatenate([SPECIAL, rng.uniform(-1e5, 1e5, 40), rng.uniform(-3, 3, 40)])
        with np.errstate(over="ignore", invalid="ignore"):
            return vals.astype(npdt(dt))
    info = np.iinfo(npdt(dt))
    edges = [v for v in (0, 1, info.max, info.max - 1, info.min, 255, 256, 2**24 + 1, 2**31 + 3)
             if info.min <= v <= info.max]
    edges = np.array(edges, dtype=npdt(dt))
    rand = rng.integers(info.min, info.max, size=60, dtype=npdt(dt), endpoint=True)
    if dt is em.int64:
        rand = np.concatenate([rand, np.array([2**53 + 1, -(2**62) - 5, 2**63 - 1, -(2**63)], np.int64)])
    return np.concatenate([edges, rand])


@pytest.mark.parametrize("src,dst", list(itertools.product(METAL_DTYPES, METAL_DTYPES)),
                         ids=lambda d: d.name)
def test_casts_of_every_pair_match_the_cpu_bit_for_bit(rng, src, dst):
    vals = cast_inputs(rng, src)
    c = em.tensor(vals, dtype=src, device=em.cpu)  # the CPU reference
    m = metal(c)
    np.testing.assert_array_equal(bits(m.to_dtype(dst).numpy()), bits(c.to_dtype(dst).numpy()))
    # Strided: a reversed, stepped view of a 2-D arrangement.
    n = len(vals) // 6 * 6
    c2 = c[:n].reshape(6, n // 6).transpose(0, 1)[::2]
    m2 = m[:n].reshape(6, n // 6).transpose(0, 1)[::2]
    np.testing.assert_array_equal(bits(m2.to_dtype(dst).numpy()), bits(c2.to_dtype(dst).numpy()))


@pytest.mark.parametrize("kind", VIEWS)
def test_casts_of_views(rng, kind):
    t, ref = make_view(rng, rand_shape(rng, 3), em.float32, kind, device="metal")
    np.testing.assert_array_equal(t.to_dtype(em.float16).numpy(), ref.astype(np.float16))
    np.testing.assert_array_equal(t.to_dtype(em.int64).numpy(), ref.astype(np.int64))


def test_cast_to_the_same_dtype_is_a_new_dense_copy():
    t = em.arange(6, dtype=em.float32, device="metal").reshape(2, 3).transpose(0, 1)
    s, lay = _C.to_dtype(t._storage, t._layout, em.float32.code)
    assert not s.same_buffer(t._storage) and lay.is_contiguous()
    np.testing.assert_array_equal(s.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3).T.ravel())


# ----------------------------------------------------------------------------- where
@pytest.mark.parametrize("cdt", [em.uint8, em.uint32, em.int64], ids=lambda d: d.name)
@pytest.mark.parametrize("dt", METAL_DTYPES, ids=lambda d: d.name)
def test_where_with_broadcast_strides(rng, cdt, dt):
    shapes = [((4, 1, 5), (1, 3, 5), (4, 3, 1)), ((6,), (2, 6), (1,)), ((2, 3), (2, 3), (2, 3))]
    for sc, sa, sb in shapes:
        cond = (rng.integers(0, 3, size=sc) * rng.integers(0, 2, size=sc)).astype(npdt(cdt))
        a, b = rand_np(rng, sa, dt), rand_np(rng, sb, dt)
        got = em.where(metal(em.tensor(cond)), metal(em.tensor(a)), metal(em.tensor(b)))
        assert got.device.type == "metal"
        np.testing.assert_array_equal(bits(got.numpy()), bits(np.where(cond != 0, a, b)))


@pytest.mark.parametrize("kind", VIEWS)
def test_where_of_views(rng, kind):
    shape = rand_shape(rng, 3)
    c, cref = make_view(rng, shape, em.uint8, kind, device="metal")
    a, aref = make_view(rng, shape, em.float32, kind, device="metal")
    b, bref = make_view(rng, shape, em.float32, "transposed", device="metal")
    np.testing.assert_array_equal(em.where(c, a, b).numpy(), np.where(cref != 0, aref, bref))


def test_where_errors():
    a = em.ones(3, device="metal")
    expect_error(lambda: em.where(em.ones(3, device="metal"), a, a), "where", em.DTypeError)
    c, h = em.ones(3, dtype=em.uint8, device="metal"), a.to_dtype(em.float16)
    expect_error(lambda: _C.where(c._storage, c._layout, a._storage, a._layout, h._storage, h._layout), "where",
                 em.DTypeError)


# ----------------------------------------------------------------------------- cat
@pytest.mark.parametrize("dt", METAL_DTYPES, ids=lambda d: d.name)
def test_cat_of_views_along_every_dim(rng, dt):
    for nd in (1, 2, 3):
        shape = rand_shape(rng, nd)
        for dim in range(nd):
            parts, refs = [], []
            for kind in ("contiguous", "transposed", "stepped", "offset"):
                s = list(shape)
                s[dim] = int(rng.integers(0, 4))
                if kind != "contiguous" and 0 in s:
                    kind = "contiguous"
                t, r = make_view(rng, tuple(s), dt, kind, device="metal")
                parts.append(t)
                refs.append(r)
            got = em.cat(parts, dim)
            assert got.device.type == "metal"
            np.testing.assert_array_equal(bits(got.numpy()), bits(np.concatenate(refs, dim)))


def test_cat_errors():
    a = em.ones((2, 3), device="metal")
    expect_error(lambda: em.cat([a, em.ones((2, 4), device="metal")], 0), "cat", em.ShapeError)
    b = a.to_dtype(em.int64)  # em.cat promotes; the core refuses mixed dtypes
    expect_error(lambda: _C.cat([a._storage, b._storage], [a._layout, b._layout], 0), "cat", em.DTypeError)
