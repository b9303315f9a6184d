"""Creation and conversion: tensor/from_numpy defaults, zeros/ones/full/arange/rand/randn, numpy interop,
copy/clone/detach, item/tolist/repr, Tensor attributes."""
import ml_dtypes
import numpy as np
import pytest

import ember as em

from conftest import ALL, FLOATS, WIDE, WIDE_NP, expect_error, make_view, npdt, rand_np


def test_python_scalar_and_list_defaults(device):
    assert em.tensor(1.5, device=device).dtype is em.float32
    assert em.tensor(3, device=device).dtype is em.int64
    assert em.tensor([1.0, 2.0]).dtype is em.float32
    assert em.tensor([[1, 2], [3, 4]]).dtype is em.int64
    assert em.tensor([1, 2.5]).dtype is em.float32
    assert em.tensor(True).dtype is em.bool and em.tensor([True, False]).dtype is em.bool
    assert em.tensor([]).shape == (0,) and em.tensor([]).dtype is em.float32
    t = em.tensor([[1.25, -2.0], [3.0, 4.5]])
    assert t.shape == (2, 2) and t.tolist() == [[1.25, -2.0], [3.0, 4.5]]
    s = em.tensor(7)
    assert s.shape == () and s.ndim == 0 and s.item() == 7 and isinstance(s.item(), int)
    assert isinstance(em.tensor(2.5).item(), float)
    assert em.tensor(2 ** 40).item() == 2 ** 40


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_numpy_keeps_dtype_and_roundtrips(dt, rng):
    a = rand_np(rng, (3, 4), dt)
    t = em.tensor(a)
    assert t.dtype is dt and t.shape == (3, 4)
    back = t.numpy()
    assert back.dtype == npdt(dt)
    np.testing.assert_array_equal(back, a)
    np.testing.assert_array_equal(np.asarray(t), a)
    assert np.asarray(t).dtype == npdt(dt)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    f = em.from_numpy(a)
    assert f.dtype is dt
    np.testing.assert_array_equal(f.numpy(), a)


def test_numpy_scalar_and_widened_dtypes(device):
    for a in (np.float64(1.5), np.array(2.0)):  # a numpy scalar keeps its dtype: float64 (refused without it)
        if WIDE is em.float64:
            assert em.tensor(a, device=device).dtype is em.float64
        else:
            expect_error(lambda a=a: em.tensor(a, device=device), "tensor", em.DTypeError)
    assert em.tensor(np.arange(4, dtype=np.int32)).dtype is em.int32
    assert em.tensor(np.arange(4, dtype=np.int16)).dtype is em.int64
    assert em.tensor(np.array([True, False])).dtype is em.bool
    expect_error(lambda: em.tensor(np.zeros(2, dtype=np.complex64)), "tensor", em.DTypeError)
    expect_error(lambda: em.tensor([[1, 2], [3]]), "tensor", em.EmberError)


def test_tensor_from_non_native_byte_order_and_fortran():
    a = np.arange(6, dtype=">f4").reshape(2, 3)
    t = em.tensor(a)
    assert t.dtype is em.float32
    np.testing.assert_array_equal(t.numpy(), a.astype(np.float32))
    f = np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4))
    np.testing.assert_array_equal(em.tensor(f).numpy(), f)
    np.testing.assert_array_equal(em.tensor(np.arange(4, dtype="<u4")[::-1]).numpy(), [3, 2, 1, 0])


def test_tensor_from_strided_numpy_and_dtype_arg():
    a = np.arange(24, dtype=WIDE_NP).reshape(4, 6)[::2, 1::2].T
    t = em.tensor(a)
    np.testing.assert_array_equal(t.numpy(), a)
    t16 = em.tensor(a, dtype=em.float16)
    assert t16.dtype is em.float16
    np.testing.assert_array_equal(t16.numpy(), a.astype(np.float16))
    assert em.tensor([1, 2], dtype=WIDE).numpy().dtype == WIDE_NP
    tb = em.tensor([1.0, 2.5], dtype="bfloat16")
    assert tb.numpy().dtype == np.dtype(ml_dtypes.bfloat16)


def test_tensor_always_copies():
    a = np.arange(6, dtype=np.float32)
    t = em.tensor(a)
    a[0] = 100
    assert t.numpy()[0] == 0
    t2 = em.tensor(t)
    assert not t2.storage.same_buffer(t.storage)
    t.zero_set()
    assert t2.numpy()[1] == 1


def test_numpy_never_aliases(rng):
    t, _ = make_view(rng, (3, 4), em.float32, "contiguous")
    n = t.numpy()
    n[:] = 5
    assert not (t.numpy() == 5).any()
    n2 = np.asarray(t)
    n2[:] = 7
    assert not (t.numpy() == 7).any()
    v = t[1:, ::2]
    nv = v.numpy()
    assert nv.flags.c_contiguous or nv.flags.writeable
    nv[:] = 9
    assert not (t.numpy() == 9).any()


def test_copy_clone_new_storage_detach_shares(rng):
    for kind in ("contiguous", "transposed", "offset", "broadcast"):
        t, ref = make_view(rng, (3, 4), em.float32, kind)
        for c in (t.copy(), t.clone()):
            assert not c.storage.same_buffer(t.storage)
            assert c.layout.is_contiguous() and c.layout.start_offset == 0
            np.testing.assert_array_equal(c.numpy(), ref)
        d = t.detach()
        assert d.storage is t.storage and d.layout == t.layout and d.op is None and d.id != t.id
    v = em.Var(np.ones(3, dtype=np.float32))
    y = v * 2
    assert y.op is not None and y.detach().op is None and not v.detach().is_variable
    c = v.copy()
    c.zero_set()
    assert v.numpy().tolist() == [1, 1, 1]
    d = v.detach()
    d.zero_set()
    assert v.numpy().tolist() == [0, 0, 0]


def test_contiguous_returns_self_when_contiguous():
    t = em.zeros(3, 4)
    assert t.contiguous() is t
    tt = t.t()
    c = tt.contiguous()
    assert c is not tt and c.layout.is_contiguous() and c.shape == (4, 3)


def test_attributes(device):
    t = em.zeros(2, 3, device=device)
    assert t.shape == (2, 3) and isinstance(t.shape, tuple) and t.ndim == 2 and t.numel() == 6
    assert t.device == device == em.Device(str(device)) and t.device == str(device)
    assert em.zeros(2, 3).device == em.get_default_device()
    assert t.op is None and not t.is_variable
    assert isinstance(t.id, int) and t.id != em.zeros(2, 3).id
    assert isinstance(t.layout, em.Layout)
    assert hash(t) == hash(t) and len({t, t, em.zeros(1)}) == 2  # identity hash
    assert len(t) == 2
    with pytest.raises(TypeError):
        len(em.zeros(()))


def test_device_objects():
    assert em.Device("cpu") == em.cpu and hash(em.Device("cpu")) == hash(em.cpu)
    assert em.Device("metal", 0) == em.Device("metal", 0) and em.Device("metal", 0) != em.Device("metal", 1)
    assert em.Device("metal", 0) != em.cpu
    assert em.metal_is_available() in (True, False)
    expect_error(lambda: em.Device("tpu"), "device", em.DeviceError)
    if not em.metal_is_available():
        expect_error(lambda: em.zeros(2, device="metal"), "alloc", em.DeviceError)
        expect_error(lambda: em.zeros(2).to_device(em.Device("metal", 0)), "to_device", em.DeviceError)


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_zeros_ones_full_like(dt, device):
    for shape in [(), (0,), (3,), (2, 0, 3), (4, 5)]:
        z, o = em.zeros(*shape, dtype=dt, device=device), em.ones(shape, dtype=dt, device=device)
        assert z.shape == shape and z.dtype is dt and z.device == device
        np.testing.assert_array_equal(z.numpy(), np.zeros(shape, npdt(dt)))
        np.testing.assert_array_equal(o.numpy(), np.ones(shape, npdt(dt)))
        f = em.full(shape, 7, dtype=dt, device=device)
        np.testing.assert_array_equal(f.numpy(), np.full(shape, 7, npdt(dt)))
        assert em.zeros_like(o).dtype is dt and em.zeros_like(o).shape == shape
        np.testing.assert_array_equal(em.ones_like(z).numpy(), np.ones(shape, npdt(dt)))
    assert em.full((2,), 1.5).dtype is em.float32 and em.full((2,), 3).dtype is em.int64
    assert em.zeros(2, 3).dtype is em.float32
    assert em.zeros_like(em.zeros(2), dtype=em.int64).dtype is em.int64
    expect_error(lambda: em.zeros(-1, 2), "full", em.ShapeError)
    np.testing.assert_array_equal(em.full((3,), 0.1, dtype=em.float16).numpy(), np.full(3, 0.1, np.float16))


@pytest.mark.parametrize("args", [(5,), (2, 9), (2, 9, 3), (10, 0, -3), (0,), (3, 3), (5, 1, -1), (1, 2, 0.25),
                                  (-1.5, 1.0, 0.5), (0, 1, 0.1)])
def test_arange_matches_numpy(args):
    want = np.arange(*args)
    t = em.arange(*args)
    assert t.dtype is (em.int64 if want.dtype.kind == "i" else em.float32)
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6, atol=1e-7)
    assert t.shape == want.shape
    for dt in FLOATS + [em.int64]:
        if dt is em.int64 and not all(float(v).is_integer() for v in args):
            expect_error(lambda: em.arange(*args, dtype=em.int64), "arange", em.EmberValueError)  # issue 18 §5
            continue
        np.testing.assert_allclose(em.arange(*args, dtype=dt).numpy().astype(np.float64),
                                   want.astype(npdt(dt)).astype(np.float64), rtol=1e-2 if not dt.itemsize > 2 else 1e-6)
    expect_error(lambda: em.arange(0, 5, 0), "arange")


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_rand_randn_seeded_and_distribution(dt):
    em.manual_seed(1234)
    a = em.rand(100_000, dtype=dt)
    b = em.randn(400, 250, dtype=dt)
    em.manual_seed(1234)
    a2 = em.rand(100_000, dtype=dt)
    b2 = em.randn(400, 250, dtype=dt)
    np.testing.assert_array_equal(a.numpy(), a2.numpy())
    np.testing.assert_array_equal(b.numpy(), b2.numpy())
    assert a.dtype is dt and b.shape == (400, 250)
    em.manual_seed(1235)
    assert not np.array_equal(em.rand(100_000, dtype=dt).numpy(), a.numpy())
    assert not np.array_equal(em.rand(100_000, dtype=dt).numpy(), em.rand(100_000, dtype=dt).numpy())
    x = a.numpy().astype(np.float64)
    assert x.min() >= 0 and x.max() < 1
    assert abs(x.mean() - 0.5) < 0.01 and abs(x.var() - 1 / 12) < 0.003
    hist = np.histogram(x, bins=10, range=(0, 1))[0]
    assert hist.min() > 9000 and hist.max() < 11000
    y = b.numpy().astype(np.float64).ravel()
    assert abs(y.mean()) < 0.02 and abs(y.std() - 1) < 0.02
    assert abs(np.mean(np.abs(y) < 1) - 0.6827) < 0.01
    assert abs(np.mean(y ** 3)) < 0.05 and abs(np.mean(y ** 4) - 3) < 0.1  # skew 0, kurtosis 3
    assert np.corrcoef(y[:-1], y[1:])[0, 1] < 0.02  # neighbours independent


def test_rand_ranges_shapes_and_errors():
    em.manual_seed(0)
    r = em.rand(2, 3, lo=-2.0, hi=5.0).numpy()
    assert r.shape == (2, 3) and r.min() >= -2 and r.max() < 5
    n = em.randn((1000,), mean=3.0, std=0.5).numpy()
    assert abs(n.mean() - 3) < 0.1 and abs(n.std() - 0.5) < 0.1
    assert em.rand(()).shape == () and em.rand(0, 3).shape == (0, 3)
    expect_error(lambda: em.rand(3, dtype=em.int64), "rand", em.DTypeError)
    expect_error(lambda: em.randn(3, dtype=em.uint8), "randn", em.DTypeError)
    em.manual_seed(5)
    first = em.rand(10).numpy()
    em.manual_seed(5)
    both = np.concatenate([em.rand(4).numpy(), em.rand(6).numpy()])
    assert first.shape == both.shape  # draws advance the generator; the seed resets it
    em.manual_seed(5)
    np.testing.assert_array_equal(em.rand(10).numpy(), first)


@pytest.mark.parametrize("dt", ALL, ids=lambda d: d.name)
def test_item_tolist_repr(dt, rng):
    a = rand_np(rng, (2, 3), dt)
    t = em.tensor(a)
    assert t.tolist() == a.tolist() or np.allclose(t.tolist(), a.astype(np.float64).tolist())
    assert t[1, 2].item() == a[1, 2].item()
    assert type(t[0, 0].item()) is (float if dt.is_float else int)
    r = repr(t)
    assert r.startswith("Tensor(") and dt.name in r and "(2, 3)" in r
    expect_error(lambda: t.item(), "item", em.ShapeError)
    assert float(em.tensor([2.5], dtype=dt if dt.is_float else em.float32)) == 2.5
    big = em.zeros(1000, 1000, dtype=dt)
    assert len(repr(big)) < 2000  # summarised, not a million numbers
    with pytest.raises(em.EmberError):
        bool(em.zeros(2))
    assert bool(em.ones(1, dtype=dt)) and not bool(em.zeros((), dtype=dt))


def test_big_python_ints_keep_every_bit():
    big = 2**53 + 1
    assert em.full((2,), big).numpy().tolist() == [big, big]
    assert (em.zeros(2, dtype=em.int64) + big).numpy().tolist() == [big, big]
    assert (em.tensor([1]) * (2**62 + 3)).item() == 2**62 + 3
    assert em.full((1,), 2**40 + 7, dtype=em.uint32).item() == (2**40 + 7) % 2**32  # wraps like a C cast
    assert em.full((1,), -1, dtype=em.uint8).item() == 255


def test_python_number_protocols():
    assert int(em.tensor(3)) == 3 and float(em.tensor(2.5)) == 2.5
    assert [10, 20, 30][em.tensor(1)] == 20  # __index__ on an int tensor
    with pytest.raises(TypeError):
        [10, 20][em.tensor(1.0)]


def test_bool_bytes_other_than_0_and_1_are_normalised(device):
    raw = np.array([0, 1, 2, 255, 0, 7, 128, 0], np.uint8)
    b = raw.view(np.bool_)  # a bool view of other bytes: numpy keeps them, ember's bools are 0 or 1
    nz = raw != 0
    for t, ref in [(em.tensor(b, device=device), nz), (em.from_numpy(b).to_device(device), nz),
                   (em.tensor(b[::2], device=device), nz[::2]), (em.tensor(b.reshape(2, 4).T, device=device),
                                                                 nz.reshape(2, 4).T)]:
        got = t.numpy()
        assert got.dtype == np.bool_ and got.view(np.uint8).max() <= 1
        np.testing.assert_array_equal(got, ref)
        n = int(ref.sum())
        assert t.sum().item() == n and t.eq(True).sum().item() == n and em.where(t, 1, 0).sum().item() == n
        np.testing.assert_array_equal(t.to_dtype(em.uint8).numpy(), ref.astype(np.uint8))


@pytest.mark.parametrize("dt", [d for d in (em.int64, em.int32, em.uint32, em.uint8) if d in ALL], ids=lambda d: d.name)
def test_randint_draws_integers_directly(dt, device):
    lo, hi = {"int64": (-(2**62), 2**62 + 12345), "int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1),
              "uint8": (0, 255)}[dt.name]
    em.manual_seed(3)
    a = em.randint(lo, hi, (4096,), dtype=dt, device=device)
    assert a.dtype is dt and a.device == device
    v = a.numpy().astype(object)
    assert all(lo <= x < hi for x in v)
    # every one of the low bits is random: each is set in about half the draws (a float64 draw quantised
    # randint(0, 2**60) to multiples of 128, leaving its low 7 bits always 0)
    bits = min(16, dt.itemsize * 8)
    low = np.array([int(x - lo) for x in v], dtype=object)
    for k in range(bits):
        frac = sum((int(x) >> k) & 1 for x in low) / len(low)
        assert 0.4 < frac < 0.6, (k, frac)
    em.manual_seed(3)
    np.testing.assert_array_equal(em.randint(lo, hi, (4096,), dtype=dt, device=device).numpy(), a.numpy())


def test_randint_wide_ranges_are_exact_and_uniform(device):
    em.manual_seed(11)
    big = em.randint(0, 2**60, (4000,), device=device).numpy()
    assert (big % 128 != 0).mean() > 0.9  # not quantised to a float64's 53 bits
    full = em.randint(-(2**63), 2**63 - 1, (4000,), device=device).numpy()
    assert (full < 0).mean() > 0.4 and (full > 0).mean() > 0.4 and (full % 2 == 1).mean() > 0.4
    small = em.randint(3, 10, (70000,), device=device).numpy()
    counts = np.bincount(small - 3, minlength=7) / small.size
    assert small.min() == 3 and small.max() == 9 and np.abs(counts - 1 / 7).max() < 0.01
    odd = em.randint(0, 3 * 2**61, (30000,), device=device).numpy()  # a span that is no power of two
    thirds = np.bincount(odd // 2**61, minlength=3) / odd.size  # unbiased: each third a third
    assert np.abs(thirds - 1 / 3).max() < 0.02
    f = em.randint(-4, 4, (1000,), dtype=em.float32, device=device).numpy()
    assert f.dtype == np.float32 and set(np.unique(f)) <= set(range(-4, 4)) and len(np.unique(f)) == 8
    b = em.randint(0, 2, (1000,), dtype=em.bool, device=device).numpy()
    assert 0.4 < b.mean() < 0.6
