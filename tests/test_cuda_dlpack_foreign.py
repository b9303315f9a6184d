"""em.from_dlpack of another library's CUDA memory under the CUDA emulator, whose device memory is host memory: a
producer written here exports a kDLCUDA capsule over a numpy buffer it owns; ember wraps it without a copy, through
the capsule's strides and byte offset, and calls the producer's deleter once, after the last view dies."""
import ctypes as C
import gc
import warnings
import weakref

import ml_dtypes
import numpy as np
import pytest

import ember as em
from ember import interop


@pytest.fixture(autouse=True)
def _collections_scan_this_test_only():
    """released_after_gc's full collections look at the objects this test makes, not at the whole suite's heap
    (about a second each late in a worker): what exists before the test is frozen (gc.freeze) until it ends."""
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture
def emulated(monkeypatch):
    # Host memory handed to ember as CUDA memory: only the emulator's device memory is host memory. On a real GPU
    # (scripts/cuda_smoke.sh) a host pointer is no device address; there the import is for torch/cupy to show.
    if em.cuda.backend() == "nvidia":
        pytest.skip("the producer here is host memory, which only the emulator treats as device memory")
    monkeypatch.setenv("EMBER_CUDA", "emulate")
    return em.Device("cuda")


# ember dtype name -> (numpy dtype, DLPack type code, bits)
DL = {"float32": (np.float32, 2, 32), "float16": (np.float16, 2, 16), "bfloat16": (ml_dtypes.bfloat16, 4, 16),
      "float64": (np.float64, 2, 64), "int64": (np.int64, 0, 64), "int32": (np.int32, 0, 32),
      "uint32": (np.uint32, 1, 32), "uint8": (np.uint8, 1, 8)}


class ForeignCuda:
    """A producer of "CUDA" memory that is not ember's: a numpy buffer, which under the emulator is device memory.
    ``released`` counts the calls of its DLPack deleter. As DLPack requires, an exported producer (its struct,
    its deleter, its memory) stays alive until the deleter runs, even when the caller drops it."""

    exported: set = set()

    def __init__(self, arr, shape, strides, code, bits, byte_offset=0, read_only=False, data=None, lanes=1):
        self.arr, self.released, self.calls = arr, 0, []
        self.shape = (C.c_int64 * max(len(shape), 1))(*shape)
        self.strides = (C.c_int64 * max(len(shape), 1))(*strides)
        self.m = interop._DLManagedVersioned()
        self.m.version = interop._DLVersion(1, 0)
        self.m.flags = 1 if read_only else 0  # DLPACK_FLAG_BITMASK_READ_ONLY
        dl = self.m.dl_tensor
        dl.data = arr.ctypes.data if data is None else data
        dl.device = interop._DLDevice(2, 0)
        dl.ndim = len(shape)
        dl.dtype = interop._DLDataType(code, bits, lanes)
        dl.shape = C.cast(self.shape, C.POINTER(C.c_int64))
        dl.strides = C.cast(self.strides, C.POINTER(C.c_int64))
        dl.byte_offset = byte_offset

        def deleter(_addr):
            self.released += 1
            ForeignCuda.exported.discard(self)

        self._deleter = interop._DELETER(deleter)
        self.m.deleter = self._deleter

    @classmethod
    def of_view(cls, base, view, **kw):
        """Exports ``view`` (a positively strided numpy view into ``base``) as CUDA memory at base's address."""
        _, code, bits = DL[{np.dtype(ml_dtypes.bfloat16): "bfloat16"}.get(base.dtype, base.dtype.name)]
        off = view.__array_interface__["data"][0] - base.ctypes.data
        return cls(base, view.shape, [s // base.itemsize for s in view.strides], code, bits, byte_offset=off, **kw)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        ForeignCuda.exported.add(self)  # until the consumer's deleter call (an unconsumed capsule leaks it)
        return interop._api.PyCapsule_New(C.addressof(self.m), interop._NAME_V, None)


def random_array(rng, shape, dtype):
    npt = DL[dtype][0]
    if dtype.startswith(("int", "uint")):
        return rng.integers(0, 100, shape).astype(npt)
    return (rng.standard_normal(shape) * 4).astype(npt)


def released_after_gc(p):
    gc.collect()
    return p.released


@pytest.mark.parametrize("dtype", list(DL))
def test_foreign_cuda_memory_is_shared(emulated, rng, dtype):
    base = random_array(rng, (6, 7), dtype)
    p = ForeignCuda.of_view(base, base.T)  # the transpose, through strides
    if not em._C.device_supports(emulated.kind, emulated.index, getattr(em, dtype).code):
        with pytest.raises(em.DTypeError, match=rf"^\[from_dlpack\] {dtype} is not supported on cuda"):
            em.from_dlpack(p)
        assert released_after_gc(p) == 1  # consumed, refused, handed back once
        return
    allocated = em.memory_stats("cuda")["allocated_bytes"]
    u = em.from_dlpack(p)
    assert p.calls == [{"max_version": (1, 0), "stream": 1}]
    assert u.device == emulated and u.dtype == getattr(em, dtype) and u.shape == (7, 6)
    assert u.storage.data_ptr == base.ctypes.data and u.storage._foreign  # the producer's memory itself
    assert em.memory_stats("cuda")["allocated_bytes"] == allocated  # not ember's allocation
    np.testing.assert_array_equal(u.numpy(), base.T)
    base[2, 3] = 9  # the producer writes, ember reads
    assert u.numpy()[3, 2] == 9
    u[1].fill_(5)  # ember writes (a kernel on the import's view), the producer reads
    np.testing.assert_array_equal(base[:, 1], np.full(6, 5, base.dtype))
    v, w = u[2:, 1:], u * 2  # a view keeps the memory; a result has its own storage
    del u
    assert released_after_gc(p) == 0
    np.testing.assert_array_equal(v.numpy(), base.T[2:, 1:])
    np.testing.assert_array_equal(w.numpy(), base.T * 2)
    del v
    assert released_after_gc(p) == 1
    del w
    assert released_after_gc(p) == 1  # exactly once


@pytest.mark.parametrize("seed", range(6))
def test_ops_on_foreign_views_match_numpy(emulated, seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(2, 7, size=int(rng.integers(1, 4))))
    base = (rng.standard_normal([n * 2 + 1 for n in shape]) * 3).astype(np.float32)
    # offsets, steps and a permutation of the axes: the capsule's byte_offset and strides
    view = base[tuple(slice(int(rng.integers(0, 2)), None, int(rng.integers(1, 3))) for _ in shape)]
    view = view[tuple(slice(0, n) for n in shape)].transpose(rng.permutation(len(shape)))
    p = ForeignCuda.of_view(base, view)
    u = em.from_dlpack(p)
    assert u.shape == view.shape and u.storage.data_ptr == view.__array_interface__["data"][0]
    np.testing.assert_array_equal(u.numpy(), view)
    np.testing.assert_array_equal((u + 1.5).numpy(), view + np.float32(1.5))
    np.testing.assert_array_equal((u * u).numpy(), view * view)
    np.testing.assert_array_equal(u.contiguous().numpy(), view)
    np.testing.assert_array_equal(u.max(dim=-1).numpy(), view.max(axis=-1))
    np.testing.assert_allclose(u.exp().numpy(), np.exp(view), rtol=1e-6)
    np.testing.assert_allclose(u.sum(dim=0).numpy(), view.sum(axis=0), rtol=1e-5, atol=1e-5)
    if u.ndim == 2:
        np.testing.assert_allclose((u @ u.t()).numpy(), view @ view.T, rtol=1e-4, atol=1e-4)
    del u
    assert released_after_gc(p) == 1


def test_a_kernel_writes_the_producers_memory_within_its_own_extent(emulated):
    base = np.zeros(10, np.float32)
    p = ForeignCuda.of_view(base, base[2:8])  # 6 elements: 24 bytes from base[2]
    u = em.from_dlpack(p)
    assert u.storage.nbytes == 24
    src = "__global__ void put(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 1.0f + i; }"
    em.cuda.Kernel(src, "put")(outputs=[u.storage], scalars=[np.int32(6)], grid=1, block=8)
    np.testing.assert_array_equal(base, [0, 0, 1, 2, 3, 4, 5, 6, 0, 0])
    # the emulator checks accesses against the foreign buffer's own size, not a pool bucket's
    with pytest.raises(em.IndexOutOfRange, match=r"out-of-bounds access to argument 0 \('y', float\*\) at byte offset "
                       r"24 \(4 bytes; the argument has 24\)"):
        em.cuda.Kernel(src, "put")(outputs=[u.storage], scalars=[np.int32(7)], grid=1, block=8)
    np.testing.assert_array_equal(base[8:], [0, 0])


def test_overlapping_imports_are_the_same_buffer(emulated):
    base = np.arange(64, dtype=np.float32)
    old = base.copy()
    u = em.from_dlpack(ForeignCuda.of_view(base, base[2:50]))
    v = em.from_dlpack(ForeignCuda.of_view(base, base[0:48]))
    w = em.from_dlpack(ForeignCuda.of_view(base, base[50:]))
    assert u.storage.same_buffer(v.storage) and not u.storage.same_buffer(w.storage)
    assert not u.storage.same_buffer(em.zeros(48, device=emulated).storage)
    u[:] = v  # overlapping: the copy reads the old values (through a snapshot), as numpy's assignment does
    want = old.copy()
    want[2:50] = old[0:48]
    np.testing.assert_array_equal(base, want)


def test_reexport_and_round_trip_keep_the_producers_memory(emulated, rng):
    base = rng.standard_normal((3, 4)).astype(np.float32)
    p = ForeignCuda.of_view(base, base)
    u = em.from_dlpack(p)
    again = em.from_dlpack(u.t().__dlpack__(max_version=(1, 0)))  # ember's own capsule of the wrapped storage
    assert again.storage is u.storage
    cap = u[1:].__dlpack__(stream=7)  # an export the consumer has not taken yet also holds it
    del u, again
    assert released_after_gc(p) == 0
    w = em.from_dlpack(cap)
    np.testing.assert_array_equal(w.numpy(), base[1:])
    del cap, w
    assert released_after_gc(p) == 1


def test_read_only_memory_is_copied_on_the_device(emulated, rng):
    base = rng.standard_normal((4, 5)).astype(np.float32)
    p = ForeignCuda.of_view(base, base[:, 1:].T, read_only=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a copy the flag asks for: no warning
        u = em.from_dlpack(p)
    assert not u.storage._foreign and u.storage.data_ptr != base.ctypes.data
    assert released_after_gc(p) == 1  # released once copied
    want = base[:, 1:].T.copy()
    base[:] = 0
    np.testing.assert_array_equal(u.numpy(), want)


def test_misaligned_memory_is_copied(emulated, rng):
    raw = rng.integers(0, 256, 41).astype(np.uint8)
    p = ForeignCuda(raw, (10,), (1,), 2, 32, data=raw.ctypes.data + 1 if raw.ctypes.data % 4 == 0 else raw.ctypes.data)
    u = em.from_dlpack(p)
    start = p.m.dl_tensor.data - raw.ctypes.data
    assert not u.storage._foreign and released_after_gc(p) == 1
    np.testing.assert_array_equal(u.numpy(), raw[start:start + 40].view(np.float32))


def test_bad_capsules_are_refused(emulated):
    a = np.zeros(8, np.float32)
    p = ForeignCuda(a, (2, 3), (2**62, 1), 2, 32)
    with pytest.raises(em.EmberValueError, match=r"^\[from_dlpack\] strides \(4611686018427387904, 1\) of shape "
                       r"\(2, 3\) reach outside the address space"):
        em.from_dlpack(p)
    assert released_after_gc(p) == 1  # consumed, then released
    for code, bits, lanes in ((5, 64, 1), (2, 8, 1), (2, 32, 4)):  # complex, float8, a vector type
        p = ForeignCuda(a, (2,), (1,), code, bits, lanes=lanes)
        with pytest.raises(em.DTypeError, match=rf"^\[from_dlpack\] unsupported DLPack dtype \(code {code}, bits "
                           rf"{bits}, lanes {lanes}\)"):
            em.from_dlpack(p)
        assert released_after_gc(p) == 0  # refused before ember took it: still the producer's


def test_borrow_refuses_and_releases(emulated):
    a = np.zeros(8, np.float32)

    class Keep:
        pass

    for args, msg in (((a.ctypes.data + 2, 2), r"device address \d+ is not aligned to the 4-byte elements of float32"),
                      ((a.ctypes.data, 0), r"cannot wrap 0 elements"), ((0, 2), r"cannot wrap 2 elements at device "
                                                                                 r"address 0")):
        keep = Keep()
        gone = weakref.ref(keep)
        with pytest.raises(em.EmberValueError, match=rf"^\[from_dlpack\] {msg}"):
            em._C.CudaStorage._borrow(args[0], args[1], em.float32.code, 0, keep)
        del keep
        assert gone() is None  # the keep-alive is dropped, not leaked
    with pytest.raises(em.DeviceError, match=r"cuda:3 is not available"):
        em._C.CudaStorage._borrow(a.ctypes.data, 2, em.float32.code, 3, Keep())


@pytest.mark.parametrize("case", ["negative", "int16", "bool", "empty"])
def test_foreign_cuda_memory_through_the_host(emulated, case):
    if case == "negative":  # reversed rows: ember's layouts have no negative strides, so the host reorders them
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        p, want = ForeignCuda(a, (3, 4), (-4, 1), 2, 32, byte_offset=32), a[::-1].copy()
    elif case == "int16":  # a dtype ember widens
        a = np.arange(-3, 3, dtype=np.int16)
        p, want = ForeignCuda(a, (6,), (1,), 0, 16), a.astype(np.int64)
    elif case == "bool":  # bytes other than 0 and 1 are normalised
        a = np.array([0, 1, 7, 0, 255], np.uint8)
        p, want = ForeignCuda(a, (5,), (1,), 6, 8), a != 0
    else:
        a = np.zeros(1, np.float32)
        p, want = ForeignCuda(a, (0, 3), (3, 1), 2, 32), np.zeros((0, 3), np.float32)
    if case == "int16":
        with pytest.warns(em.DLPackCopyWarning, match=r"^\[from_dlpack\] ember has no int16"):
            u = em.from_dlpack(p)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            u = em.from_dlpack(p)
    assert u.device == emulated and p.released == 1
    got = u.numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    a[...] = 0  # a copy: the producer's memory is not the import's
    np.testing.assert_array_equal(u.numpy(), want)


def test_copy_bindings_refuse_bad_arguments(emulated):
    # the two C++ entry points from_dlpack copies through, given what they must refuse
    st = em.CudaStorage.empty(4, "float32", device=emulated)
    src = np.arange(8, dtype=np.float32)
    with pytest.raises(em.EmberValueError, match=r"^\[from_dlpack\] 32 bytes do not fit a storage of 16"):
        em._C._cuda_copy_from_pointer(st, src.ctypes.data, 32)
    with pytest.raises(em.DeviceError, match=r"^\[from_dlpack\] expected a CudaStorage"):
        em._C._cuda_copy_from_pointer(em.zeros(4, device="cpu").storage, src.ctypes.data, 16)
    em._C._cuda_copy_from_pointer(st, src.ctypes.data + 8, 16)
    np.testing.assert_array_equal(st.numpy(), src[2:6])
    out = np.zeros(4, np.float32)
    em._C._cuda_read_pointer(0, st.data_ptr, out)
    np.testing.assert_array_equal(out, src[2:6])
    for bad in (np.zeros(8, np.float32)[::2], np.zeros(4, np.float32).view()):
        if bad.flags.c_contiguous:
            bad.flags.writeable = False
        with pytest.raises(em.EmberValueError, match=r"^\[from_dlpack\] expected a writable C-contiguous array"):
            em._C._cuda_read_pointer(0, st.data_ptr, bad)
    with pytest.raises(em.DeviceError, match=r"cuda:3 is not available"):
        em._C._cuda_read_pointer(3, st.data_ptr, out)
