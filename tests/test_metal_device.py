"""The Metal device layer on the emulated device: availability, creation, host transfers, the pool, hazards,
errors (f64, device mismatch, compile errors, out-of-bounds kernels), MetalStorage and custom ops."""
import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember import _C

from conftest import expect_error, make_view, npdt, rand_np, rand_shape

METAL_DTYPES = [em.float32, em.float16, em.bfloat16, em.int64, em.uint32, em.uint8]
FLOATS = [em.float32, em.float16, em.bfloat16]
VIEWS = ["contiguous", "transposed", "narrowed", "stepped", "offset", "broadcast"]


@pytest.fixture(autouse=True)
def _metal(monkeypatch):
    # The emulator unless a real Metal device runs the suite (scripts/metal_smoke.sh on a Mac).
    if em.metal.backend() != "apple":
        monkeypatch.setenv("EMBER_METAL", "emulate")
    assert em.metal_is_available()


def allocated():
    return em.metal.memory_stats()["allocated_bytes"]


# ----------------------------------------------------------------------------- availability
def test_emulator_is_available_only_when_asked(monkeypatch):
    assert em.metal.backend() in ("emulator", "apple")
    assert em.metal.describe().startswith("metal:0 (")
    if em.metal.backend() == "apple":
        return
    monkeypatch.delenv("EMBER_METAL")
    assert not em.metal_is_available()
    assert em.metal.backend() is None
    expect_error(lambda: em.zeros(3, device="metal"), "alloc", em.DeviceError)
    expect_error(lambda: em.ones(3, device=em.cpu).to_device("metal"), "to_device", em.DeviceError)
    monkeypatch.setenv("EMBER_METAL", " Emulate ")
    assert em.metal_is_available()


def test_only_metal_0_exists():
    expect_error(lambda: em.zeros(2, device=em.Device("metal", 1)), "alloc", em.DeviceError)
    expect_error(lambda: em.metal.synchronize("metal:1"), "synchronize", em.DeviceError)
    expect_error(lambda: em.metal.synchronize("cpu"), "metal", em.DeviceError)


# ----------------------------------------------------------------------------- creation and transfers
@pytest.mark.parametrize("dt", METAL_DTYPES, ids=lambda d: d.name)
def test_creation_matches_cpu(dt):
    for fn in (lambda d: em.zeros((3, 5), dtype=dt, device=d), lambda d: em.ones((4,), dtype=dt, device=d),
               lambda d: em.full((2, 3), 7, dtype=dt, device=d), lambda d: em.full((5,), -2.75, dtype=dt, device=d),
               lambda d: em.arange(3, 40, 3, dtype=dt, device=d)):
        m, c = fn("metal"), fn("cpu")
        assert m.device == em.Device("metal", 0) and m.dtype is dt
        got = m.numpy()
        assert got.dtype == npdt(dt)
        np.testing.assert_array_equal(got.view(np.uint8), c.numpy().view(np.uint8))


def test_arange_is_the_cpus_bit_for_bit():
    for dt in (em.float32, em.float16, em.bfloat16):
        m = em.arange(-1.3, 500.0, 0.37, dtype=dt, device="metal").numpy()
        c = em.arange(-1.3, 500.0, 0.37, dtype=dt, device=em.cpu).numpy()
        np.testing.assert_array_equal(m.view(np.uint16 if dt.itemsize == 2 else np.uint32),
                                      c.view(np.uint16 if dt.itemsize == 2 else np.uint32))


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_rand_is_the_cpus_stream(dt):
    # One seed, one stream: the [0, 1) uniforms are the CPU's bit for bit on every float dtype, and
    # both devices advance the generator alike (the second draws agree too).
    n = 3000
    em.manual_seed(1234)
    m1, m2 = em.rand(n, dtype=dt, device="metal").numpy(), em.rand(n, dtype=dt, device="metal").numpy()
    em.manual_seed(1234)
    c1, c2 = em.rand(n, dtype=dt, device=em.cpu).numpy(), em.rand(n, dtype=dt, device=em.cpu).numpy()
    np.testing.assert_array_equal(m1, c1)
    np.testing.assert_array_equal(m2, c2)
    assert not np.array_equal(m1, m2)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_rand_interval_follows_the_cpu_and_stays_below_hi(dt):
    # Any [lo, hi): the same draws scaled (in float on Metal, in double on the CPU), never reaching hi.
    em.manual_seed(3)
    m = em.rand(4000, dtype=dt, device="metal", lo=-2.0, hi=5.0).numpy().astype(np.float64)
    em.manual_seed(3)
    c = em.rand(4000, dtype=dt, device=em.cpu, lo=-2.0, hi=5.0).numpy().astype(np.float64)
    ulp = {em.float32: 2**-21, em.float16: 2**-8, em.bfloat16: 2**-5}[dt]  # one ulp near 5
    np.testing.assert_allclose(m, c, rtol=0, atol=ulp)
    assert m.min() >= -2.0 and m.max() < 5.0
    em.manual_seed(5)
    tight = em.rand(4000, dtype=dt, device="metal", lo=1.0, hi=1.0 + 4 * ulp).numpy().astype(np.float64)
    assert tight.max() < 1.0 + 4 * ulp and tight.min() >= 1.0


def test_randn_follows_the_cpus_stream():
    em.manual_seed(99)
    m = em.randn(20000, device="metal").numpy().astype(np.float64)
    em.manual_seed(99)
    c = em.randn(20000, device=em.cpu).numpy().astype(np.float64)
    # The CPU keeps 53 bits per uniform, Metal 24: the same normals to float rounding.
    np.testing.assert_allclose(m, c, rtol=1e-4, atol=1e-4)
    assert abs(m.mean()) < 0.03 and abs(m.std() - 1) < 0.03


@pytest.mark.parametrize("dt", METAL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", VIEWS)
def test_to_device_round_trips_views(rng, dt, kind):
    shape = rand_shape(rng, 3)
    t, ref = make_view(rng, shape, dt, kind, device=em.cpu)
    m = t.to_device("metal")
    assert m.device == em.Device("metal") and m.is_contiguous() and m.shape == shape
    np.testing.assert_array_equal(m.numpy(), ref)
    back = m.to_device(em.cpu)
    assert back.device == em.cpu
    np.testing.assert_array_equal(back.numpy(), ref)
    # A view of a Metal tensor moves as its values.
    mv, refv = make_view(rng, shape, dt, kind, device="metal")
    assert mv.device.type == "metal"
    np.testing.assert_array_equal(mv.to_device("cpu").numpy(), refv)
    np.testing.assert_array_equal(mv.numpy(), refv)


def test_numpy_tolist_item_repr_of_a_metal_tensor():
    t = em.tensor([[1.5, -2.0], [3.25, 4.0]], device="metal")
    a = t.numpy()
    a[0, 0] = 100  # a copy: the tensor is unchanged
    assert t.numpy()[0, 0] == 1.5
    assert t.tolist() == [[1.5, -2.0], [3.25, 4.0]]
    assert t[1, 0].item() == 3.25
    assert "device=metal:0" in repr(t)
    b = em.tensor(np.array([1, 2], ml_dtypes.bfloat16), device="metal")
    assert b.numpy().dtype == np.dtype(ml_dtypes.bfloat16)


def test_to_device_is_differentiable_both_ways():
    x = em.Var(em.tensor([1.0, -2.0, 3.0], device=em.cpu))
    y = x.to_device("metal").to_device("cpu")
    loss = (y * y).sum()
    grads = loss.backward()
    np.testing.assert_array_equal(grads[x].numpy(), [2.0, -4.0, 6.0])


def test_copy_and_clone_always_allocate():
    t = em.arange(12, dtype=em.float32, device="metal").reshape(3, 4)
    for c in (t.copy(), t.clone(), t.contiguous().copy()):
        assert not c._storage.same_buffer(t._storage)
        np.testing.assert_array_equal(c.numpy(), t.numpy())
    assert t.contiguous() is t


# ----------------------------------------------------------------------------- float64 refusal
def test_float64_is_refused_before_anything_is_allocated():
    m = em.ones(4, device="metal")
    em.metal.synchronize()
    before = allocated()
    for fn, op in ((lambda: em.zeros(4, dtype=em.float64, device="metal"), "zeros"),
                   (lambda: em.full((4,), 1.0, dtype=em.float64, device="metal"), "full"),
                   (lambda: em.arange(4, dtype=em.float64, device="metal"), "arange"),
                   (lambda: em.rand(4, dtype=em.float64, device="metal"), "rand"),
                   (lambda: em.randn(4, dtype=em.float64, device="metal"), "randn"),
                   (lambda: em.ones(4, dtype=em.float64, device=em.cpu).to_device("metal"), "to_device"),
                   (lambda: m.to_dtype(em.float64), "to_dtype"),
                   (lambda: em.MetalStorage.empty(4, em.float64), "empty")):
        e = expect_error(fn, op, em.DTypeError)
        assert "float64 is not supported on metal" in str(e)
    assert allocated() == before


# ----------------------------------------------------------------------------- device mismatch
def test_mixing_devices_in_one_op_raises():
    m = em.ones((2, 3), device="metal")
    c = em.ones((2, 3), device=em.cpu)
    expect_error(lambda: m + c, "add", em.DeviceError)
    expect_error(lambda: em.cat([m, c], 0), "cat", em.DeviceError)
    expect_error(lambda: em.where(em.ones(3, dtype=em.uint8, device=em.cpu), em.ones(3, device="metal"),
                                 em.ones(3, device=em.cpu)), "where",
                 em.DeviceError)
    expect_error(lambda: m.slice_set(c, 0, 0), "slice_set", em.DeviceError)
    assert "device mismatch" in str(expect_error(lambda: c @ m.transpose(0, 1), "matmul", em.DeviceError))


# ----------------------------------------------------------------------------- MetalStorage
def test_metal_storage_from_the_pool():
    s = em.MetalStorage.empty(10, "float16")
    assert isinstance(s, em.MetalStorage)
    assert s.dtype is em.float16 and s.device == em.Device("metal", 0) and s.numel == 10 and s.nbytes == 20
    assert s.numpy().shape == (10,) and s.numpy().dtype == np.float16
    t = em.arange(6, dtype=em.int64, device="metal")
    assert isinstance(t._storage, em.MetalStorage)
    np.testing.assert_array_equal(t._storage.numpy(), np.arange(6))
    expect_error(lambda: em.MetalStorage.empty(-1, em.float32), "empty", em.EmberValueError)


# ----------------------------------------------------------------------------- the pool
def test_pool_reuses_freed_buffers_and_empties():
    em.metal.synchronize()
    em.metal.empty_cache()
    s0 = em.metal.memory_stats()
    assert s0["cached_bytes"] == 0
    t = em.zeros(1000, device="metal")  # 4000 bytes: the 4096-byte bucket
    s1 = em.metal.memory_stats()
    assert s1["allocated_bytes"] >= s0["allocated_bytes"] + 4000
    del t
    s2 = em.metal.memory_stats()
    assert s2["cached_bytes"] >= 4000 and s2["allocated_bytes"] == s0["allocated_bytes"]
    u = em.zeros(900, device="metal")  # the same bucket: served from the cache
    s3 = em.metal.memory_stats()
    assert s3["pool_hits"] == s2["pool_hits"] + 1 and s3["cached_bytes"] == s2["cached_bytes"] - 4096
    np.testing.assert_array_equal(u.numpy(), np.zeros(900, np.float32))  # zeroed although reused
    del u
    em.metal.empty_cache()
    assert em.metal.memory_stats()["cached_bytes"] == 0


def test_one_memory_api_for_every_device():
    # em.metal.memory_stats carries em.memory_stats's four keys, with the same counts
    keys = {"allocated_bytes", "cached_bytes", "peak_allocated_bytes", "cache_limit_bytes"}
    em.metal.synchronize()
    t = em.zeros(3000, device="metal")
    generic, metal = em.memory_stats("metal"), em.metal.memory_stats()
    assert set(generic) == keys and keys <= set(metal)
    assert {k: metal[k] for k in keys} == generic and generic["allocated_bytes"] >= 12000
    assert em.memory_stats()["devices"]["metal:0"] == generic
    assert not {"allocated", "cached", "peak", "cache_limit", "memory_limit"} & set(metal)
    del t


def test_pool_peak_and_limits():
    em.metal.synchronize()
    em.metal.empty_cache()
    em.metal.reset_peak_memory_stats()
    base = em.metal.memory_stats()["peak_allocated_bytes"]
    t = em.zeros(1 << 16, device="metal")
    assert em.metal.memory_stats()["peak_allocated_bytes"] >= base + (1 << 18)
    del t
    em.metal.reset_peak_memory_stats()
    assert em.metal.memory_stats()["peak_allocated_bytes"] == em.metal.memory_stats()["allocated_bytes"]
    old = em.metal.memory_stats()["cache_limit_bytes"]
    try:
        em.metal.set_cache_limit(0)
        t = em.zeros(100, device="metal")
        del t
        assert em.metal.memory_stats()["cached_bytes"] == 0  # nothing kept past a zero cache limit
    finally:
        em.metal.set_cache_limit(old)
    expect_error(lambda: em.metal.set_cache_limit(-1), "set_cache_limit", em.EmberValueError)


def test_memory_limit_raises_out_of_memory():
    em.metal.synchronize()
    old = em.metal.memory_stats()["memory_limit_bytes"]
    try:
        em.metal.set_memory_limit(em.metal.memory_stats()["allocated_bytes"] + (1 << 20))
        e = expect_error(lambda: em.zeros(1 << 20, device="metal"), "alloc", em.OutOfMemory)
        assert "out of memory" in str(e) and "metal:0" in str(e)
        expect_error(lambda: em.ones(1 << 20, device=em.cpu).to_device("metal"), "to_device", em.OutOfMemory)
        small = em.zeros(16, device="metal")  # the device is still usable
        np.testing.assert_array_equal(small.numpy(), np.zeros(16, np.float32))
    finally:
        em.metal.set_memory_limit(old)


# ----------------------------------------------------------------------------- kernels through the Launch API
SRC = """
#include <metal_stdlib>
using namespace metal;
kernel void scale(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant float& a [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  y[i] = a * x[i];
}
kernel void add_one(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = y[i] + 1.0f; }
kernel void past_end(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
  y[i] = x[i + 1000];
}
"""


def run(function, args, n, source=SRC):
    """One dispatch through em.metal.Kernel (the one user-kernel dispatcher): ("in", s) binds s as an input,
    ("out" | "inout", s) as an output, a numpy value as a scalar; the kernels here declare them in that order."""
    ins = [a[1] for a in args if isinstance(a, tuple) and a[0] == "in"]
    outs = [a[1] for a in args if isinstance(a, tuple) and a[0] in ("out", "inout")]
    scalars = [a for a in args if not isinstance(a, tuple)]
    em.metal.Kernel(source, function)(inputs=ins, outputs=outs, scalars=scalars, grid_threads=n,
                                      threads_per_threadgroup=min(n, 64))


def test_dispatches_see_each_others_writes_without_synchronize():
    n = 300
    x = em.arange(n, dtype=em.float32, device="metal")._storage
    y, z = em.MetalStorage.empty(n, em.float32), em.MetalStorage.empty(n, em.float32)
    before = em.metal.memory_stats()["barriers"]
    run("scale", [("in", x), ("out", y), np.float32(2)], n)  # y = 2x
    run("add_one", [("inout", y)], n)                                   # RAW and WAW on y: a barrier
    run("scale", [("in", y), ("out", z), np.float32(3)], n)  # RAW on y: a barrier
    run("scale", [("in", x), ("out", y), np.float32(5)], n)  # WAR on y (z's read): a barrier
    after = em.metal.memory_stats()["barriers"]
    np.testing.assert_array_equal(z.numpy(), 3 * (2 * np.arange(n, dtype=np.float32) + 1))
    np.testing.assert_array_equal(y.numpy(), 5 * np.arange(n, dtype=np.float32))
    assert after - before >= 3


def test_independent_dispatches_need_no_barrier():
    n = 64
    em.metal.synchronize()  # a fresh encoder: nothing earlier is pending
    x = em.arange(n, dtype=em.float32, device="metal")._storage
    ys = [em.MetalStorage.empty(n, em.float32) for _ in range(3)]
    em.metal.synchronize()
    before = em.metal.memory_stats()["barriers"]
    for y in ys:
        run("scale", [("in", x), ("out", y), np.float32(2)], n)
    assert em.metal.memory_stats()["barriers"] == before
    for y in ys:
        np.testing.assert_array_equal(y.numpy(), 2 * np.arange(n, dtype=np.float32))


def test_out_of_bounds_kernel_raises_naming_kernel_and_buffer():
    n = 16
    x = em.zeros(n, device="metal")._storage
    y = em.MetalStorage.empty(n, em.float32)
    run("past_end", [("in", x), ("out", y)], n)
    with pytest.raises(em.IndexOutOfRange) as ei:
        em.metal.synchronize()
    msg = str(ei.value)
    assert msg.startswith("[metal] kernel 'past_end'") and "buffer(0)" in msg and "offset" in msg, msg
    em.metal.synchronize()  # reported once; the device goes on working
    t = em.arange(5, dtype=em.float32, device="metal")
    np.testing.assert_array_equal(t.copy().numpy(), np.arange(5, dtype=np.float32))


def test_compile_error_carries_the_log_and_nothing_runs():
    x = em.zeros(4, device="metal")._storage
    bad = "kernel void broken(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = nope; }"
    with pytest.raises(em.EmberError) as ei:
        run("broken", [("out", x)], 4, source=bad)
    assert str(ei.value).startswith("[metal] compiling broken.metal failed") and "nope" in str(ei.value)
    with pytest.raises(em.EmberError, match=r"^\[metal\] .*defines no kernel 'absent'"):
        run("absent", [("out", x)], 4)
    em.metal.synchronize()


def test_dispatch_rejects_storages_of_other_devices():
    c = em.zeros(4, device=em.cpu)._storage
    with pytest.raises(em.EmberTypeError, match=r"^\[metal\.Kernel\] outputs\[0\] is a CpuStorage"):
        run("add_one", [("inout", c)], 4)


def test_pipelines_are_cached_by_source_not_name():
    n = 8
    x = em.arange(n, dtype=em.float32, device="metal")._storage
    y = em.MetalStorage.empty(n, em.float32)
    other = SRC.replace("y[i] = a * x[i];", "y[i] = a * x[i] + 100.0f;")
    run("scale", [("in", x), ("out", y), np.float32(1)], n)
    p = em.metal.memory_stats()["pipelines"]
    run("scale", [("in", x), ("out", y), np.float32(1)], n, source=other)
    assert em.metal.memory_stats()["pipelines"] == p + 1  # same name and label, new source: a new pipeline
    np.testing.assert_array_equal(y.numpy(), np.arange(n, dtype=np.float32) + 100)
    run("scale", [("in", x), ("out", y), np.float32(1)], n)
    assert em.metal.memory_stats()["pipelines"] == p + 1
    np.testing.assert_array_equal(y.numpy(), np.arange(n, dtype=np.float32))


def test_many_dispatches_commit_in_batches():
    em.metal.synchronize()
    c0 = em.metal.memory_stats()["commits"]
    t = em.zeros(32, device="metal")
    for _ in range(100):
        t.fill_(1.0)
    s = em.metal.memory_stats()
    assert s["commits"] - c0 >= 2  # the commit policy cut the stream
    np.testing.assert_array_equal(t.numpy(), np.ones(32, np.float32))
    # Each command buffer's first fill of t waits on the fence of the one before (still in flight):
    # Metal orders nothing across command buffers on untracked buffers by itself.
    em.metal.synchronize()
    w0 = em.metal.memory_stats()["fence_waits"]
    for _ in range(100):
        t.fill_(2.0)
    assert em.metal.memory_stats()["fence_waits"] - w0 >= 2
    u = em.zeros(32, device="metal")
    em.metal.synchronize()
    w1 = em.metal.memory_stats()["fence_waits"]
    u.fill_(3.0)  # nothing in flight touches u: no wait
    assert em.metal.memory_stats()["fence_waits"] == w1
    np.testing.assert_array_equal(t.numpy(), np.full(32, 2, np.float32))


# ----------------------------------------------------------------------------- custom ops
class Triple(em.CustomOp1):
    name = "triple"

    def cpu_fwd(self, storage, layout):
        return em.CpuStorage.from_numpy(3 * storage.as_numpy(layout)), layout.shape

    def metal_fwd(self, storage, layout):
        assert isinstance(storage, em.MetalStorage)
        x = _C.contiguous(storage, layout)[0]
        out = em.MetalStorage.empty(x.numel, x.dtype)
        run("scale", [("in", x), ("out", out), np.float32(3)], x.numel)
        return out, layout.shape


class WrongDevice(Triple):
    name = "wrong_device"

    def metal_fwd(self, storage, layout):
        return em.CpuStorage.from_numpy(np.zeros(storage.numel, np.float32)), layout.shape


class NoMetal(em.CustomOp1):
    name = "no_metal"

    def cpu_fwd(self, storage, layout):
        return em.CpuStorage.from_numpy(storage.as_numpy(layout).copy()), layout.shape


def test_custom_ops_dispatch_to_metal_fwd(rng):
    ref = rand_np(rng, (5, 7), em.float32)
    t = em.tensor(ref, device="metal").transpose(0, 1)
    y = t.apply_op1(Triple())
    assert y.device == em.Device("metal") and y.shape == (7, 5)
    np.testing.assert_array_equal(y.numpy(), 3 * ref.T)
    expect_error(lambda: t.apply_op1(WrongDevice()), "wrong_device", em.DeviceError)
    expect_error(lambda: t.apply_op1(NoMetal()), "no_metal", em.UnsupportedOp)
    expect_error(lambda: t.apply_op2(em.ones((7, 5), device=em.cpu), _Add2()), "add2", em.DeviceError)


class _Add2(em.CustomOp2):
    name = "add2"

    def cpu_fwd(self, s1, l1, s2, l2):
        return em.CpuStorage.from_numpy(s1.as_numpy(l1) + s2.as_numpy(l2)), l1.shape
