"""em.bool and em.int32 across the op families: casts, arithmetic and bool's rules, comparisons, & | ^ ~,
logical ops, where / masked_fill / mask indexing, reductions, cat / stack, sort / topk / cumsum, int32
indices in every index op, randint, nonzero, and interop (numpy, DLPack, safetensors, pickle, repr)."""
import pickle

import numpy as np
import pytest
import torch

import ember as em

from conftest import ALL, BOOLS, VIEWS, expect_error, make_view, npdt

NEW = [d for d in (em.int32, em.bool) if d in ALL + BOOLS]
TORCH_OF = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
            "float64": torch.float64, "int64": torch.int64, "uint32": torch.uint32, "uint8": torch.uint8,
            "int32": torch.int32, "bool": torch.bool}
FROM_TORCH = {v: k for k, v in TORCH_OF.items()}
VIEW_KINDS = [k for k in VIEWS if k != "broadcast"]  # ops that write need distinct elements


def _i32(rng, shape, lo=-50, hi=50):
    return rng.integers(lo, hi, size=shape).astype(np.int32)


def _view(rng, shape, dt, kind):
    """(tensor, numpy) of dt with the layout `kind`; int32 values span negatives."""
    t, a = make_view(rng, shape, dt, kind)
    if dt is em.int32:  # make_view's ints are >= 0: shift them (a fresh copy, same layout kind)
        a = (a.astype(np.int64) - 9).astype(np.int32)
        t = t - 9
    return t, a


def _torch(t):
    return torch.from_numpy(np.ascontiguousarray(t.numpy()))


# ----------------------------------------------------------------------------- dtype objects
def test_dtype_objects_and_numpy_mapping():
    assert (em.int32.name, em.int32.itemsize, em.int32.is_float) == ("int32", 4, False)
    assert (em.bool.name, em.bool.itemsize, em.bool.is_float) == ("bool", 1, False)
    for npt, dt in ((np.int32, em.int32), (np.bool_, em.bool)):
        assert em.tensor(np.zeros(2, npt)).dtype is dt and em.tensor(np.zeros(2, npt)).numpy().dtype == npt
        assert em.zeros(2, dtype=npt).dtype is dt and em.zeros(2, dtype=dt.name).dtype is dt
    assert pickle.loads(pickle.dumps(em.bool)) is em.bool
    assert "bool" not in em.__all__ and em.bool is em.dtypes.bool  # from ember import * keeps builtins.bool


# ----------------------------------------------------------------------------- casts
@pytest.mark.parametrize("src", ALL + BOOLS, ids=lambda d: d.name)
def test_casts_to_and_from_the_new_dtypes(rng, src):
    for kind in ("contiguous", "transposed", "offset"):
        if src.is_float:
            t, a = make_view(rng, (4, 5), src, kind, lo=-300.0, hi=300.0)
            a = a.copy()
            a.flat[0], a.flat[1] = np.nan, 0.0  # NaN casts to True, 0 to False
            t = em.tensor(a)
        else:
            t, a = _view(rng, (4, 5), src, kind)
        for dst in NEW:
            got = t.to_dtype(dst)
            assert got.dtype is dst and got.numpy().dtype == npdt(dst)
            if dst is em.bool:
                want = a.astype(np.float64) != 0
            elif src.is_float:  # float -> int32 truncates (within int32's range here)
                want = np.trunc(np.nan_to_num(a.astype(np.float64))).astype(np.int32)
            else:
                want = a.astype(np.int64).astype(np.int32)
            np.testing.assert_array_equal(got.numpy(), want)
        for dst in ALL:  # and back from each new dtype
            for new in NEW:
                b = t.to_dtype(new)
                np.testing.assert_array_equal(b.to_dtype(dst).numpy().astype(np.float64),
                                              b.numpy().astype(npdt(dst)).astype(np.float64))


def test_bool_cast_methods_and_nan():
    x = em.tensor([0.0, -0.0, 0.5, float("nan"), float("inf")])
    assert x.bool().tolist() == [False, False, True, True, True]
    assert x.to(em.bool).tolist() == torch.tensor([0.0, -0.0, 0.5, float("nan"), float("inf")]).bool().tolist()
    assert em.tensor([2.9, -2.9]).int().tolist() == [2, -2] and em.tensor([2.9]).int().dtype is em.int32


# ----------------------------------------------------------------------------- arithmetic
@pytest.mark.parametrize("kind", VIEW_KINDS + ["broadcast"])
def test_int32_arithmetic_matches_numpy(rng, kind):
    ta, a = _view(rng, (3, 5), em.int32, kind)
    tb, b = _view(rng, (3, 5), em.int32, "contiguous")
    b = np.where(b == 0, 3, b).astype(np.int32)
    tb = em.tensor(b)
    for fn in (lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x // y,
               lambda x, y: x % y, em.maximum, em.minimum):
        out = fn(ta, tb)
        assert out.dtype is em.int32
        ref = (np.maximum(a, b) if fn is em.maximum else np.minimum(a, b) if fn is em.minimum else fn(a, b))
        np.testing.assert_array_equal(out.numpy(), ref)
    np.testing.assert_array_equal((ta + 7).numpy(), a + np.int32(7))  # a Python int keeps int32
    assert (ta + 7).dtype is em.int32 and (ta * 0.5).dtype is em.float32  # a Python float: float32
    assert (ta / tb).dtype is em.float32
    np.testing.assert_allclose((ta / tb).numpy(), (a / b).astype(np.float32), rtol=1e-6)
    for name in ("abs", "neg", "sign", "sqr"):
        np.testing.assert_array_equal(getattr(ta, name)().numpy(),
                                      {"abs": np.abs, "neg": np.negative, "sign": np.sign, "sqr": np.square}[name](a))
    np.testing.assert_array_equal(ta.clamp(-5, 7).numpy(), np.clip(a, -5, 7))
    big = em.tensor([2**31 - 1, -(2**31)], dtype=em.int32)
    assert (big + 1).tolist() == [-(2**31), -(2**31) + 1]  # wraps like numpy and torch
    assert (em.tensor([-(2**31)], dtype=em.int32) // -1).tolist() == [-(2**31)]  # no SIGFPE


def test_int32_promotion():
    i32, i64, u8, u32 = (em.ones(2, dtype=d) for d in (em.int32, em.int64, em.uint8, em.uint32))
    b = em.ones(2, dtype=em.bool)
    assert (i32 + i64).dtype is em.int64 and (i32 + u8).dtype is em.int32 and (i32 + b).dtype is em.int32
    assert (i32 + u32).dtype is em.int64 and (b + u32).dtype is em.uint32 and (b + u8).dtype is em.uint8
    assert (i32 + em.ones(2, dtype=em.float16)).dtype is em.float16
    for x, y in ((i32, i64), (i32, u8), (b, i32), (b, u8), (b, em.ones(2))):
        ref = torch.result_type(_torch(x), _torch(y))
        assert (x + y).dtype.name == FROM_TORCH[ref]


def test_bool_arithmetic_rules_as_torch(rng):
    a, b = rng.random((4, 3)) < 0.5, rng.random((4, 3)) < 0.5
    ta, tb, ra, rb = em.tensor(a), em.tensor(b), torch.from_numpy(a), torch.from_numpy(b)
    for fn in (lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x / y, lambda x, y: x + 1,
               lambda x, y: x * 2.5, lambda x, y: x + True, lambda x, y: x == y, lambda x, y: x < y):
        ours, ref = fn(ta, tb), fn(ra, rb)
        assert ours.dtype.name == FROM_TORCH[ref.dtype]
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    np.testing.assert_array_equal(em.maximum(ta, tb).numpy(), np.maximum(a, b))
    np.testing.assert_array_equal(em.minimum(ta, tb).numpy(), np.minimum(a, b))
    expect_error(lambda: ta - tb, "sub", em.DTypeError)
    expect_error(lambda: -ta, "neg", em.DTypeError)
    expect_error(lambda: ta // tb, "floor_divide", em.DTypeError)
    expect_error(lambda: ta.exp(), "exp", em.DTypeError)
    expect_error(lambda: ta.matmul(tb.t()), "matmul", em.DTypeError)


# ----------------------------------------------------------------------------- comparisons and logic
@pytest.mark.parametrize("dt", ALL + BOOLS, ids=lambda d: d.name)
def test_comparisons_return_bool(rng, dt):
    ta, a = _view(rng, (3, 4), dt, "transposed")
    tb, b = _view(rng, (3, 4), dt, "contiguous")
    for name, fn in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                     ("gt", np.greater), ("ge", np.greater_equal)):
        out = getattr(ta, name)(tb)
        assert out.dtype is em.bool and out.numpy().dtype == np.bool_
        np.testing.assert_array_equal(out.numpy(), fn(a.astype(np.float64), b.astype(np.float64)))
    for name in ("isnan", "isinf", "isfinite"):
        assert getattr(ta, name)().dtype is em.bool
    assert ta.isclose(ta).dtype is em.bool and ta.isclose(ta).numpy().all()


@pytest.mark.parametrize("dt", [d for d in (em.int32, em.int64, em.uint8, em.uint32, em.bool) if d in ALL + BOOLS],
                         ids=lambda d: d.name)
@pytest.mark.parametrize("kind", ["contiguous", "stepped", "offset", "broadcast"])
def test_bitwise_ops_match_numpy(rng, dt, kind):
    ta, a = _view(rng, (4, 6), dt, kind)
    tb, b = _view(rng, (4, 6), dt, "transposed")
    for op, fn, npfn in (("bitwise_and", lambda x, y: x & y, np.bitwise_and),
                         ("bitwise_or", lambda x, y: x | y, np.bitwise_or),
                         ("bitwise_xor", lambda x, y: x ^ y, np.bitwise_xor)):
        for out in (fn(ta, tb), getattr(ta, op)(tb), getattr(em, op)(ta, tb)):
            assert out.dtype is dt
            np.testing.assert_array_equal(out.numpy(), npfn(a, b))
    np.testing.assert_array_equal((~ta).numpy(), np.invert(a))
    np.testing.assert_array_equal(em.bitwise_not(ta).numpy(), np.invert(a))
    if dt is not em.bool:
        np.testing.assert_array_equal((ta & 6).numpy(), a & npdt(dt).type(6))
        np.testing.assert_array_equal((5 | ta).numpy(), npdt(dt).type(5) | a)
    else:
        np.testing.assert_array_equal((ta & True).numpy(), a & True)
        assert (ta | em.ones(1, dtype=em.int32)).dtype is em.int32  # bool | int32 promotes


def test_bitwise_errors_on_floats():
    x = em.ones(3)
    for fn, op in ((lambda: x & x, "bitwise_and"), (lambda: x | 1, "bitwise_or"), (lambda: x ^ x, "bitwise_xor"),
                   (lambda: ~x, "bitwise_not"), (lambda: em.bitwise_not(em.ones(2, dtype=em.float16)), "bitwise_not"),
                   (lambda: em.ones(3, dtype=em.int32) & x, "bitwise_and")):
        expect_error(fn, op, em.DTypeError)


def test_logical_ops_match_torch(rng):
    a = (rng.integers(0, 3, (3, 5)) * (rng.random((3, 5)) < 0.6)).astype(np.float32)
    b = rng.integers(-1, 2, (5,)).astype(np.int32)
    ta, tb, ra, rb = em.tensor(a), em.tensor(b), torch.from_numpy(a), torch.from_numpy(b)
    for name in ("logical_and", "logical_or", "logical_xor"):
        for ours, ref in ((getattr(ta, name)(tb), getattr(torch, name)(ra, rb)),
                          (getattr(em, name)(tb, ta), getattr(torch, name)(rb, ra)),
                          (getattr(ta, name)(0.5), getattr(torch, name)(ra, torch.tensor(0.5)))):
            assert ours.dtype is em.bool
            np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    np.testing.assert_array_equal(ta.logical_not().numpy(), torch.logical_not(ra).numpy())
    np.testing.assert_array_equal(em.logical_not(tb.gt(0)).numpy(), torch.logical_not(rb.gt(0)).numpy())


# ----------------------------------------------------------------------------- masks
@pytest.mark.parametrize("mask_dt", [em.bool, em.uint8])
def test_masks_of_bool_and_uint8(rng, mask_dt):
    x, a = make_view(rng, (4, 5), em.float32, "transposed")
    m = rng.random((4, 5)) < 0.4
    tm = em.tensor(m).to_dtype(mask_dt)
    np.testing.assert_array_equal(em.where(tm, x, -1.0).numpy(), np.where(m, a, -1.0).astype(np.float32))
    np.testing.assert_array_equal(x.masked_fill(tm, 7.0).numpy(), np.where(m, 7.0, a).astype(np.float32))
    np.testing.assert_array_equal(x[tm].numpy(), a[m])
    np.testing.assert_array_equal(x[tm[:, 0]].numpy(), a[m[:, 0]])  # a mask over dim 0
    y, ay = x.copy(), a.copy()
    y[tm] = 3.0
    ay[m] = 3.0
    np.testing.assert_array_equal(y.numpy(), ay)
    y[tm] = em.arange(int(m.sum()), dtype=em.float32)
    ay[m] = np.arange(int(m.sum()))
    np.testing.assert_array_equal(y.numpy(), ay)
    i = em.tensor(_i32(rng, (4, 5)))
    np.testing.assert_array_equal(em.where(tm, i, em.zeros(1, dtype=em.int32)).numpy(),
                                  np.where(m, i.numpy(), 0))
    assert em.where(tm, i, i).dtype is em.int32
    b = em.tensor(rng.random((4, 5)) < 0.5)
    np.testing.assert_array_equal(em.where(tm, b, False).numpy(), np.where(m, b.numpy(), False))
    expect_error(lambda: x.masked_fill(em.ones(4, 5, dtype=em.int32), 0.0), "masked_fill", em.DTypeError)


@pytest.mark.parametrize("a, b", [(True, False), (False, 1), (1, 0), (True, 2.5), (np.bool_(True), False)])
def test_where_of_two_scalars_takes_torchs_dtype(rng, a, b):
    m = rng.random((3, 4)) < 0.5
    got = em.where(em.tensor(m), a, b)
    want = torch.where(torch.from_numpy(m), a if not isinstance(a, np.bool_) else bool(a), b)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_bool_tensor_as_index_and_zero_d_masks(rng):
    x = em.tensor(rng.standard_normal((3, 2)).astype(np.float32))
    assert x[em.tensor(True)].shape == (1, 3, 2) and x[em.tensor(False)].shape == (0, 3, 2)
    expect_error(lambda: x.index_select(em.tensor([True, False]), 0), "index_select", em.DTypeError)


# ----------------------------------------------------------------------------- reductions
@pytest.mark.parametrize("dt", NEW, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", ["contiguous", "transposed", "stepped", "offset"])
def test_reductions_match_torch(rng, dt, kind):
    t, a = _view(rng, (5, 7), dt, kind)
    r = torch.from_numpy(np.ascontiguousarray(a))
    for dim in (None, 0, 1):
        kw = {} if dim is None else {"dim": dim}
        s = t.sum(**kw)
        assert s.dtype is em.int64
        np.testing.assert_array_equal(s.numpy(), r.sum(**kw).numpy())
        for name in ("any", "all"):
            out = getattr(t, name)(**kw)
            assert out.dtype is em.bool
            np.testing.assert_array_equal(out.numpy(), getattr(r, name)(**kw).numpy())
        for name in ("max", "min"):
            out = getattr(t, name)(dim) if dim is not None else getattr(t, name)()
            assert out.dtype is dt
            ref = getattr(r, name)(dim).values if dim is not None else getattr(r, name)()
            np.testing.assert_array_equal(out.numpy(), ref.numpy())
        if dim is not None:
            ref = r.to(torch.int64).argmax(dim)  # torch has no bool argmax; ties resolve to the first either way
            np.testing.assert_array_equal(t.argmax(dim).numpy(), ref.numpy())
    expect_error(lambda: t.mean(), "mean", em.DTypeError)


def test_sum_of_a_large_bool_mask_does_not_wrap(rng):
    m = rng.random(70000) < 0.5
    assert em.tensor(m).sum().item() == int(m.sum())
    np.testing.assert_array_equal(em.tensor(m).reshape(7, 10000).t().sum(1).numpy(), m.reshape(7, 10000).sum(0))


# ----------------------------------------------------------------------------- cat, stack, sort, scans
def test_cat_stack_promote_with_new_dtypes(rng):
    i, b = em.tensor(_i32(rng, (2, 3))), em.tensor(rng.random((2, 3)) < 0.5)
    for parts in ((i, b), (b, b), (i, i), (b, em.ones(2, 3, dtype=em.uint8)), (i, em.ones(2, 3))):
        ref = torch.cat([_torch(p) for p in parts], 1)
        out = em.cat(list(parts), 1)
        assert out.dtype.name == FROM_TORCH[ref.dtype]
        np.testing.assert_array_equal(out.numpy(), ref.numpy())
        np.testing.assert_array_equal(em.stack(list(parts), 0).numpy(), torch.stack([_torch(p) for p in parts]).numpy())


@pytest.mark.parametrize("dt", NEW, ids=lambda d: d.name)
@pytest.mark.parametrize("n", [5, 300])  # the comparison sort and the radix sort (lines of 256 and more)
def test_sort_topk_cumsum_match_torch(rng, dt, n):
    t, a = _view(rng, (3, n), dt, "transposed") if n < 100 else _view(rng, (3, n), dt, "contiguous")
    r = torch.from_numpy(np.ascontiguousarray(a))
    for desc in (False, True):
        v, idx = em.sort(t, 1, descending=desc)
        rv, ri = torch.sort(r, dim=1, descending=desc, stable=True)
        assert v.dtype is dt and idx.dtype is em.int64
        np.testing.assert_array_equal(v.numpy(), rv.numpy())
        np.testing.assert_array_equal(idx.numpy(), ri.numpy())
    k = min(n, 4)
    v, idx = em.topk(t, k, 1)
    rv = torch.topk(r.to(torch.int64), k, 1).values
    assert v.dtype is dt
    np.testing.assert_array_equal(v.numpy().astype(np.int64), rv.numpy())
    np.testing.assert_array_equal(np.take_along_axis(a, idx.numpy(), 1), v.numpy())
    c = em.cumsum(t, 1)
    assert c.dtype is em.int64
    np.testing.assert_array_equal(c.numpy(), torch.cumsum(r, 1).numpy())
    cm = em.cummax(t, 1)[0]
    assert cm.dtype is dt
    np.testing.assert_array_equal(cm.numpy().astype(np.int64), torch.cummax(r.to(torch.int64), 1).values.numpy())


# ----------------------------------------------------------------------------- int32 indices
def test_index_ops_take_int32_indices(rng):
    x = em.tensor(rng.standard_normal((6, 4)).astype(np.float32))
    a = x.numpy()
    ids = np.array([5, 0, -1, 2, 2], dtype=np.int32)
    ti = em.tensor(ids)
    assert ti.dtype is em.int32
    np.testing.assert_array_equal(x.index_select(ti, 0).numpy(), a[ids])
    np.testing.assert_array_equal(x[ti].numpy(), a[ids])
    g = _i32(rng, (3, 4), 0, 6)
    np.testing.assert_array_equal(x.gather(em.tensor(g), 0).numpy(), np.take_along_axis(a, g.astype(np.int64), 0))
    y, ay = x.copy(), a.copy()
    y[em.tensor(np.array([1, 3], dtype=np.int32))] = 9.0
    ay[[1, 3]] = 9.0
    np.testing.assert_array_equal(y.numpy(), ay)
    src = rng.standard_normal((3, 4)).astype(np.float32)
    si = _i32(rng, (3, 4), 0, 6)
    ref = torch.from_numpy(a.copy()).scatter(0, torch.from_numpy(si.astype(np.int64)), torch.from_numpy(src))
    np.testing.assert_array_equal(em.scatter(x, 0, em.tensor(si), em.tensor(src)).numpy(), ref.numpy())
    for red in ("sum", "amax"):
        ref = torch.from_numpy(a.copy()).scatter_reduce(0, torch.from_numpy(si.astype(np.int64)),
                                                       torch.from_numpy(src), red)
        np.testing.assert_allclose(em.scatter_reduce(x, 0, em.tensor(si), em.tensor(src), red).numpy(), ref.numpy(),
                                   rtol=1e-6)
    emb = em.nn.Embedding(6, 4)
    np.testing.assert_array_equal(emb(ti).numpy(), emb.weight.numpy()[ids])
    v = em.Var(x)
    gs = v.index_select(ti, 0).sum().backward()  # the gradient flows through int32 indices too
    np.testing.assert_array_equal(gs[v].numpy(), np.bincount(ids % 6, minlength=6)[:, None] * np.ones((1, 4)))


def test_int32_indices_out_of_range_raise():
    x = em.zeros(4, 3)
    bad = em.tensor([0, 4], dtype=em.int32)
    expect_error(lambda: x.index_select(bad, 0), "index_select", em.IndexOutOfRange)
    expect_error(lambda: x.gather(em.tensor([[0, 0, -5]], dtype=em.int32), 0), "gather", em.IndexOutOfRange)
    expect_error(lambda: em.scatter(x, 0, em.tensor([[7, 0, 0]], dtype=em.int32), em.ones(1, 3)), "scatter",
                 em.IndexOutOfRange)
    y = em.zeros(4, 3)
    with pytest.raises(em.IndexOutOfRange):
        y[bad] = 1.0
    assert y.sum().item() == 0  # nothing was written


def test_scatter_reduce_on_bool_as_torch():
    x = em.zeros(4, dtype=em.bool)
    idx, src = em.tensor([0, 0, 2, 2, 2]), em.tensor([True, True, True, False, True])
    for red in ("sum", "amax", "prod", "amin"):
        ref = torch.zeros(4, dtype=torch.bool).scatter_reduce(0, torch.tensor([0, 0, 2, 2, 2]),
                                                             torch.tensor([True, True, True, False, True]), red)
        out = em.scatter_reduce(x, 0, idx, src, red)
        assert out.dtype is em.bool and out.tolist() == ref.tolist(), red
    expect_error(lambda: em.scatter_reduce(x, 0, idx, src, "mean"), "scatter_reduce", em.DTypeError)


# ----------------------------------------------------------------------------- creation
def test_randint():
    em.manual_seed(3)
    a = em.randint(-5, 5, (2000,), dtype=em.int32)
    assert a.dtype is em.int32 and a.shape == (2000,)
    vals = a.numpy()
    assert vals.min() == -5 and vals.max() == 4 and len(np.unique(vals)) == 10
    em.manual_seed(3)
    assert em.randint(-5, 5, size=(2000,), dtype=em.int32).tolist() == vals.tolist()  # reproducible
    assert em.randint(3, (4, 2)).dtype is em.int64 and em.randint(3, (4, 2)).numpy().max() < 3
    assert em.randint(0, 2, (50,), dtype=em.bool).dtype is em.bool
    expect_error(lambda: em.randint(5, 5, (2,)), "randint", em.EmberValueError)
    expect_error(lambda: em.randint(0, 2**31 + 1, (2,), dtype=em.int32), "randint", em.EmberValueError)
    expect_error(lambda: em.randint(-1, 3, (2,), dtype=em.uint8), "randint", em.EmberValueError)
    expect_error(lambda: em.randint(5), "randint", em.EmberValueError)
    expect_error(lambda: em.randint(0.5, 3, (2,)), "randint", em.EmberTypeError)
    expect_error(lambda: em.rand(2, dtype=em.int32), "rand", em.DTypeError)
    expect_error(lambda: em.randn(2, dtype=em.bool), "randn", em.DTypeError)


@pytest.mark.parametrize("dt", NEW + [em.float32], ids=lambda d: d.name)
def test_nonzero_matches_torch(rng, dt):
    a = (rng.integers(0, 3, (3, 4, 2)) * (rng.random((3, 4, 2)) < 0.5)).astype(npdt(dt))
    t, r = em.tensor(a), torch.from_numpy(a)
    np.testing.assert_array_equal(t.nonzero().numpy(), r.nonzero().numpy())
    assert t.nonzero().dtype is em.int64
    for ours, ref in zip(t.nonzero(as_tuple=True), r.nonzero(as_tuple=True)):
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    assert em.tensor(0).nonzero().shape == tuple(torch.tensor(0).nonzero().shape)


def test_full_and_arange_in_new_dtypes():
    assert em.full((2,), True, dtype=em.bool).tolist() == [True, True]
    assert em.zeros(3, dtype=em.bool).tolist() == [False] * 3 and em.ones(2, dtype=em.bool).tolist() == [True] * 2
    assert em.arange(-3, 3, dtype=em.int32).tolist() == list(range(-3, 3))
    assert em.full((2,), 2**31 - 1, dtype=em.int32).tolist() == [2**31 - 1] * 2


def test_bool_and_int32_never_require_grad():
    for dt in NEW:
        v = em.Var(em.ones(2, dtype=dt))
        expect_error(lambda v=v: (v * v).sum().backward(), "backward", em.DTypeError)


# ----------------------------------------------------------------------------- interop
@pytest.mark.parametrize("dt", NEW, ids=lambda d: d.name)
def test_safetensors_round_trip(tmp_path, rng, dt):
    from safetensors.torch import load_file, save_file

    t, a = _view(rng, (3, 4), dt, "transposed")
    path = tmp_path / "x.safetensors"
    em.save_safetensors({"t": t, "s": t[1, 2]}, path)
    loaded = load_file(str(path))
    assert loaded["t"].dtype == TORCH_OF[dt.name] and loaded["t"].numpy().tolist() == a.tolist()
    back = em.load_safetensors(path)
    assert back["t"].dtype is dt and back["t"].tolist() == a.tolist() and back["s"].item() == a[1, 2]
    save_file({"r": torch.from_numpy(np.ascontiguousarray(a))}, str(path))
    assert em.load_safetensors(path)["r"].dtype is dt


def test_safetensors_bool_bytes_other_than_0_1_load_as_true(tmp_path):
    import json
    import struct

    header = json.dumps({"m": {"dtype": "BOOL", "shape": [4], "data_offsets": [0, 4]}}).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "b.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes([0, 1, 2, 255]))
    m = em.load_safetensors(path)["m"]
    assert m.tolist() == [False, True, True, True]
    assert (m & em.tensor([True] * 4)).tolist() == [False, True, True, True]  # normalised to 0/1 bytes


@pytest.mark.cpu_only  # DLPack and numpy zero-copy are CPU features
@pytest.mark.parametrize("dt", NEW, ids=lambda d: d.name)
def test_dlpack_and_numpy_zero_copy(rng, dt):
    a = np.ascontiguousarray(_view(rng, (3, 4), dt, "contiguous")[1])
    e = em.from_dlpack(a)  # numpy -> ember: shared memory
    assert e.dtype is dt
    a[0, 0] = not a[0, 0] if dt is em.bool else a[0, 0] + 1
    assert e[0, 0].item() == a[0, 0]
    back = np.from_dlpack(e)  # ember -> numpy: shared memory
    assert back.dtype == npdt(dt) and back.tolist() == a.tolist()
    r = torch.from_numpy(a)
    e2 = em.from_dlpack(r)  # torch -> ember: shared memory
    assert e2.dtype is dt and e2.storage.data_ptr == r.data_ptr()
    r2 = torch.from_dlpack(e2)
    assert r2.dtype == TORCH_OF[dt.name] and r2.data_ptr() == r.data_ptr()


@pytest.mark.parametrize("dt", NEW, ids=lambda d: d.name)
def test_pickle_and_repr(rng, dt):
    t, a = _view(rng, (2, 3), dt, "transposed")
    u = pickle.loads(pickle.dumps(t))
    assert u.dtype is dt and u.tolist() == a.tolist()
    if dt is em.bool:
        b = em.tensor([True, False])
        assert "True" in repr(b) and "False" in repr(b) and "dtype=bool" in repr(b)
        assert str(b) == repr(b) and b[0].item() is True
    else:
        assert "dtype=int32" in repr(t) and isinstance(t[0, 0].item(), int)


def test_on_the_device_under_test_too(device):
    x = em.tensor([1, -2, 3], dtype=em.int32, device=device)
    assert (x > 0).dtype is em.bool and (x > 0).tolist() == [True, False, True]
    assert (x * 2).tolist() == [2, -4, 6] and x.to_dtype(em.bool).tolist() == [True, True, True]
