"""Views share storage: every view op never copies, and in-place writes (slice_set, zero_set, fill_) through
one view are seen by all the others; basic indexing semantics and its errors."""
import numpy as np
import pytest
import torch

import ember as em

from conftest import ALL, TOL, WIDE, WIDE_NP, expect_error, npdt


def views_of(t):
    return [t.transpose(0, 1), t.t(), t.permute(1, 0, 2), t.narrow(1, 1, 2), t[1], t[:, ::2], t[..., None],
            t[None], t.squeeze(), t.unsqueeze(1), t.reshape(12, 2), t.flatten(), t[0, 1:, 1].broadcast_as((5, 3)),
            t.detach(), t.T]


def test_views_share_storage_and_see_writes():
    base = np.arange(24, dtype=np.float32).reshape(3, 4, 2)
    t = em.tensor(base)
    vs = views_of(t)
    refs = [np.swapaxes(base, 0, 1), np.swapaxes(base, -2, -1), base.transpose(1, 0, 2), base[:, 1:3], base[1],
            base[:, ::2], base[..., None], base[None], base, base[:, None], base.reshape(12, 2), base.reshape(-1),
            np.broadcast_to(base[0, 1:, 1], (5, 3)), base, base.T]
    for v, r in zip(vs, refs):
        assert v.storage.same_buffer(t.storage)
        np.testing.assert_array_equal(v.numpy(), r)
    t.fill_(-1.0)
    for v in vs:
        assert (v.numpy() == -1).all()


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_slice_set_through_views(dt, rng):
    base = rng.integers(0, 50, size=(4, 6, 3)).astype(npdt(dt))
    t = em.tensor(base)
    alias = t.permute(2, 0, 1)  # another view of the same storage
    ref = base.copy()
    for dim, off, n in [(0, 1, 2), (1, 0, 6), (1, 4, 2), (2, 2, 1), (-1, 0, 3)]:
        shape = list(base.shape)
        shape[dim] = n
        src_np = rng.integers(0, 50, size=shape).astype(npdt(dt))
        src = em.tensor(src_np)
        if dim == 1:  # a strided source
            src = em.tensor(np.ascontiguousarray(np.swapaxes(src_np, 0, 2))).permute(2, 1, 0)
        t.slice_set(src, dim, off)
        idx = [slice(None)] * 3
        idx[dim] = slice(off, off + n)
        ref[tuple(idx)] = src_np
        np.testing.assert_array_equal(t.numpy(), ref)
        np.testing.assert_array_equal(alias.numpy(), ref.transpose(2, 0, 1))
    # writing into a view writes the base
    v = t[1:3, ::2]
    v.slice_set(em.zeros(2, 3, 1, dtype=dt), 2, 1)
    ref[1:3, ::2, 1] = 0
    np.testing.assert_array_equal(t.numpy(), ref)


def test_slice_set_overlapping_source_reads_old_values():
    t = em.tensor(np.arange(10, dtype=WIDE_NP))
    t.slice_set(t.narrow(0, 0, 6), 0, 4)  # src and dst overlap
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2, 3, 0, 1, 2, 3, 4, 5])
    m = em.tensor(np.arange(9, dtype=np.float32).reshape(3, 3))
    m.slice_set(m.t(), 0, 0)  # transpose in place through an alias
    np.testing.assert_array_equal(m.numpy(), np.arange(9).reshape(3, 3).T)


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_zero_set_on_views(dt, rng):
    base = rng.integers(1, 50, size=(5, 4)).astype(npdt(dt))
    t = em.tensor(base)
    other = t.t()
    t[1:4, 1::2].zero_set()
    ref = base.copy()
    ref[1:4, 1::2] = 0
    np.testing.assert_array_equal(t.numpy(), ref)
    np.testing.assert_array_equal(other.numpy(), ref.T)
    t[:, 0].zero_set()
    ref[:, 0] = 0
    np.testing.assert_array_equal(other.numpy(), ref.T)
    t.zero_set()
    assert not t.numpy().any()


def test_inplace_bumps_version_and_copy_is_independent():
    t = em.ones(3, 3)
    c = t.copy()
    v0 = t.storage.version
    t.zero_set()
    assert t.storage.version > v0
    v1 = t.storage.version
    t.slice_set(em.ones(1, 3), 0, 1)
    assert t.storage.version > v1
    np.testing.assert_array_equal(c.numpy(), np.ones((3, 3)))


def test_slice_set_errors():
    t = em.zeros(4, 3)
    expect_error(lambda: t.slice_set(em.ones(2, 3), 0, 3), "slice_set", em.IndexOutOfRange)
    expect_error(lambda: t.slice_set(em.ones(2, 3), 0, -1), "slice_set", em.IndexOutOfRange)
    expect_error(lambda: t.slice_set(em.ones(2, 2), 0, 0), "slice_set", em.ShapeError)
    expect_error(lambda: t.slice_set(em.ones(2), 0, 0), "slice_set", em.ShapeError)
    expect_error(lambda: t.slice_set(em.ones(2, 3, dtype=em.int64), 0, 0), "slice_set", em.DTypeError)
    expect_error(lambda: t.slice_set(em.ones(2, 3), 2, 0), "slice_set", em.IndexOutOfRange)
    assert (t.numpy() == 0).all()  # failed writes leave the tensor untouched


def test_basic_indexing_matches_numpy(rng):
    base = rng.standard_normal((4, 5, 6)).astype(np.float32)
    t = em.tensor(base)
    for idx in [0, -1, (1, 2), (1, 2, 3), (slice(1, -1), 0), (Ellipsis, 2), (None, 0, None), (Ellipsis, None),
                (slice(None, None, 3), slice(4, 1), 5), (slice(-100, 100),), (2, Ellipsis, slice(1, 6, 2)),
                (np.int64(1), np.int32(-2))]:
        got = t[idx]
        want = base[idx]
        assert got.shape == want.shape, idx
        np.testing.assert_array_equal(got.numpy(), want)
    assert t[1, 2, 3].shape == () and t[1, 2, 3].item() == base[1, 2, 3]
    assert t[em.tensor(2)].shape == (5, 6)


@pytest.mark.parametrize("dt", [d for d in (em.float32, em.float64, em.int64, em.uint8) if d in ALL],
                         ids=lambda d: d.name)
def test_setitem_writes_in_place_like_numpy(dt):
    rng = np.random.default_rng(4)
    a = (rng.random((4, 5)) * 50).astype(npdt(dt))
    t = em.tensor(a.copy())
    row = t[2]  # a view: it must see every write below
    cases = [((1,), 7), ((slice(None), slice(1, 3)), np.array([1, 2])), ((0, 0), 3), ((2, slice(None, None, 2)), 9),
             ((Ellipsis, 4), np.arange(4)), ((slice(1, 3), None, slice(0, 5)), 6)]
    for idx, v in cases:
        t[idx] = em.tensor(v).to_dtype(dt) if isinstance(v, np.ndarray) else v
        a[idx] = v
        np.testing.assert_array_equal(t.numpy(), a)
    t[t > 20] = 1  # a comparison mask
    a[a > 20] = 1
    t[[True, False, True, False]] = em.tensor(np.arange(5)).to_dtype(dt)  # a bool row mask, broadcast value
    a[[True, False, True, False]] = np.arange(5)
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(row.numpy(), a[2])


@pytest.mark.parametrize("dt", [d for d in (em.float32, em.float64, em.int64, em.uint8, em.bfloat16) if d in ALL],
                         ids=lambda d: d.name)
def test_setitem_with_index_arrays_matches_numpy(dt):
    # t[ids] = v writes rows of dim 0 in place, in index order: a repeated index keeps its last value,
    # as numpy does (and torch on CPU); negative indices count from the end
    rng = np.random.default_rng(5)
    a = (rng.random((6, 4)) * 50).astype(np.float32).astype(npdt(dt))
    t = em.tensor(a.copy())
    col = t[:, 1]  # a view: it must see every write
    ids_cases = [[0, 3], np.array([5, -1, 2, 5]), em.tensor([4, 1]), em.tensor(np.array([2, 0], np.uint32)),
                 np.array([[1, 4], [4, 0]]), [], np.array([3], np.int32)]
    for k, ids in enumerate(ids_cases):
        ia = ids.numpy() if isinstance(ids, em.Tensor) else np.asarray(ids, dtype=np.int64)
        rows = ia.shape + a.shape[1:]
        for v in (k + 0.0, (rng.random(rows) * 9).astype(np.float32), (rng.random(4) * 9).astype(np.float32)):
            vv = np.asarray(v).astype(npdt(dt))
            t[ids] = em.tensor(vv) if isinstance(v, np.ndarray) else v
            for j, i in enumerate(ia.reshape(-1)):  # numpy's order: later rows win
                a[i] = np.broadcast_to(vv, rows).reshape(-1, *a.shape[1:])[j]
            np.testing.assert_array_equal(t.numpy().astype(np.float64), a.astype(np.float64), err_msg=str(ids))
    np.testing.assert_array_equal(col.numpy().astype(np.float64), a[:, 1].astype(np.float64))


def test_setitem_with_many_index_rows_matches_numpy(rng):
    # past 64 KB of rows the writes are threaded when the indices are distinct, and stay in index order
    # (the last of a repeated index wins) when they are not
    a = rng.standard_normal((4000, 64)).astype(np.float32)
    t = em.tensor(a.copy())
    for ids in (rng.permutation(4000)[:3000], rng.integers(-4000, 4000, 3000)):
        v = rng.standard_normal((3000, 64)).astype(np.float32)
        t[ids] = em.tensor(v)
        a[ids] = v
        np.testing.assert_array_equal(t.numpy(), a)
    c = rng.standard_normal((64, 4000)).astype(np.float32)  # single elements: columns of a transposed view
    tc = em.tensor(c.copy())
    ids = rng.permutation(4000)[:3000]
    tc.t()[ids] = em.tensor(np.arange(3000 * 64, dtype=np.float32).reshape(3000, 64))
    c.T[ids] = np.arange(3000 * 64, dtype=np.float32).reshape(3000, 64)
    np.testing.assert_array_equal(tc.numpy(), c)


def test_setitem_with_index_arrays_on_strided_targets_and_aliasing_values(rng):
    base = rng.standard_normal((5, 6)).astype(np.float32)
    t = em.tensor(base.copy())
    a = base.copy()
    tv, av = t.t()[1:5], a.T[1:5]  # a transposed, offset view: rows are strided columns of t
    tv[[2, 0]] = em.tensor(np.float32([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]))
    av[[2, 0]] = np.float32([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    np.testing.assert_array_equal(t.numpy(), a)
    # the value is a view of the target itself: the write reads the old rows (numpy does the same)
    t[[0, 1, 2]] = t[1:4]
    a[[0, 1, 2]] = a[1:4].copy()
    np.testing.assert_array_equal(t.numpy(), a)
    t[np.array([4, 3])] = t[np.array([3, 4])]
    a[np.array([4, 3])] = a[np.array([3, 4])]
    np.testing.assert_array_equal(t.numpy(), a)
    # reading with an n-D index array: rows shaped like the index (numpy), differentiable through index_select
    ids = np.array([[4, 0, 1], [1, 1, 3]])
    np.testing.assert_array_equal(t[ids].numpy(), a[ids])
    x = em.Var(base)
    g = (x[ids] * em.tensor(np.arange(36, dtype=np.float32).reshape(2, 3, 6))).sum().backward()[x].numpy()
    want = np.zeros_like(base)
    np.add.at(want, ids.reshape(-1), np.arange(36, dtype=np.float32).reshape(6, 6))
    np.testing.assert_array_equal(g, want)


ONE_ARRAY_INDICES = [
    (slice(None), [0, 3, 1]), (Ellipsis, [4, 0]), (1, slice(None), [2, 2]), ([2, 0], slice(1, 3)),
    (None, slice(None), np.array([[1, 2], [3, 0]])), (slice(None), np.array([True, False, True, True])),
    (0, np.array([[0, 1], [2, 3]]), slice(None, None, 2)), ([[0], [2]], 1), (slice(1, None), -1, [-1, 0]),
    ([1, -3], Ellipsis, 4), (slice(None), slice(None), np.array([False, True, False, True, True])),
    # several arrays: broadcast together, side by side (the result's dims in their place) or apart
    # (the result's dims first); x[arange(n), labels] picks one element per row
    ([0, 2, 2], [1, 3, 0]), (slice(None), [0, 3], [[4], [1]]), ([2, -1], slice(1, 3), [4, 0]),
    (np.arange(3), np.array([1, 0, 3]), 2), ([[0, 1]], [[2], [3]], np.array([True, False, False, True, False])),
]


@pytest.mark.parametrize("k", range(len(ONE_ARRAY_INDICES)))
def test_index_arrays_match_torch(k):
    # index arrays and 1-D masks among ints, slices, None and ...: torch's result (which differs from
    # numpy's when an int and the array are split by a slice: t[1, :, [2, 2]] is (4, 2) in torch)
    idx = ONE_ARRAY_INDICES[k]
    tidx = tuple(torch.from_numpy(np.asarray(i)) if isinstance(i, (list, np.ndarray)) else i for i in idx)
    a = np.random.default_rng(k).standard_normal((3, 4, 5)).astype(WIDE_NP)
    got = em.tensor(a)[idx]
    want = torch.from_numpy(a)[tidx]
    assert got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    # the gradient flows back through the view and index_select (repeated indices accumulate)
    x, tx = em.Var(a), torch.from_numpy(a).requires_grad_()
    w = np.random.default_rng(k + 100).standard_normal(want.shape).astype(WIDE_NP)
    g = (x[idx] * em.tensor(w)).sum().backward()[x].numpy()
    (tx[tidx] * torch.from_numpy(w)).sum().backward()
    rtol, atol = TOL[WIDE.name]
    np.testing.assert_allclose(g, tx.grad.numpy(), rtol=rtol, atol=atol)
    # assignment writes the same elements as torch's (a scalar, then values of the selected shape)
    t, tt = em.tensor(a.copy()), torch.from_numpy(a.copy())
    t[idx] = 7.5
    tt[tidx] = 7.5
    np.testing.assert_array_equal(t.numpy(), tt.numpy())
    if not any(isinstance(i, list) and len(set(map(str, i))) < len(i) for i in idx):  # torch: repeats undefined
        v = np.arange(want.numel(), dtype=WIDE_NP).reshape(want.shape)
        t[idx] = em.tensor(v)
        tt[tidx] = torch.from_numpy(v)
        np.testing.assert_array_equal(t.numpy(), tt.numpy())


@pytest.mark.parametrize("kind", ["contiguous", "transposed"])
def test_mask_assignment_takes_one_value_per_selected_element(kind):
    # as in torch: t[mask] = v broadcasts v to the selection (count,) + rest, so a vector of the count's
    # length goes to the selected elements in row-major order (it used to broadcast against t's shape,
    # and a 4-vector landed by column when 4 elements were selected)
    rng = np.random.default_rng(9)
    a = rng.standard_normal((5, 4)).astype(WIDE_NP)
    t = em.tensor(a.copy()) if kind == "contiguous" else em.tensor(a.T.copy()).t()
    tt = torch.from_numpy(a.copy())
    m = rng.random((5, 4)) < 0.5
    n = int(m.sum())
    for v in (np.arange(n, dtype=WIDE_NP), WIDE_NP.type(2.5), np.arange(n, dtype=WIDE_NP)[::-1].copy()):
        t[m] = em.tensor(v) if v.ndim else float(v)
        tt[torch.from_numpy(m)] = torch.from_numpy(np.asarray(v))
        np.testing.assert_array_equal(t.numpy(), tt.numpy())
    rows = rng.random(5) < 0.5  # a mask over the leading dim: one row (or a broadcast row) per selected row
    r = int(rows.sum())
    for v in (np.arange(r * 4, dtype=WIDE_NP).reshape(r, 4), np.array([9.0, 8.0, 7.0, 6.0], WIDE_NP)):
        t[rows] = em.tensor(v)
        tt[torch.from_numpy(rows)] = torch.from_numpy(v)
        np.testing.assert_array_equal(t.numpy(), tt.numpy())
    # any nonzero byte of an ember mask selects, once (a mask need not hold only 0 and 1)
    m3 = em.tensor(np.where(m, np.uint8(3), np.uint8(0)))
    t[m3] = em.tensor(np.arange(n, dtype=WIDE_NP) + 50)
    tt[torch.from_numpy(m)] = torch.from_numpy(np.arange(n, dtype=WIDE_NP) + 50)
    np.testing.assert_array_equal(t.numpy(), tt.numpy())
    bad = np.arange(n + 1, dtype=WIDE_NP)  # neither the count nor 1: refused, nothing written
    before = t.numpy()
    expect_error(lambda: t.__setitem__(m, em.tensor(bad)), "setitem", em.ShapeError)
    np.testing.assert_array_equal(t.numpy(), before)


def test_empty_index_arrays_and_empty_tensors():
    t = em.tensor(np.arange(12, dtype=WIDE_NP).reshape(3, 4))
    assert t[[]].shape == (0, 4) and t[:, []].shape == (3, 0) and t[[], []].shape == (0,)
    assert em.zeros(3, 0)[[1, 2]].shape == (2, 0) and em.zeros(0, 4)[[]].shape == (0, 4)
    for idx in ([], (slice(None), []), ([], []), np.zeros(0, np.int64)):
        t[idx] = -1.0  # selects nothing: writes nothing
    z = em.zeros(0, 4)
    z[[]] = 1.0
    np.testing.assert_array_equal(t.numpy(), np.arange(12.0).reshape(3, 4))
    expect_error(lambda: z.__setitem__(([1], [2]), 0.0), "setitem", em.IndexOutOfRange)
    assert t.index_add(em.tensor(np.zeros(0, np.int64)), em.zeros(0, 4, dtype=WIDE), 0).numpy().sum() == 66.0


def test_setitem_refusals():
    t = em.zeros(3, 4)
    expect_error(lambda: t.__setitem__([0, 5], 1.0), "setitem", em.IndexOutOfRange)
    expect_error(lambda: t.__setitem__([0, -4], 1.0), "setitem", em.IndexOutOfRange)
    expect_error(lambda: t.__setitem__([0, 1], em.ones(3, 4)), "setitem", em.ShapeError)
    expect_error(lambda: t.__setitem__(np.array([0.0, 1.0]), 1.0), "setitem", em.DTypeError)
    expect_error(lambda: t.__setitem__([0, 1], "x"), "setitem", em.DTypeError)
    assert (t.numpy() == 0).all()  # a bad index anywhere in the list: nothing was written
    expect_error(lambda: em.zeros(()).__setitem__([0], 1.0), "setitem", em.IndexOutOfRange)
    # index arrays among other indices: one per index, 1-D masks of the right length, ids in range
    cases = [(([0, 1], [1, 2, 0]), em.ShapeError), ((slice(None), np.ones((4, 1), bool)), em.UnsupportedOp),
             (([0, 3], [0, 4]), em.IndexOutOfRange), (([0, 1], [0.5, 1]), em.DTypeError),
             ((slice(None), np.array([True, False])), em.ShapeError), ((slice(None), [0, 4]), em.IndexOutOfRange),
             ((0, 1, [0]), em.IndexOutOfRange), ((slice(None), [0.5]), em.DTypeError)]
    for idx, cls in cases:
        expect_error(lambda idx=idx: t[idx], "index", cls)
        expect_error(lambda idx=idx: t.__setitem__(idx, 0.0), "setitem", cls)
    assert (t.numpy() == 0).all()
    expect_error(lambda: em.zeros(3).broadcast_as((2, 3)).__setitem__([1], 1.0), "setitem", em.EmberValueError)
    expect_error(lambda: t.__setitem__(0, em.zeros(3)), "setitem", em.ShapeError)
    expect_error(lambda: t.__setitem__(em.tensor([1, 0]).eq(1), 1.0), "setitem", em.ShapeError)
    expect_error(lambda: t.__setitem__(5, 1.0), "index", em.IndexOutOfRange)
    b = em.zeros(3).broadcast_as((2, 3))  # a column of it has stride 0: two elements, one address
    expect_error(lambda: b.__setitem__((slice(None), 0), 1.0), "setitem", em.EmberValueError)
    # a variable (a leaf) is refused, as in torch (no_grad allows it); writes into results are recorded
    # (tests/test_setitem_grad.py)
    v = em.Var([[1.0, 2.0], [3.0, 4.0]])
    expect_error(lambda: v.__setitem__(0, 0.0), "setitem", em.UnsupportedOp)
    expect_error(lambda: v.__setitem__(v > 2, 0.0), "setitem", em.UnsupportedOp)
    np.testing.assert_array_equal(v.numpy(), [[1.0, 2.0], [3.0, 4.0]])  # nothing was written
    with em.no_grad():
        v[v > 2] = 0.0
    np.testing.assert_array_equal(v.numpy(), [[1.0, 2.0], [0.0, 0.0]])


def test_indexing_errors():
    t = em.zeros(4, 5)
    e = expect_error(lambda: t[4], "index", em.IndexOutOfRange)
    assert isinstance(e, IndexError)
    expect_error(lambda: t[-5], "index", em.IndexOutOfRange)
    expect_error(lambda: t[0, 5], "index", em.IndexOutOfRange)
    expect_error(lambda: t[0, 0, 0], "index", em.IndexOutOfRange)
    expect_error(lambda: t[1.5], "index", em.IndexOutOfRange)
    expect_error(lambda: t[0, 1.0], "index", em.IndexOutOfRange)
    expect_error(lambda: t[::-1], "index")
    expect_error(lambda: t[::0], "index")
    expect_error(lambda: t[..., 0, ...], "index", em.IndexOutOfRange)
    expect_error(lambda: t["a"], "index", em.IndexOutOfRange)
    assert t[True].shape == (1,) + t.shape and t[False].shape == (0,) + t.shape  # 0-d masks (test_torch_names.py)
    expect_error(lambda: t[np.array([True, False, True])], "index", em.ShapeError)  # a mask of the wrong length
    expect_error(lambda: t[[0.0, 1.0]], "index", em.DTypeError)
    expect_error(lambda: t[em.tensor(1.0)], "index", em.IndexOutOfRange)
    expect_error(lambda: em.zeros(())[0], "index", em.IndexOutOfRange)


@pytest.mark.parametrize("dt", [em.uint8, em.bfloat16, em.float32, em.int64], ids=lambda d: d.name)
def test_transposing_copies_at_tile_sizes(dt, rng):
    # copies whose destination runs read the source with a stride go through square tiles: sizes around
    # and past the tile (64), odd sizes, an offset start, outer dims, and a strided (non-contiguous)
    # destination through slice_set, each checked against numpy
    for shape, perm in [((70, 130), (1, 0)), ((64, 64), (1, 0)), ((3, 40, 97), (0, 2, 1)),
                        ((2, 33, 5, 65), (0, 2, 3, 1)), ((200, 3, 48), (2, 1, 0))]:
        a = rng.integers(0, 100, size=(shape[0] + 2,) + shape[1:]).astype(npdt(dt))
        t = em.tensor(a)[2:]  # offset start
        want = np.transpose(a[2:], perm)
        got = t.permute(*perm).contiguous()
        np.testing.assert_array_equal(got.numpy(), want)
    big = rng.integers(0, 100, size=(96, 80)).astype(npdt(dt))
    dst = em.zeros(80, 200, dtype=dt)
    dst[:, 50:146] = em.tensor(big).t()  # a strided destination (rows of 200) written by a transposing copy
    ref = np.zeros((80, 200), dtype=npdt(dt))
    ref[:, 50:146] = big.T
    np.testing.assert_array_equal(dst.numpy(), ref)
