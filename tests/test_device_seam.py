"""The device seam: codes exported by _C agree with the Python tables and the kernels, per-device memory
controls, to_device, the default device, the fused ops' shared checks, and version bumps above the backends."""
import numpy as np
import pytest

import ember as em
from ember import _C
from ember.custom_op import _FWD_NAMES
from ember.tensor_type import BINARY, REDUCE, UNARY, _contig, _wrap

from conftest import expect_error, rand_np

# A numpy reference per unary op that has one (inputs in (0.1, 0.9), inside every op's domain).
UNARY_REF = {
    "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "sqrt": np.sqrt,
    "sqr": np.square, "abs": np.abs, "neg": np.negative, "recip": np.reciprocal, "ceil": np.ceil,
    "floor": np.floor, "round": np.round, "sign": np.sign, "log1p": np.log1p, "expm1": np.expm1,
    "rsqrt": lambda x: 1 / np.sqrt(x), "log2": np.log2, "log10": np.log10, "tan": np.tan, "sinh": np.sinh,
    "cosh": np.cosh, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "trunc": np.trunc,
    "relu": lambda x: np.maximum(x, 0), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}
BINARY_REF = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum,
    "minimum": np.minimum, "pow": np.power, "floor_divide": np.floor_divide, "remainder": np.remainder,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
}


def test_python_tables_are_the_cores_codes():
    assert list(UNARY) == list(_C.UNARY_OPS) and list(UNARY.values()) == list(range(len(_C.UNARY_OPS)))
    assert list(BINARY) == list(_C.BINARY_OPS) and list(REDUCE) == list(_C.REDUCE_OPS)
    assert [d.name for d in em.ALL_DTYPES] == [n for n, _, _ in _C.DTYPES]
    assert [(d.itemsize, d.is_float) for d in em.ALL_DTYPES] == [(s, f) for _, s, f in _C.DTYPES]
    assert [d.code for d in em.ALL_DTYPES] == list(range(len(_C.DTYPES)))
    assert list(em.Device._KINDS) == list(_C.DEVICE_KINDS) == ["cpu", "metal", "cuda"]
    assert _FWD_NAMES == ("cpu_fwd", "metal_fwd", "cuda_fwd")


def test_unary_codes_run_the_named_kernel(rng, device):
    x = rng.uniform(0.1, 0.9, 17)
    t = em.tensor(x, dtype=em.float32)
    assert set(UNARY_REF) <= set(UNARY)
    for name, ref in UNARY_REF.items():
        vals = _values(_C.unary(UNARY[name], t._storage, t._layout, 0.0, 0.0), t)
        np.testing.assert_allclose(vals, ref(x.astype(np.float32)), rtol=2e-6, atol=1e-6, err_msg=name)


def _values(storage, like):
    """The values of a dense result storage shaped like ``like``."""
    return _wrap(storage, _contig(like.shape), like.dtype, like.device, None, like.shape).numpy()


def test_binary_codes_run_the_named_kernel(rng, device):
    a, b = rng.uniform(0.5, 3.0, 13), rng.uniform(0.5, 3.0, 13)
    b[::4] = a[::4]  # ties, so eq / le / ge see both outcomes
    wide = _C.device_supports(device.kind, device.index, em.float64.code)
    if not wide:  # Metal has no float64: compare in float32
        a, b = a.astype(np.float32), b.astype(np.float32)
    ta, tb = em.tensor(a), em.tensor(b)
    for name, ref in BINARY_REF.items():
        got = _values(_C.binary(BINARY[name], ta._storage, ta._layout, tb._storage, tb._layout), ta)
        want = ref(a, b)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-6 if wide else 2e-6,
                                   err_msg=name)


def test_reduce_codes_run_the_named_kernel(rng):
    x = rand_np(rng, (4, 7), em.int64)
    t = em.tensor(x)
    want = {"sum": x.sum(1), "max": x.max(1), "min": x.min(1), "argmax": x.argmax(1), "argmin": x.argmin(1),
            "sum_i64": x.sum(1)}
    assert set(want) == set(REDUCE)
    for name, code in REDUCE.items():
        s, _ = _C.reduce(code, t._storage, t._layout, [1], False)
        dt = em.int64 if name in ("argmax", "argmin", "sum_i64") else t.dtype
        got = _wrap(s, _contig((4,)), dt, t.device, None, (4,)).numpy()
        np.testing.assert_array_equal(got, want[name], err_msg=name)
    # The core names each op in its errors by the same table.
    empty = em.zeros(3, 0)
    for name in ("max", "min", "argmax", "argmin"):
        expect_error(lambda n=name: _C.reduce(REDUCE[n], empty._storage, empty._layout, [1], False), name,
                     em.ShapeError)


def test_dtype_and_device_codes_reach_the_storage(device):
    for dt in em.ALL_DTYPES:
        if not _C.device_supports(device.kind, device.index, dt.code):
            expect_error(lambda d=dt: em.zeros(2, dtype=d, device=device), "zeros", em.DTypeError)
            continue
        s = em.zeros(3, dtype=dt, device=device)._storage
        assert s.dtype_code == dt.code and s.dtype is dt and s.numel == 3
        assert s.device_kind == device.kind and _C.DEVICE_KINDS[s.device_kind] == device.type
    for bad in (-1, len(_C.DEVICE_KINDS)):
        expect_error(lambda k=bad: _C.alloc(k, 0, 0, 1, False), "device", em.EmberValueError)


# ----------------------------------------------------------------------------- devices, memory
def test_unavailable_devices_raise_device_errors():
    # cuda:7 exists nowhere (the emulator has one device; without a backend there is none)
    expect_error(lambda: _C.alloc(em.Device._KINDS["cuda"], 7, 0, 4, False), "alloc", em.DeviceError)
    expect_error(lambda: _C.memory_stats(0, 1), "memory_stats", em.DeviceError)  # the CPU has device 0 only
    assert not _C.device_available(em.Device._KINDS["cuda"], 7) and _C.device_available(0, 0)
    assert _C.device_available(em.Device._KINDS["cuda"], 0) == em.cuda_is_available()
    assert _C.device_describe().startswith("cpu (") and _C.isa() in _C.device_describe()
    expect_error(lambda: em.memory_stats("cuda:7"), "memory_stats", em.DeviceError)
    expect_error(lambda: em.empty_cache("cuda:7"), "empty_cache", em.DeviceError)
    expect_error(lambda: em.set_cache_limit(1 << 20, "cuda:7"), "set_cache_limit", em.DeviceError)
    expect_error(lambda: em.reset_peak_memory_stats("cuda:7"), "reset_peak_memory", em.DeviceError)
    expect_error(lambda: em.zeros(2).to_device("cuda:7"), "to_device", em.DeviceError)
    expect_error(lambda: em.set_default_device("cuda:7"), "set_default_device", em.DeviceError)
    if not em.metal_is_available():
        expect_error(lambda: em.zeros(2, device="metal"), "alloc", em.DeviceError)
        expect_error(lambda: em.zeros(2).to_device("metal"), "to_device", em.DeviceError)


def test_memory_stats_per_device_match_the_totals():
    per = em.memory_stats("cpu")
    total = em.memory_stats()
    assert set(per) == {"allocated_bytes", "cached_bytes", "peak_allocated_bytes", "cache_limit_bytes"}
    assert per["cache_limit_bytes"] == total["devices"]["cpu"]["cache_limit_bytes"]
    assert set(total["devices"]) == ({"cpu"} | ({"metal:0"} if em.metal_is_available() else set())
                                     | ({"cuda:0"} if em.cuda_is_available() else set()))
    assert total["cache_limit_bytes"] == sum(d["cache_limit_bytes"] for d in total["devices"].values())
    old = per["cache_limit_bytes"]
    try:
        em.set_cache_limit(3 << 20, device=em.cpu)
        assert em.memory_stats(em.cpu)["cache_limit_bytes"] == 3 << 20
        assert _C.memory_stats(0, 0)[3] == 3 << 20
    finally:
        em.set_cache_limit(old)


def test_to_device_is_a_dense_copy_on_the_target(rng, device):
    x = rng.standard_normal((5, 6)).astype(np.float32)
    t = em.tensor(x, device=em.cpu).t()[1:, ::2]  # strided, with an offset
    s, lay = _C.to_device(t._storage, t._layout, device.kind, device.index)
    assert lay.is_contiguous() and tuple(lay.shape) == t.shape and s.device == device
    assert not s.same_buffer(t._storage) if s.device == t.device else True
    moved = t.to_device(device)
    np.testing.assert_array_equal(moved.numpy(), x.T[1:, ::2])
    back = moved.to_device("cpu")
    assert back.device == em.cpu and (back is moved) == (device == em.cpu)
    np.testing.assert_array_equal(back.numpy(), x.T[1:, ::2])
    expect_error(lambda: _C.to_device(t._storage, em.Layout([100], [1], 0), 0, 0), "to_device", em.IndexOutOfRange)


def test_default_device_drives_creation(device):
    em.set_default_device(device)  # the device under test as the default (the mixed mode leaves the CPU there)
    made = [em.zeros(2), em.ones(2), em.full((2,), 3.0), em.arange(3), em.rand(2), em.randn(2), em.tensor([1.0]),
            em.eye(2), em.linspace(0, 1, 3), em.Var([1.0, 2.0]), em.nn.Linear(2, 3).weight]
    assert all(t.device == device for t in made)
    em.set_default_device("cpu")
    assert em.get_default_device() == em.cpu and em.zeros(1).device == em.cpu
    assert em.zeros(1, device=device).device == device  # an explicit device always wins


# ----------------------------------------------------------------------------- fused ops' shared checks
def test_fused_checks_are_the_entry_points():
    F = _C.fused
    s = em.zeros(6)._storage
    big = em.Layout([100, 100], [100, 1], 0)
    expect_error(lambda: F.softmax_fwd(s, big), "softmax", em.IndexOutOfRange)
    x = em.randn(2, 3)
    w = em.ones(3)
    y, rstd = F.rms_norm_fwd(x._storage, x._layout, w._storage, w._layout, 1e-5)
    short = em.zeros(1)._storage  # one rstd for two rows
    expect_error(lambda: F.rms_norm_bwd(x._storage, x._layout, w._storage, w._layout, short, x._storage,
                                        x._layout), "rms_norm_bwd", em.EmberValueError)
    ids = em.tensor([1, 2, 3])
    expect_error(lambda: F.softmax_fwd(ids._storage, ids._layout), "softmax", em.DTypeError)
    dx, dw, db = F.layer_norm_bwd(x._storage, x._layout, None, None, *F.layer_norm_fwd(
        x._storage, x._layout, None, None, None, None, 1e-5)[1:], x._storage, x._layout)
    assert dx is not None and dw is None and db is None  # no weight: no weight or bias gradient


def test_fused_ops_refuse_operands_on_two_devices(monkeypatch):
    monkeypatch.setenv("EMBER_METAL", "emulate")
    if not em.metal_is_available():
        pytest.fail("EMBER_METAL=emulate did not make Metal available")
    x = em.randn(2, 4, device="cpu")
    w = em.ones(4, device="metal")
    with pytest.raises(em.DeviceError, match=r"^\[rms_norm\] device mismatch: cpu and metal:0"):
        _C.fused.rms_norm_fwd(x._storage, x._layout, w._storage, w._layout, 1e-5)
    q = em.randn(1, 2, 3, 4, device="cpu")
    m = em.zeros(1, 1, 3, 3, device="metal")
    with pytest.raises(em.DeviceError, match=r"^\[sdpa\] device mismatch"):
        _C.fused.sdpa_check(q._storage, q._layout, q._storage, q._layout, q._storage, q._layout,
                            m._storage, m._layout)


# ----------------------------------------------------------------------------- version bumps
def test_entry_points_bump_the_version_around_in_place_writes():
    t = em.zeros(4)
    s = t._storage
    v = s.version
    _C.fill(s, t._layout, 2.0)
    assert s.version == v + 2  # before and after the write
    src = em.ones(4)
    v = s.version
    _C.copy_into(src._storage, src._layout, s, t._layout, "copy")
    assert s.version == v + 2
    v = s.version
    t[em.tensor([0, 2])] = em.tensor([5.0, 6.0])
    assert s.version == v + 2 and t.tolist() == [5.0, 1.0, 6.0, 1.0]
