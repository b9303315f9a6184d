"""sort / argsort / topk on the CPU and the emulated Metal device against torch: values and indices (ties in
index order, NaN largest) for every dtype, strided views, long lines, gradients, and the [op] errors."""
import numpy as np
import pytest
import torch
from devcheck import gradcheck

import ember as em

from conftest import VIEWS, WIDE_NP, expect_error, f64, make_view, npdt, rand_np

METAL_DTYPES = [em.float32, em.float16, em.bfloat16, em.int64, em.uint32, em.uint8]


@pytest.fixture(params=["cpu", "metal"])
def dev(request, monkeypatch):
    if request.param == "metal":
        if em.metal.backend() != "apple":
            monkeypatch.setenv("EMBER_METAL", "emulate")
        assert em.metal_is_available()
    return request.param


def dtypes_of(dev):
    return METAL_DTYPES + ([em.float64] if dev == "cpu" else [])


def with_ties_and_nan(rng, a, dt):
    """a with many repeated values (index order decides ties) and, for floats, some NaNs."""
    a = a.copy()
    if dt.is_float:
        a[...] = np.round(f64(a)).astype(npdt(dt))  # few distinct values: ties everywhere
        flat = a.reshape(-1)
        if flat.size:
            flat[rng.integers(0, flat.size, size=max(1, flat.size // 7))] = np.nan
    return a


def torch_ref(a, dt):
    """A torch tensor with a's values, exactly (halves through float32, unsigned through int64)."""
    return torch.from_numpy(np.ascontiguousarray(f64(a) if dt.is_float else a.astype(np.int64)))


def check_sort(x, ref, dt, dim, descending):
    vals, idx = em.sort(x, dim=dim, descending=descending)
    tv, ti = torch.sort(torch_ref(ref, dt), dim=dim, descending=descending, stable=True)
    assert vals.dtype == dt and idx.dtype == em.int64 and vals.shape == tuple(ref.shape)
    np.testing.assert_array_equal(idx.numpy(), ti.numpy())
    got = vals.numpy()
    np.testing.assert_array_equal(f64(got) if dt.is_float else got.astype(np.int64), tv.numpy())


@pytest.mark.parametrize("kind", VIEWS)
def test_sort_every_dtype_and_view(dev, kind, rng):
    for dt in dtypes_of(dev):
        x, base = make_view(rng, (4, 5, 6), dt, kind, device=dev)
        ref = np.array(base)
        if kind == "contiguous":  # ties and NaNs here; the views check the strided reads
            ref = with_ties_and_nan(rng, ref, dt)
            x = em.tensor(ref, device=dev)
        for dim in (0, 1, -1):
            for descending in (False, True):
                check_sort(x, ref, dt, dim, descending)


@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000, 2049, 4096, 5000])
def test_sort_line_lengths(dev, n, rng):
    # 2049 (int64) and 5000 pass the threadgroup capacity on Metal: the device-memory stages
    for dt in (em.float32, em.int64, em.float16):
        ref = with_ties_and_nan(rng, rand_np(rng, (2, n), dt, -50, 50), dt)
        for descending in (False, True):
            check_sort(em.tensor(ref, device=dev), ref, dt, -1, descending)
        check_sort(em.tensor(ref.T.copy(), device=dev), ref.T.copy(), dt, 0, False)


def test_sort_nan_order_and_special_values(dev):
    a = np.array([np.nan, 1.0, -np.inf, np.inf, -0.0, np.nan, 0.0, -1.0], np.float32)
    v, i = em.sort(em.tensor(a, device=dev))
    np.testing.assert_array_equal(v.numpy(), [-np.inf, -1.0, -0.0, 0.0, 1.0, np.inf, np.nan, np.nan])
    np.testing.assert_array_equal(i.numpy(), [2, 7, 4, 6, 1, 3, 0, 5])
    v, i = em.sort(em.tensor(a, device=dev), descending=True)
    np.testing.assert_array_equal(i.numpy(), [0, 5, 3, 1, 4, 6, 7, 2])


def test_sort_long_lines_special_values_every_dtype(dev, rng):
    # lines of 256 and more take the CPU's radix sort on key images: -0.0 must tie with +0.0 (index
    # order), NaN sorts above inf, each dtype's extremes keep their order
    special = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, -1.5, 1.5, -0.0, np.nan, 0.0], np.float64)
    for dt in dtypes_of(dev):
        if dt.is_float:
            ref = np.concatenate([np.tile(special, 30), rng.uniform(-3, 3, 100)])
            ref = ref[rng.permutation(ref.size)].astype(npdt(dt))
        else:
            info = np.iinfo(npdt(dt))
            ref = rng.integers(info.min, info.max, 400, dtype=npdt(dt), endpoint=True)
            ref[:4] = [info.min, info.max, info.min, info.max]
        for descending in (False, True):
            check_sort(em.tensor(ref, device=dev), ref, dt, 0, descending)
            check_sort(em.tensor(np.stack([ref, ref[::-1]], 1), device=dev), np.stack([ref, ref[::-1]], 1), dt,
                       0, descending)


def test_sort_scalar_and_empty(dev):
    v, i = em.sort(em.tensor(3.5, device=dev))
    assert v.shape == () and i.shape == () and v.item() == 3.5 and i.item() == 0
    v, i = em.sort(em.zeros(3, 0, device=dev), dim=1)
    assert v.shape == (3, 0) and i.shape == (3, 0)
    v, i = em.sort(em.zeros(0, 4, device=dev), dim=1)
    assert v.shape == (0, 4) and i.dtype == em.int64


def test_argsort_and_methods(dev, rng):
    a = rng.standard_normal((5, 9)).astype(np.float32)
    x = em.tensor(a, device=dev)
    np.testing.assert_array_equal(em.argsort(x, dim=0).numpy(), np.argsort(a, axis=0, kind="stable"))
    np.testing.assert_array_equal(x.argsort(descending=True).numpy(), np.argsort(-a, axis=1, kind="stable"))
    np.testing.assert_array_equal(x.sort(0)[0].numpy(), np.sort(a, axis=0))
    v, i = x.topk(3, dim=0, largest=False)
    np.testing.assert_array_equal(i.numpy(), np.argsort(a, axis=0, kind="stable")[:3])


@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_torch(dev, largest, rng):
    for dt in dtypes_of(dev):
        for shape, dim in (((6, 11), -1), ((7, 3, 4), 0), ((5, 8), 1)):
            ref = with_ties_and_nan(rng, rand_np(rng, shape, dt), dt)
            x = em.tensor(ref, device=dev)
            n = shape[dim]
            for k in (0, 1, n // 2, n):
                v, i = em.topk(x, k, dim=dim, largest=largest)
                tv, ti = torch.sort(torch_ref(ref, dt), dim=dim, descending=largest, stable=True)
                ti = ti.narrow(dim, 0, k)
                np.testing.assert_array_equal(i.numpy(), ti.numpy())
                want = torch.topk(torch_ref(ref, dt), k, dim=dim, largest=largest).values.numpy()
                got = v.numpy()
                np.testing.assert_array_equal(f64(got) if dt.is_float else got.astype(np.int64), want)


def check_topk(x, ref, dt, k, dim, largest):
    v, i = em.topk(x, k, dim=dim, largest=largest)
    tr = torch_ref(ref, dt)
    ti = torch.sort(tr, dim=dim, descending=largest, stable=True)[1].narrow(dim, 0, k)
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    want = torch.topk(tr, k, dim=dim, largest=largest).values.numpy()
    got = v.numpy()
    np.testing.assert_array_equal(f64(got) if dt.is_float else got.astype(np.int64), want)


@pytest.mark.parametrize("n,k", [(50000, 1), (50000, 10), (50000, 50), (3000, 7), (5000, 1500)])
def test_topk_long_lines_select_as_torch(dev, n, k, rng):
    # 50000-wide rows take the CPU's line-by-line selection and, one row alone (fewer rows than
    # threads), its chunked one; the Metal threadgroup selection; k = 1500 the partition (CPU) and sort
    # (Metal) paths. Integer-valued keys make ties at the threshold, a few NaNs come first for largest
    # and never for smallest, the transposed copy reads a strided dim.
    for dt in [em.float32, em.float16, em.int64] + ([em.float64] if dev == "cpu" else []):
        for ties in (False, True):
            if dt.is_float:
                ref = rng.standard_normal((2, n)) * (30 if ties else 1)
                ref = (np.round(ref) if ties else ref).astype(npdt(dt))
                ref[0, rng.integers(0, n, 3)] = np.nan
            else:
                ref = rng.integers(-40, 40, (2, n)) if ties else rng.permutation(2 * n).reshape(2, n) - n
            for largest in (True, False):
                check_topk(em.tensor(ref, device=dev), ref, dt, k, -1, largest)
                check_topk(em.tensor(ref[:1], device=dev), ref[:1], dt, k, -1, largest)
            check_topk(em.tensor(ref.T.copy(), device=dev).transpose(0, 1), ref, dt, k, 1, True)


def test_topk_dim0_of_a_wide_tensor_and_scalars(dev, rng):
    ref = rng.standard_normal((300, 9)).astype(np.float32)
    x = em.tensor(ref, device=dev)
    for k in (1, 5, 60):
        check_topk(x, ref, em.float32, k, 0, True)
        check_topk(x[1:, ::2], ref[1:, ::2], em.float32, k, 0, False)
    for k in (0, 1):  # torch: a scalar's topk is the scalar
        v, i = em.topk(em.tensor(2.5, device=dev), k)
        assert v.shape == () and i.shape == () and v.item() == 2.5 and i.item() == 0


def test_sort_topk_gradcheck_float64(rng):
    a = rng.standard_normal((4, 6))
    assert gradcheck(lambda x: em.sort(x, dim=1)[0], [em.tensor(a.astype(WIDE_NP))])
    assert gradcheck(lambda x: em.sort(x, dim=0, descending=True)[0], [em.tensor(a.astype(WIDE_NP))])
    assert gradcheck(lambda x: em.topk(x, 3, dim=1)[0], [em.tensor(a.astype(WIDE_NP))])
    assert gradcheck(lambda x: em.topk(x.transpose(0, 1), 2, dim=1, largest=False)[0], [em.tensor(a.astype(WIDE_NP))])
    assert gradcheck(lambda x: em.sort(x.sum())[0], [em.tensor(a.astype(WIDE_NP))])  # a 0-d sort


def test_sort_topk_gradient_matches_torch(dev, rng):
    a = rng.standard_normal((5, 7)).astype(np.float32)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    x = em.Var(em.tensor(a, device=dev))
    g = ((em.topk(x, 3, dim=1)[0] * em.tensor(w, device=dev)).sum() + em.sort(x, 0)[0].sum()).backward()
    tx = torch.tensor(a, requires_grad=True)
    ((torch.topk(tx, 3, dim=1)[0] * torch.tensor(w)).sum() + torch.sort(tx, 0)[0].sum()).backward()
    np.testing.assert_allclose(g[x].numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_sort_errors(dev):
    x = em.ones(3, 4, device=dev)
    expect_error(lambda: em.sort([1, 2]), "sort", em.EmberTypeError)
    expect_error(lambda: em.sort(x, dim=2), "sort", em.IndexOutOfRange)
    expect_error(lambda: em.sort(x, dim=1.0), "sort", em.EmberTypeError)
    expect_error(lambda: em.sort(x, descending=2), "sort", em.EmberValueError)
    expect_error(lambda: em.sort(x, stable="yes"), "sort", em.EmberTypeError)
    expect_error(lambda: em.argsort(x, dim=-3), "argsort", em.IndexOutOfRange)
    expect_error(lambda: em.topk(x, 5), "topk", em.EmberValueError)
    expect_error(lambda: em.topk(x, -1), "topk", em.EmberValueError)
    expect_error(lambda: em.topk(x, 1.5), "topk", em.EmberTypeError)
    expect_error(lambda: em.topk(x, 1, dim=3), "topk", em.IndexOutOfRange)
    expect_error(lambda: em.topk("x", 1), "topk", em.EmberTypeError)


def test_sort_bad_layout_refused_by_the_core(dev):
    x = em.ones(6, device=dev)
    bad = em.Layout([4], [2], 0)  # reaches element 6 of a 6-element storage
    expect_error(lambda: em._C.sort(x._storage, bad, 0, False, False), "sort", em.IndexOutOfRange)


def test_sort_many_lines_threaded_matches_numpy(rng):
    a = rng.standard_normal((3000, 37)).astype(np.float32)
    v, i = em.sort(em.tensor(a).transpose(0, 1), dim=0)
    np.testing.assert_array_equal(v.numpy(), np.sort(a.T, axis=0))
    np.testing.assert_array_equal(i.numpy(), np.argsort(a.T, axis=0, kind="stable"))


# ----------------------------------------------------------------------------------------- scans
def torch_scan(name, t, dim, exclusive, reverse):
    """torch's scan with the exclusive / reverse forms built from flips and shifts."""
    n = t.shape[dim]
    if reverse:
        t = t.flip(dim)
    r = getattr(torch, name)(t, dim)
    vals, ids = (r.values, r.indices) if name in ("cummax", "cummin") else (r, None)
    if exclusive:
        fill = torch.zeros_like(vals.narrow(dim, 0, 1)) + (1 if name == "cumprod" else 0)
        vals = torch.cat([fill, vals.narrow(dim, 0, n - 1)], dim)
    if reverse:
        vals = vals.flip(dim)
        ids = None if ids is None else (n - 1) - ids.flip(dim)
    return vals, ids


def check_scan(name, x, ref, dt, dim, exclusive=False, reverse=False):
    fn = getattr(em, name)
    got = fn(x, dim, reverse=reverse) if name in ("cummax", "cummin") else fn(x, dim, exclusive, reverse)
    tv, ti = torch_scan(name, torch_ref(ref, dt), dim, exclusive, reverse)
    if ti is not None:
        vals, idx = got
        np.testing.assert_array_equal(idx.numpy(), ti.numpy())
    else:
        vals = got
    v = vals.numpy()
    if dt.is_float:
        assert vals.dtype == dt
        scale = 1 if name in ("cummax", "cummin") else 8
        r = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2, "float64": 1e-12}[dt.name] * scale
        np.testing.assert_allclose(f64(v), tv.numpy(), rtol=r, atol=r, equal_nan=True)
    else:
        assert vals.dtype == (dt if name in ("cummax", "cummin") else em.int64)
        np.testing.assert_array_equal(v.astype(np.int64), tv.numpy())


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "cummin"])
@pytest.mark.parametrize("kind", ["contiguous", "transposed", "stepped", "offset", "broadcast"])
def test_scans_every_dtype_and_view(dev, name, kind, rng):
    for dt in dtypes_of(dev):
        lo, hi = (0.5, 1.5) if name == "cumprod" else (-3.0, 3.0)
        x, ref = make_view(rng, (4, 5, 6), dt, kind, device=dev, lo=lo, hi=hi)
        if kind == "contiguous" and name in ("cummax", "cummin"):  # ties and NaNs
            ref = with_ties_and_nan(rng, ref, dt)
            x = em.tensor(ref, device=dev)
        for dim in (0, 1, -1):
            for reverse in (False, True):
                check_scan(name, x, np.array(ref), dt, dim, reverse=reverse)
                if name in ("cumsum", "cumprod"):
                    check_scan(name, x, np.array(ref), dt, dim, exclusive=True, reverse=reverse)


@pytest.mark.parametrize("n", [1, 31, 32, 33, 100, 1000])
def test_scan_line_lengths(dev, n, rng):
    # chunks of 32 with a carry on Metal: the boundaries around 32
    for dt in (em.float32, em.int64):
        ref = with_ties_and_nan(rng, rand_np(rng, (3, n), dt), dt) if dt.is_float else rand_np(rng, (3, n), dt)
        for name in ("cumsum", "cummax", "cummin"):
            check_scan(name, em.tensor(ref, device=dev), ref, dt, 1)
            check_scan(name, em.tensor(ref, device=dev), ref, dt, 1, reverse=True)


@pytest.mark.parametrize("shape", [(3, 37, 21), (40, 33), (2, 5, 70), (6, 50), (40, 6)])
def test_cumsum_cumprod_grouped_lines_and_tails(dev, shape, rng):
    # the CPU scans 16, 8 or 4 lines in lock-step (an inner contiguous dim's chunks, or whole lines):
    # these shapes leave partial groups, every dim and view goes through them or the one-line loop
    for dt in (em.float32, em.int64, em.float16):
        for name, (lo, hi) in (("cumsum", (-3.0, 3.0)), ("cumprod", (0.8, 1.25))):
            x, ref = make_view(rng, shape, dt, "contiguous", device=dev, lo=lo, hi=hi)
            xt, reft = make_view(rng, shape, dt, "transposed", device=dev, lo=lo, hi=hi)
            for dim in range(len(shape)):
                for exclusive, reverse in ((False, False), (True, False), (False, True), (True, True)):
                    check_scan(name, x, np.array(ref), dt, dim, exclusive, reverse)
                check_scan(name, xt, np.array(reft), dt, dim)


def test_scan_integer_sums_are_int64(dev):
    a = np.full((300,), 200, np.uint8)
    got = em.cumsum(em.tensor(a, device=dev), 0)
    assert got.dtype == em.int64 and got.numpy()[-1] == 60000
    np.testing.assert_array_equal(em.cumprod(em.tensor(np.array([2, 3, 4], np.uint8), device=dev), 0).numpy(),
                                  [2, 6, 24])


def test_scan_gradcheck_float64(rng):
    a = rng.uniform(0.5, 1.5, (3, 5))
    for ex in (False, True):
        for rev in (False, True):
            assert gradcheck(lambda x, ex=ex, rev=rev: em.cumsum(x, 1, ex, rev), [em.tensor(a.astype(WIDE_NP))])
            assert gradcheck(lambda x, ex=ex, rev=rev: em.cumprod(x, 0, ex, rev), [em.tensor(a.astype(WIDE_NP))])
    assert gradcheck(lambda x: em.cummax(x, 1)[0], [em.tensor(a.astype(WIDE_NP))])
    assert gradcheck(lambda x: em.cummin(x.transpose(0, 1), 1, reverse=True)[0], [em.tensor(a.astype(WIDE_NP))])


def test_scan_gradient_matches_torch(dev, rng):
    a = rng.uniform(0.5, 1.5, (4, 6)).astype(np.float32)
    w = rng.standard_normal((4, 6)).astype(np.float32)
    x = em.Var(em.tensor(a, device=dev))
    wt = em.tensor(w, device=dev)
    g = ((em.cumsum(x, 1) + em.cumprod(x, 0) + em.cummax(x, 1)[0] + em.cummin(x, 0)[0]) * wt).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    ((torch.cumsum(tx, 1) + torch.cumprod(tx, 0) + torch.cummax(tx, 1)[0] + torch.cummin(tx, 0)[0])
     * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(g[x].numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_scan_methods_scalar_and_empty(dev):
    x = em.tensor([[1.0, 3.0, 2.0]], device=dev)
    np.testing.assert_array_equal(x.cumsum(1).numpy(), [[1, 4, 6]])
    np.testing.assert_array_equal(x.cumprod(-1, exclusive=True).numpy(), [[1, 1, 3]])
    np.testing.assert_array_equal(x.cummax(1)[1].numpy(), [[0, 1, 1]])
    np.testing.assert_array_equal(x.cummin(1, reverse=True)[0].numpy(), [[1, 2, 2]])
    assert em.cumsum(em.tensor(2.0, device=dev), 0).item() == 2.0
    assert em.cumsum(em.zeros(2, 0, device=dev), 1).shape == (2, 0)
    assert em.cummax(em.zeros(0, 3, device=dev), 1)[1].shape == (0, 3)


def test_scan_errors(dev):
    x = em.ones(3, 4, device=dev)
    expect_error(lambda: em.cumsum(x, 2), "cumsum", em.IndexOutOfRange)
    expect_error(lambda: em.cumprod(x, "0"), "cumprod", em.EmberTypeError)
    expect_error(lambda: em.cummax([1.0], 0), "cummax", em.EmberTypeError)
    expect_error(lambda: em.cummin(x, 0, reverse=3), "cummin", em.EmberValueError)
    expect_error(lambda: em.cumsum(x, 0, exclusive=2), "cumsum", em.EmberValueError)
    expect_error(lambda: em._C.scan(2, x._storage, x._layout, 0, True, False), "cummax", em.EmberValueError)
    expect_error(lambda: em._C.scan(9, x._storage, x._layout, 0, False, False), "scan", em.EmberValueError)
    bad = em.Layout([4], [2], 0)
    expect_error(lambda: em._C.scan(0, em.ones(6, device=dev)._storage, bad, 0, False, False), "cumsum",
                 em.IndexOutOfRange)
