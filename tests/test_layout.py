"""Layout: the public API (shape, stride, start_offset, contiguity, offsets, numel) and the view rules."""
import numpy as np
import pytest

import ember as em

from conftest import WIDE_NP, expect_error


def np_strides(a):
    return tuple(s // a.itemsize for s in a.strides)


def check_layout_like(t, a):
    """t's layout describes the same elements as numpy view a of a base array of the same item size."""
    lay = t.layout
    assert lay.shape == a.shape == t.shape
    assert isinstance(lay.stride, tuple) and isinstance(lay.shape, tuple)
    if a.size > 1:
        # strides agree wherever the dim has more than one element (numpy may pick anything for size 1)
        for d, (s1, s2) in enumerate(zip(lay.stride, np_strides(a))):
            if a.shape[d] > 1:
                assert s1 == s2, (lay, a.strides)
    assert lay.numel() == a.size == t.numel()


def test_contiguous_layout():
    t = em.zeros(2, 3, 4)
    lay = t.layout
    assert lay.shape == (2, 3, 4) and lay.stride == (12, 4, 1) and lay.start_offset == 0
    assert lay.is_contiguous() and lay.contiguous_offsets() == (0, 24) and lay.numel() == 24
    assert isinstance(lay, em.Layout)
    s = em.zeros(()).layout
    assert s.shape == () and s.stride == () and s.numel() == 1 and s.contiguous_offsets() == (0, 1)
    e = em.zeros(3, 0, 2).layout
    assert e.numel() == 0


def test_layout_constructor_and_equality():
    a = em.Layout([2, 3], [3, 1], 5)
    assert a.shape == (2, 3) and a.stride == (3, 1) and a.start_offset == 5
    assert a.contiguous_offsets() == (5, 11)
    assert a == em.Layout.contiguous([2, 3], 5)
    assert hash(a) == hash(em.Layout.contiguous([2, 3], 5))
    assert em.Layout([2, 3], [1, 2], 0).contiguous_offsets() is None
    assert "Layout(" in repr(a)


def test_transpose_narrow_offsets():
    base = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = em.tensor(base)
    tt = t.transpose(0, 2)
    check_layout_like(tt, base.transpose(2, 1, 0))
    assert not tt.layout.is_contiguous() and tt.layout.contiguous_offsets() is None
    n = t.narrow(0, 1, 2)
    assert n.layout.start_offset == 20 and n.layout.is_contiguous()
    assert n.layout.contiguous_offsets() == (20, 60)
    n2 = t.narrow(2, 1, 3)
    assert n2.layout.start_offset == 1 and not n2.layout.is_contiguous()
    check_layout_like(n2, base[:, :, 1:4])
    # narrowing the leading dim of a row keeps it contiguous; the last element window too
    r = t[1, 2]
    assert r.layout.start_offset == 30 and r.layout.contiguous_offsets() == (30, 35)


def test_basic_indexing_layouts():
    base = np.arange(2 * 3 * 4 * 5, dtype=WIDE_NP).reshape(2, 3, 4, 5)
    t = em.tensor(base)
    for idx in [(1,), (slice(None), 2), (Ellipsis, 3), (None, 1, Ellipsis, None), (slice(1, 3), None, slice(0, 4, 3)),
                (slice(None, None, 2), slice(None), slice(1, None, 2)), (-1, -2), (slice(-3, -1),),
                (slice(10, 20),), (slice(3, 1),), (0, slice(None), 0, slice(None, None, 4))]:
        v = t[idx]
        a = base[idx]
        check_layout_like(v, a)
        np.testing.assert_array_equal(v.numpy(), a)
        assert v.layout.start_offset == (a.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // base.itemsize \
            or a.size == 0


def test_size1_and_scalar_views():
    t = em.tensor(np.arange(6, dtype=np.int64).reshape(1, 6))
    assert t.squeeze(0).shape == (6,)
    assert t.squeeze(1).shape == (1, 6)  # a non-1 dim is left alone, like torch
    assert t.squeeze().shape == (6,)
    assert t.unsqueeze(0).shape == (1, 1, 6) and t.unsqueeze(-1).shape == (1, 6, 1)
    assert t.unsqueeze(2).layout.stride[-1] == 1
    s = t[0, 3]
    assert s.shape == () and s.item() == 3 and s.layout.start_offset == 3
    assert s.unsqueeze(0).shape == (1,) and s.reshape(1, 1).numpy().tolist() == [[3]]


def test_broadcast_as_is_stride0_view():
    t = em.tensor(np.arange(3, dtype=np.float32).reshape(3, 1))
    b = t.broadcast_as((2, 3, 4))
    assert b.layout.stride == (0, 1, 0)
    assert b.storage is t.storage or b.storage.same_buffer(t.storage)
    np.testing.assert_array_equal(b.numpy(), np.broadcast_to(t.numpy(), (2, 3, 4)))
    assert not b.layout.is_contiguous()
    expect_error(lambda: t.broadcast_as((2, 4)), "broadcast_as", em.ShapeError)
    expect_error(lambda: t.broadcast_as((4,)), "broadcast_as", em.ShapeError)


@pytest.mark.parametrize("seed", range(6))
def test_random_view_chains_match_numpy(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in rng.integers(1, 5, size=4))
    base = rng.standard_normal(shape).astype(np.float32)
    t, a = em.tensor(base), base
    for _ in range(6):
        op = rng.integers(0, 5)
        nd = a.ndim
        if nd == 0:
            break
        if op == 0 and nd >= 2:
            d0, d1 = (int(x) for x in rng.integers(-nd, nd, size=2))
            t, a = t.transpose(d0, d1), np.swapaxes(a, d0, d1)
        elif op == 1:
            perm = [int(x) for x in rng.permutation(nd)]
            t, a = t.permute(*perm), a.transpose(perm)
        elif op == 2:
            d = int(rng.integers(0, nd))
            n = a.shape[d]
            s = int(rng.integers(0, n))
            ln = int(rng.integers(0, n - s + 1))
            t, a = t.narrow(d, s, ln), np.take(a, range(s, s + ln), axis=d)
        elif op == 3:
            d = int(rng.integers(0, nd))
            step = int(rng.integers(1, 3))
            idx = (slice(None),) * d + (slice(None, None, step),)
            t, a = t[idx], a[idx]
        else:
            d = int(rng.integers(0, nd + 1))
            t, a = t.unsqueeze(d), np.expand_dims(a, d)
        assert t.shape == a.shape
        np.testing.assert_array_equal(t.numpy(), a)
        np.testing.assert_array_equal(t.contiguous().numpy(), a)
        assert t.contiguous().layout.is_contiguous()


def test_reshape_view_or_copy():
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = em.tensor(base)
    r = t.reshape(6, 4)
    assert r.storage.same_buffer(t.storage) and r.layout.stride == (4, 1)
    # merging dims that are not mutually contiguous needs a copy
    tt = t.transpose(1, 2)
    r2 = tt.reshape(2, 12)
    assert not r2.storage.same_buffer(t.storage)
    np.testing.assert_array_equal(r2.numpy(), base.transpose(0, 2, 1).reshape(2, 12))
    # splitting a strided dim is still a view
    n = t.narrow(2, 0, 2)  # (2, 3, 2), not contiguous
    r3 = n.reshape(6, 2)
    assert r3.storage.same_buffer(t.storage)
    np.testing.assert_array_equal(r3.numpy(), base[:, :, :2].reshape(6, 2))
    r4 = t[:, :, 1].reshape(2, 3, 1)
    np.testing.assert_array_equal(r4.numpy(), base[:, :, 1].reshape(2, 3, 1))
    assert t.reshape(-1).shape == (24,) and t.reshape(4, -1).shape == (4, 6) and t.reshape((3, 8)).shape == (3, 8)
    assert t.flatten().shape == (24,) and t.flatten(1).shape == (2, 12) and t.flatten(0, 1).shape == (6, 4)
    assert em.zeros(3, 0).reshape(0, 5).shape == (0, 5)
    assert em.zeros(()).flatten().shape == (1,)
    expect_error(lambda: t.reshape(5, 5), "reshape", em.ShapeError)
    expect_error(lambda: t.reshape(-1, -1), "reshape", em.ShapeError)
    expect_error(lambda: t.reshape(7, -1), "reshape", em.ShapeError)


@pytest.mark.parametrize("seed", range(8))
def test_reshape_random_matches_numpy(seed):
    rng = np.random.default_rng(100 + seed)
    shape = tuple(int(s) for s in rng.integers(1, 4, size=4))
    base = rng.standard_normal(shape).astype(WIDE_NP)
    perm = [int(x) for x in rng.permutation(4)]
    t, a = em.tensor(base).permute(*perm), base.transpose(perm)
    if rng.integers(0, 2):
        t, a = t[::2], a[::2]
    n = a.size
    divs = [d for d in range(1, n + 1) if n % d == 0]
    d = int(rng.choice(divs))
    for shp in [(n,), (d, n // d), (n // d, 1, d), (1, n, 1)]:
        r = t.reshape(*shp)
        np.testing.assert_array_equal(r.numpy(), a.reshape(shp))
        view = r.storage.same_buffer(t.storage)
        # a view exactly when numpy can do it without a copy
        try:
            a.view().shape = shp
            np_view = True
        except AttributeError:
            np_view = False
        if np_view:
            assert view, (a.shape, a.strides, shp)


def test_layout_view_errors():
    t = em.zeros(2, 3)
    expect_error(lambda: t.transpose(0, 2), "transpose", em.IndexOutOfRange)
    expect_error(lambda: t.permute(0, 0), "permute", em.EmberError)
    expect_error(lambda: t.permute(0), "permute", em.ShapeError)
    expect_error(lambda: t.narrow(1, 2, 2), "narrow", em.IndexOutOfRange)
    expect_error(lambda: t.narrow(1, -1, 1), "narrow", em.IndexOutOfRange)
    expect_error(lambda: t.narrow(5, 0, 1), "narrow", em.IndexOutOfRange)
    expect_error(lambda: t.squeeze(2), "squeeze", em.IndexOutOfRange)
    expect_error(lambda: t.unsqueeze(4), "unsqueeze", em.IndexOutOfRange)
    expect_error(lambda: em.zeros(3).t(), "t", em.ShapeError)
    assert isinstance(expect_error(lambda: t.narrow(1, 2, 2), "narrow"), IndexError)
