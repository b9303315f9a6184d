"""Shared fixtures and helpers for the tests: the device under test, dtypes, random data and view makers.

``EMBER_TEST_DEVICE=metal`` (with ``EMBER_METAL=emulate`` off a Mac) runs the whole suite on Metal:
the device becomes the session's default device (``em.set_default_device``), so every tensor a test
makes without naming a device lands there, and the ``device`` fixture gives it to tests that name one.
Tests marked ``@pytest.mark.cpu_only`` (a CPU-only feature: numpy zero-copy, DLPack, the thread
pool, the ISA; see docs/design/testing.md) are deselected on other devices. The default is ``cpu``.
``EMBER_TEST_DEFAULT_DEVICE=cpu`` beside it keeps em's default device on the CPU while the ``device``
fixture still gives Metal (the mixed mode): lists, arrays and scalars in ops must follow their tensor
operands, not the default device.
"""
import os
import random
import sys
import zlib

import ml_dtypes
import numpy as np
import pytest

import ember as em

TEST_DEVICE = em.Device(os.environ.get("EMBER_TEST_DEVICE", "cpu").strip() or "cpu")
ON_CPU = TEST_DEVICE.type == "cpu"
# What device=None means during the session: the device under test unless the mixed mode names another.
DEFAULT_DEVICE = em.Device(os.environ.get("EMBER_TEST_DEFAULT_DEVICE", "").strip() or str(TEST_DEVICE))


def _supported(dts):
    """The dtypes the device under test holds (Metal has no float64: that refusal has its own tests)."""
    if not em._C.device_available(TEST_DEVICE.kind, TEST_DEVICE.index):
        return dts  # pytest_configure stops the session with the reason
    return [d for d in dts if em._C.device_supports(TEST_DEVICE.kind, TEST_DEVICE.index, d.code)]


ALL = _supported([em.float32, em.float16, em.bfloat16, em.float64, em.int64, em.uint32, em.uint8, em.int32])
FLOATS = _supported([em.float32, em.float16, em.bfloat16, em.float64])
INTS = _supported([em.int64, em.uint32, em.uint8, em.int32])
# bool is no number type: the arithmetic tests over ALL do not take it (its own rules, its own tests)
BOOLS = _supported([em.bool])

NP = {
    "float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float64": np.float64,
    "int64": np.int64, "uint32": np.uint32, "uint8": np.uint8, "int32": np.int32, "bool": np.bool_,
}
# The widest float the device under test holds: float64 data is built in it (float32 on Metal), and
# results are compared against float64 references with TOL[WIDE.name].
WIDE = em.float64 if em.float64 in FLOATS else em.float32
WIDE_NP = np.dtype(NP[WIDE.name])
# (rtol, atol) for comparing a result computed in the dtype against a float64 reference.
TOL = {"float32": (2e-5, 1e-6), "float16": (2e-3, 1e-4), "bfloat16": (1.6e-2, 1e-3), "float64": (1e-12, 1e-14)}

# How a test tensor is laid out in its storage; every op must agree with numpy for each of these.
VIEWS = ["contiguous", "transposed", "narrowed", "stepped", "offset", "broadcast"]


def pytest_configure(config):
    config.addinivalue_line("markers", "cpu_only(reason): the test checks a CPU-only feature; it runs only "
                            "when EMBER_TEST_DEVICE is cpu (docs/design/testing.md lists why each one is)")
    try:
        em.set_default_device(DEFAULT_DEVICE)
    except em.DeviceError as e:
        raise pytest.UsageError(f"EMBER_TEST_DEVICE={TEST_DEVICE}: {e} (for Metal off a Mac, set "
                                "EMBER_METAL=emulate)") from None


def pytest_collection_modifyitems(config, items):
    if ON_CPU:
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("cpu_only") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_report_header(config):
    return (f"ember test device: {TEST_DEVICE} ({em._C.device_describe(TEST_DEVICE.kind, TEST_DEVICE.index)}), "
            f"default device: {DEFAULT_DEVICE}")


@pytest.fixture
def device():
    """The device under test (EMBER_TEST_DEVICE, default cpu), for tests that name a device."""
    return TEST_DEVICE


@pytest.fixture
def cuda(monkeypatch):
    """A cuda device: the CUDA emulator, unless the suite runs on a real GPU (scripts/cuda_smoke.sh:
    EMBER_TEST_DEVICE=cuda with the NVIDIA backend)."""
    if not (os.environ.get("EMBER_TEST_DEVICE", "").startswith("cuda") and em.cuda.backend() == "nvidia"):
        monkeypatch.setenv("EMBER_CUDA", "emulate")
    return em.Device("cuda")


@pytest.fixture(autouse=True)
def _restore_default_device():
    # A test that changes the default device must not move the tests after it.
    yield
    if em.get_default_device() != DEFAULT_DEVICE:
        em.set_default_device(DEFAULT_DEVICE)


def seed_of(request):
    """One seed per test, stable across runs so a failure reproduces; EMBER_TEST_SEED=<n> mixes in n
    to fuzz with other draws."""
    return (zlib.crc32(request.node.nodeid.encode()) ^ int(os.environ.get("EMBER_TEST_SEED", "0"))) & 0xFFFFFFFF


@pytest.fixture(autouse=True)
def _seed_global_rngs(request):
    # Tests that draw from the global numpy / torch / random generators get their test's seed too.
    seed = seed_of(request)
    random.seed(seed)
    np.random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


@pytest.fixture
def rng(request):
    return np.random.default_rng(seed_of(request))


def npdt(dt):
    return np.dtype(NP[dt.name])


def rand_np(rng, shape, dt, lo=-3.0, hi=3.0):
    """Random values exactly representable in dt (halves are rounded first), as an array of dt's numpy type."""
    shape = tuple(shape)
    if dt.is_float:
        return rng.uniform(lo, hi, size=shape).astype(npdt(dt))
    if dt is em.int64:
        return rng.integers(-20, 20, size=shape, dtype=np.int64)
    if dt is em.bool:
        return rng.random(size=shape) < 0.5
    return rng.integers(0, 20, size=shape).astype(npdt(dt))


def f64(a):
    """A numpy array (any dtype, including ml_dtypes.bfloat16) as float64."""
    return np.asarray(a).astype(np.float64)


def make_view(rng, shape, dt, kind, device=None, lo=-3.0, hi=3.0):
    """(tensor, numpy reference) where the tensor has the given shape, laid out as `kind` in a larger storage."""
    shape = tuple(shape)
    nd = len(shape)
    if nd == 0 or kind == "contiguous":
        base = rand_np(rng, shape, dt, lo, hi)
        return em.tensor(base, device=device), base
    if kind == "transposed":  # reversed dims: the last dim has the largest stride
        base = rand_np(rng, shape[::-1], dt, lo, hi)
        perm = tuple(reversed(range(nd)))
        return em.tensor(base, device=device).permute(*perm), base.transpose(perm)
    if kind == "narrowed":  # a window of the last dim
        base = rand_np(rng, shape[:-1] + (shape[-1] + 3,), dt, lo, hi)
        t = em.tensor(base, device=device).narrow(-1, 2, shape[-1])
        return t, base[..., 2 : 2 + shape[-1]]
    if kind == "stepped":  # every other element of dim 0 and of the last dim
        big = (shape[0] * 2,) + shape[1:-1] + (shape[-1] * 2,) if nd > 1 else (shape[0] * 2,)
        base = rand_np(rng, big, dt, lo, hi)
        idx = (slice(None, None, 2),) + (slice(None),) * (nd - 2) + ((slice(1, None, 2),) if nd > 1 else ())
        return em.tensor(base, device=device)[idx], base[idx]
    if kind == "offset":  # the second block of a stacked storage: start_offset > 0
        base = rand_np(rng, (3,) + shape, dt, lo, hi)
        return em.tensor(base, device=device)[1], base[1]
    if kind == "broadcast":  # dim 0 is a stride-0 broadcast of size-1 data
        base = rand_np(rng, (1,) + shape[1:], dt, lo, hi)
        return em.tensor(base, device=device).broadcast_as(shape), np.broadcast_to(base, shape)
    raise ValueError(kind)


def rand_shape(rng, nd, lo=1, hi=6):
    return tuple(int(s) for s in rng.integers(lo, hi + 1, size=nd))


def assert_close(t, ref, dt=None, rtol=None, atol=None):
    """Compares tensor t with a reference array computed in float64 (or exactly for ints)."""
    dt = dt or t.dtype
    got = t.numpy()
    assert got.dtype == npdt(dt), (got.dtype, dt)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if dt.is_float:
        r, a = TOL[dt.name]
        np.testing.assert_allclose(f64(got), f64(ref), rtol=rtol or r, atol=atol or a, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, ref.astype(npdt(dt)))


def expect_error(fn, op, cls=em.EmberError):
    """fn() raises cls (an EmberError subclass) whose message starts with [op]."""
    with pytest.raises(cls) as ei:
        fn()
    assert isinstance(ei.value, em.EmberError)
    msg = str(ei.value)
    assert msg.startswith(f"[{op}]"), msg
    return ei.value
