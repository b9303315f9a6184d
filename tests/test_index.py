"""Indexing vs numpy: index_select, gather, cat, stack, tensor[...] with index lists, index_add/scatter_add,
and their error paths (out-of-range and float indices, shape/dtype mismatches)."""
import numpy as np
import pytest
from devcheck import gradcheck

import ember as em

from conftest import ALL, VIEWS, WIDE_NP, expect_error, make_view, npdt

ID_DTYPES = [em.int64, em.uint32, em.uint8]


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_index_select(dt, rng, device):
    for shape in [(5,), (4, 6), (3, 4, 5), (3, 0, 2)]:
        for kind in VIEWS:
            t, a = make_view(rng, shape, dt, kind, device)
            for dim in range(-len(shape), len(shape)):
                n = a.shape[dim]
                for idt in ID_DTYPES:
                    k = int(rng.integers(0, 7))
                    ids = rng.integers(0, n, size=k) if n else np.zeros(0, dtype=np.int64)
                    it = em.tensor(ids.astype(npdt(idt)), device=device)
                    out = t.index_select(it, dim)
                    assert out.dtype is dt
                    np.testing.assert_array_equal(out.numpy(), np.take(a, ids, axis=dim))
    # strided index tensors, repeated indices, and a list / numpy array as the index
    t, a = make_view(rng, (6, 3), dt, "transposed")
    ids = em.tensor(np.array([5, 0, 5, 2, 2, 1, 3, 0], dtype=np.int64))[::2]
    np.testing.assert_array_equal(t.index_select(ids, 0).numpy(), a[[5, 5, 2, 3]])
    np.testing.assert_array_equal(t.index_select([2, 1], 1).numpy(), a[:, [2, 1]])
    np.testing.assert_array_equal(t[[4, 0, 4]].numpy(), a[[4, 0, 4]])
    np.testing.assert_array_equal(t[np.array([1, 2])].numpy(), a[[1, 2]])
    np.testing.assert_array_equal(t[em.tensor([3, 1])].numpy(), a[[3, 1]])


def torch_gather_ref(a, ids, dim):
    """out[...i_dim...] = a[...ids[...]...] where ids may be smaller than a outside dim (torch semantics)."""
    region = tuple(slice(0, s) if d != dim % a.ndim else slice(None) for d, s in enumerate(ids.shape))
    return np.take_along_axis(a[region], ids, axis=dim)


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_gather(dt, rng):
    for shape in [(6,), (4, 5), (3, 4, 5)]:
        for kind in ("contiguous", "transposed", "stepped", "offset", "broadcast"):
            t, a = make_view(rng, shape, dt, kind)
            for dim in range(-len(shape), len(shape)):
                ishape = tuple(int(rng.integers(1, s + 1)) for s in shape)
                ishape = ishape[:dim % len(shape)] + (int(rng.integers(0, 7)),) + ishape[dim % len(shape) + 1:]
                ids = rng.integers(0, shape[dim], size=ishape)
                for idt in ID_DTYPES:
                    out = t.gather(em.tensor(ids.astype(npdt(idt))), dim)
                    assert out.shape == ishape and out.dtype is dt
                    np.testing.assert_array_equal(out.numpy(), torch_gather_ref(a, ids, dim))
    # negative indices count from the end (checked as the kernel reads them); a bad one anywhere raises
    big = em.tensor(np.arange(20000, dtype=np.float32).reshape(100, 200))
    gi = np.random.default_rng(3).integers(0, 200, size=(100, 150))
    want = np.take_along_axis(big.numpy(), gi, 1)
    np.testing.assert_array_equal(big.gather(em.tensor(gi - 200), 1).numpy(), want)
    gi[57, 99] = 200
    expect_error(lambda: big.gather(em.tensor(gi), 1), "gather", em.IndexOutOfRange)
    gi[57, 99] = -201
    e = expect_error(lambda: big.gather(em.tensor(gi), 1), "gather", em.IndexOutOfRange)
    assert "-201" in str(e)
    expect_error(lambda: em.zeros(3, 0).gather(em.tensor([[0]]), 1), "gather", em.IndexOutOfRange)
    ids = em.tensor(np.array([[0, 1, 1, 0]], dtype=np.int64)).t()  # strided indices
    t = em.tensor(np.arange(8, dtype=np.float32).reshape(4, 2))
    np.testing.assert_array_equal(t.gather(ids, 1).numpy(), [[0], [3], [5], [6]])


@pytest.mark.parametrize("dim", [0, 1])
def test_gather_large_checks_indices_in_kernel(dim):
    # 2**16 or more dense int64 indices are bounds-checked inside the gather itself; a negative or bad
    # one anywhere (any thread's chunk) falls back to the checked path: same values, same errors.
    rng = np.random.default_rng(11)
    src = rng.standard_normal((300, 280)).astype(np.float32)
    x = em.tensor(src)[:, 20:]  # offset, strided rows: (300, 260)
    a = src[:, 20:]
    gi = rng.integers(0, a.shape[dim], size=(300, 260))
    np.testing.assert_array_equal(x.gather(em.tensor(gi), dim).numpy(), np.take_along_axis(a, gi, dim))
    neg = gi - a.shape[dim] * (rng.random(gi.shape) < 0.3)
    np.testing.assert_array_equal(x.gather(em.tensor(neg), dim).numpy(), np.take_along_axis(a, gi, dim))
    for pos, bad in [((0, 0), a.shape[dim]), ((299, 259), -a.shape[dim] - 1), ((150, 7), 2**40)]:
        b = gi.copy()
        b[pos] = bad
        e = expect_error(lambda b=b: x.gather(em.tensor(b), dim), "gather", em.IndexOutOfRange)
        assert str(bad) in str(e)
    # a dim of size 0 has no element to read in place of a bad index: refused before any read
    expect_error(lambda: em.zeros(70_000, 0).gather(em.zeros(70_000, 1, dtype=em.int64), 1), "gather",
                 em.IndexOutOfRange)


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_cat_and_stack(dt, rng, device):
    for shape in [(3,), (2, 4), (2, 3, 4)]:
        for dim in range(-len(shape), len(shape)):
            parts, refs = [], []
            for i, kind in enumerate(("contiguous", "transposed", "stepped", "offset")):
                s = list(shape)
                s[dim] = [2, 1, 0, 3][i]
                t, a = make_view(rng, tuple(s), dt, kind, device)
                parts.append(t)
                refs.append(a)
            out = em.cat(parts, dim)
            assert out.dtype is dt
            np.testing.assert_array_equal(out.numpy(), np.concatenate(refs, axis=dim))
        same = [make_view(rng, shape, dt, k) for k in ("contiguous", "transposed", "broadcast")]
        for dim in range(-len(shape) - 1, len(shape) + 1):
            out = em.stack([t for t, _ in same], dim)
            np.testing.assert_array_equal(out.numpy(), np.stack([a for _, a in same], axis=dim))
    one = em.tensor(np.arange(3, dtype=npdt(dt)))
    c = em.cat([one], 0)
    assert not c.storage.same_buffer(one.storage)
    np.testing.assert_array_equal(em.cat((one, one), 0).numpy(), np.tile(np.arange(3, dtype=npdt(dt)), 2))


def test_index_add_scatter_add(rng):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    src = rng.standard_normal((4, 3)).astype(np.float32)
    ids = np.array([0, 4, 0, 2])
    want = x.copy()
    np.add.at(want, ids, src)
    np.testing.assert_allclose(em.tensor(x).index_add(em.tensor(ids), em.tensor(src), 0).numpy(), want, rtol=1e-6)
    sids = rng.integers(0, 5, size=(4, 3))
    want = x.copy()
    for i in range(4):
        for j in range(3):
            want[sids[i, j], j] += src[i, j]
    got = em.tensor(x).scatter_add(em.tensor(sids), em.tensor(src), 0).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)


def seq_add(out, dim, pos, src_slices):
    """out with src_slices[j] added at index pos[j] along dim, one at a time in index order, each sum rounded
    to out's dtype (halves through float32): what a serial loop computes."""
    out = np.moveaxis(out.copy(), dim, 0)
    for j, i in enumerate(pos):
        acc = out[i].astype(np.float32) if out.dtype.itemsize == 2 and out.dtype.kind not in "iu" else out[i]
        out[i] = (acc + np.asarray(src_slices[j]).astype(acc.dtype)).astype(out.dtype)
    return np.moveaxis(out, 0, dim)


@pytest.mark.parametrize("dt", [d for d in (em.float32, em.float64, em.bfloat16, em.int64, em.uint8) if d in ALL],
                         ids=lambda d: d.name)
def test_index_add_and_scatter_add_match_a_serial_loop(dt, rng):
    # every layout of the target and source, every dim, repeated and negative indices
    for shape in [(5, 3), (4, 3, 6)]:
        for kind in ("contiguous", "transposed", "narrowed", "offset"):
            t, a = make_view(rng, shape, dt, kind)
            for dim in range(len(shape)):
                n = shape[dim]
                ids = rng.integers(-n, n, size=7)
                sshape = shape[:dim] + (7,) + shape[dim + 1:]
                s, sa = make_view(rng, sshape, dt, kind)
                got = t.index_add(em.tensor(ids), s, dim).numpy()
                want = seq_add(a, dim, ids % n, np.moveaxis(sa, dim, 0))
                np.testing.assert_array_equal(got, want)
                # scatter_add: an index per source element, the index tensor as big as the target outside dim
                sids = rng.integers(0, n, size=sshape)
                got = t.scatter_add(em.tensor(sids), s, dim).numpy()
                want = np.moveaxis(a.copy(), dim, -1)
                src_m, ids_m = np.moveaxis(sa, dim, -1), np.moveaxis(sids, dim, -1)
                for lead in np.ndindex(*ids_m.shape[:-1]):
                    want[lead] = seq_add(want[lead], 0, ids_m[lead], src_m[lead])
                np.testing.assert_array_equal(got, np.moveaxis(want, -1, dim))


@pytest.mark.cpu_only
def test_index_add_and_scatter_add_are_bit_identical_on_any_thread_count(rng):
    x = rng.standard_normal((300, 70)).astype(np.float32)
    src = rng.standard_normal((5000, 70)).astype(np.float32)
    ids = rng.integers(0, 300, 5000)
    sids = rng.integers(0, 300, (5000, 70))
    sx = rng.standard_normal((5000, 70)).astype(np.float32)
    before = em.get_num_threads()
    try:
        outs = []
        for nt in (1, 2, 3):
            em.set_num_threads(nt)
            outs.append((em.tensor(x).index_add(em.tensor(ids), em.tensor(src), 0).numpy(),
                         em.tensor(sx).scatter_add(em.tensor(sids), em.tensor(src), 0).numpy(),
                         em.tensor(x.T.copy()).index_add(em.tensor(ids), em.tensor(src.T.copy()), 1).numpy(),
                         em.tensor(sx.T.copy()).scatter_add(em.tensor(sids.T.copy()), em.tensor(src.T.copy()), 1).numpy()))
    finally:
        em.set_num_threads(before)
    for o in outs[1:]:
        for a, b in zip(outs[0], o):
            np.testing.assert_array_equal(a, b)
    want = x.astype(np.float64)
    np.add.at(want, ids, src)
    np.testing.assert_allclose(outs[0][0], want, rtol=1e-5, atol=1e-4)


def test_index_errors():
    t = em.zeros(4, 3)
    e = expect_error(lambda: t.index_select(em.tensor([0, 4]), 0), "index_select", em.IndexOutOfRange)
    assert isinstance(e, IndexError)
    expect_error(lambda: t.index_select(em.tensor([0, -5]), 0), "index_select", em.IndexOutOfRange)
    expect_error(lambda: t.index_select(em.tensor([0.0, 1.0]), 0), "index_select", em.DTypeError)
    expect_error(lambda: t.index_select(em.tensor([[0, 1]]), 0), "index_select", em.ShapeError)
    expect_error(lambda: t.index_select(em.tensor([0]), 2), "index_select", em.IndexOutOfRange)
    expect_error(lambda: t.index_select([0.5], 0), "index_select", em.DTypeError)
    expect_error(lambda: t.gather(em.tensor([[0, 3]]), 1), "gather", em.IndexOutOfRange)
    expect_error(lambda: t.gather(em.tensor([0, 1]), 1), "gather", em.ShapeError)
    expect_error(lambda: t.gather(em.tensor([[0]] * 5), 1), "gather", em.ShapeError)
    expect_error(lambda: t.gather(em.tensor([[0.0]]), 1), "gather", em.DTypeError)
    expect_error(lambda: em.cat([t, em.zeros(4, 2)], 0), "cat", em.ShapeError)
    expect_error(lambda: em.cat([t, em.zeros(4)], 0), "cat", em.ShapeError)
    expect_error(lambda: em.cat([t, None], 0), "cat", em.EmberTypeError)
    expect_error(lambda: em.cat([t, t], 2), "cat", em.IndexOutOfRange)
    expect_error(lambda: em.cat([], 0), "cat")
    expect_error(lambda: em.cat([em.zeros(()), em.zeros(())], 0), "cat")
    expect_error(lambda: em.stack([t, em.zeros(3, 4)], 0), "stack", em.ShapeError)
    expect_error(lambda: em.stack([], 0), "stack")
    expect_error(lambda: em.stack([t, t], 3), "stack", em.IndexOutOfRange)
    expect_error(lambda: t.index_add(em.tensor([0]), em.zeros(2, 3), 0), "index_add", em.ShapeError)
    expect_error(lambda: t.index_add(em.tensor([7]), em.zeros(1, 3), 0), "index_add", em.IndexOutOfRange)


@pytest.mark.parametrize("dt", [d for d in (em.float64, em.float32, em.int64, em.uint8) if d in ALL],
                         ids=lambda d: d.name)
def test_mask_index_selects_like_numpy(dt, rng):
    # t[t > 0] with ember's bool comparison masks selects, as torch and numpy do with bool masks, and so
    # does a uint8 0/1 tensor (ember's masks before em.bool; torch's older byte masks)
    for shape, mshape in [((7,), (7,)), ((3, 4), (3, 4)), ((3, 4), (3,)), ((2, 3, 4), (2, 3)), ((0, 3), (0,))]:
        t, a = make_view(rng, shape, dt, "transposed" if len(shape) > 1 else "contiguous")
        m = rng.random(mshape) > 0.5
        mask = em.tensor(m.astype(np.uint8)).eq(1)
        assert mask.dtype == em.bool
        np.testing.assert_array_equal(t[mask].numpy(), a[m])
        np.testing.assert_array_equal(t[em.tensor(m.astype(np.uint8))].numpy(), a[m])
        np.testing.assert_array_equal(t[m].numpy(), a[m])  # a numpy bool array
        if m.size:  # a (nested) list of bools
            np.testing.assert_array_equal(t[m.tolist()].numpy(), a[m])
    # a numpy uint8 array stays integer indices, as in numpy
    t, a = make_view(rng, (4, 2), dt, "contiguous")
    np.testing.assert_array_equal(t[np.array([3, 0, 3], dtype=np.uint8)].numpy(), a[np.array([3, 0, 3], dtype=np.uint8)])
    expect_error(lambda: t[em.tensor([1, 0, 1]).eq(1)], "index", em.ShapeError)
    expect_error(lambda: t[em.zeros(4, 2, 1, dtype=em.uint8)], "index", em.ShapeError)


def test_mask_index_gradient():
    x = np.random.default_rng(3).standard_normal((4, 5)).astype(WIDE_NP)
    v = em.Var(x)
    g = (v[v > 0] ** 2).sum().backward()[v]
    np.testing.assert_allclose(g.numpy(), np.where(x > 0, 2 * x, 0))
    assert gradcheck(lambda t: t[em.tensor(x > 0.3)] * 3.0, (em.Var(x),))
