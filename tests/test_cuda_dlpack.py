"""DLPack on cuda (kDLCUDA, device type 2): __dlpack_device__, __dlpack__'s stream, dl_device and copy arguments,
em.from_dlpack of ember's own CUDA capsules without a copy, and of another producer's CUDA memory (copied on the
device) under the emulator, whose device memory is host memory."""
import ctypes as C
import os
import warnings

import numpy as np
import pytest

import ember as em
from ember import interop


@pytest.fixture
def cuda(monkeypatch):
    if not (os.environ.get("EMBER_TEST_DEVICE", "").startswith("cuda") and em.cuda.backend() == "nvidia"):
        monkeypatch.setenv("EMBER_CUDA", "emulate")
    return em.Device("cuda")


@pytest.fixture
def emulated(monkeypatch):
    # Tests that hand host memory to ember as CUDA memory: only the emulator's device memory is host memory.
    monkeypatch.setenv("EMBER_CUDA", "emulate")
    return em.Device("cuda")


@pytest.fixture
def syncs(monkeypatch):
    """The device indices em waits on through _C._cuda_synchronize, in order."""
    seen = []
    real = em._C._cuda_synchronize

    def spy(index=0):
        seen.append(index)
        real(index)

    monkeypatch.setattr(em._C, "_cuda_synchronize", spy)
    return seen


def test_dlpack_device_is_kdlcuda(cuda):
    assert em.zeros(3, device=cuda).__dlpack_device__() == (2, 0)
    assert em.zeros(3, device="cpu").__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int64", "int32", "uint32", "uint8",
                                   "bool"])
def test_round_trip_shares_the_storage(cuda, rng, dtype):
    a = (rng.standard_normal((5, 6)) * 4).astype(np.float32)
    t = em.tensor(a, device="cpu").to(dtype=dtype)
    if not em._C.device_supports(cuda.kind, cuda.index, t.dtype.code):  # a backend without float64 refuses it
        with pytest.raises(em.DTypeError):
            t.to(cuda)
        return
    t = t.to(cuda)
    for view in (t, t.t(), t[1:, ::2], t[3], t.narrow(1, 2, 3)):
        for kw in ({}, {"max_version": (1, 0)}, {"stream": 1}, {"stream": None, "max_version": (1, 3)}):
            u = em.from_dlpack(view.__dlpack__(**kw))
            assert u.device == cuda and u.dtype == view.dtype and u.shape == view.shape
            assert u.storage is t.storage  # the same memory: no copy
            np.testing.assert_array_equal(u.numpy(), view.numpy())


def test_round_trip_writes_are_seen_both_ways(cuda):
    t = em.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=cuda)
    u = em.from_dlpack(t.t().__dlpack__())
    u.fill_(5.0)  # through the import: ember's own storage changes
    np.testing.assert_array_equal(t.numpy(), np.full((3, 4), 5, np.float32))


def test_export_keeps_the_storage_alive(cuda):
    t = em.tensor(np.arange(6, dtype=np.float32), device=cuda)
    cap = t[2:].__dlpack__()
    del t
    u = em.from_dlpack(cap)
    np.testing.assert_array_equal(u.numpy(), np.arange(2, 6, dtype=np.float32))
    with pytest.raises(em.EmberValueError, match=r"^\[from_dlpack\] expected an unconsumed DLPack capsule"):
        em.from_dlpack(cap)  # a capsule is consumed once


class Producer:
    """A DLPack producer that records the arguments its consumer passes."""

    def __init__(self, t):
        self.t, self.calls = t, []

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        return self.t.__dlpack__(**kw)


def test_from_dlpack_names_embers_stream_to_a_cuda_producer(cuda):
    p = Producer(em.ones((2, 2), device=cuda))
    u = em.from_dlpack(p)
    assert p.calls == [{"max_version": (1, 0), "stream": 1}]  # ember reads on the legacy default stream
    assert u.storage is p.t.storage
    q = Producer(em.ones(2, device="cpu"))
    em.from_dlpack(q)
    assert q.calls == [{"max_version": (1, 0)}]  # no stream for host memory


def test_stream_argument_synchronises_only_for_other_streams(cuda, syncs):
    t = em.ones(4, device=cuda)
    for stream in (None, -1, 1, 2):  # no sync: the same stream, a default stream ordered with it, or "none"
        em.from_dlpack(t.__dlpack__(stream=stream))
    assert syncs == []
    for stream in (7, 2**40):  # a stream handle that may be non-blocking: ember waits for its own work first
        em.from_dlpack(t.__dlpack__(stream=stream))
    assert syncs == [0, 0]


@pytest.mark.parametrize("stream, msg", [(0, "stream 0 is ambiguous"), (-2, "stream must be -1, 1, 2 or a stream handle"),
                                         (1.0, "stream must be None or an int"), (True, "stream must be None or an int"),
                                         ("1", "stream must be None or an int")])
def test_bad_streams(cuda, stream, msg):
    with pytest.raises(BufferError, match=rf"^\[__dlpack__\] {msg}"):
        em.ones(2, device=cuda).__dlpack__(stream=stream)


def test_cpu_export_still_refuses_a_stream(cuda):
    with pytest.raises(BufferError, match=r"^\[__dlpack__\] stream must be None for a CPU tensor"):
        em.ones(2, device="cpu").__dlpack__(stream=1)


def test_dl_device_and_copy(cuda, syncs):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = em.tensor(a, device=cuda)
    host = em.from_dlpack(t.__dlpack__(dl_device=(1, 0)))  # to the host: a copy
    assert host.device == em.cpu and host.storage is not t.storage
    np.testing.assert_array_equal(host.numpy(), a)
    back = em.from_dlpack(em.tensor(a, device="cpu").__dlpack__(dl_device=(2, 0), stream=9))
    assert back.device == cuda and syncs == [0]
    np.testing.assert_array_equal(back.numpy(), a)
    same = em.from_dlpack(t.__dlpack__(dl_device=(2, 0)))
    assert same.storage is t.storage
    copied = em.from_dlpack(t.__dlpack__(copy=True))
    assert copied.device == cuda and copied.storage is not t.storage
    np.testing.assert_array_equal(copied.numpy(), a)
    with pytest.raises(BufferError, match=r"^\[__dlpack__\] the tensor is on cuda:0; exporting it to cpu needs a copy"):
        t.__dlpack__(dl_device=(1, 0), copy=False)
    with pytest.raises(BufferError, match=r"^\[__dlpack__\] cannot export to device \(2, 3\)"):
        t.__dlpack__(dl_device=(2, 3))
    with pytest.raises(em.DTypeError, match=r"^\[__dlpack__\] dl_device must be"):
        t.__dlpack__(dl_device=("cuda", 0))


def test_a_capsule_for_an_unavailable_cuda_device_is_refused(cuda, monkeypatch):
    cap = em.ones(2, device=cuda).__dlpack__()
    monkeypatch.setenv("EMBER_CUDA", "off")
    with pytest.raises(em.DeviceError, match=r"^\[from_dlpack\] the capsule is on CUDA device 0, and cuda:0 is not"):
        em.from_dlpack(cap)
    monkeypatch.setenv("EMBER_CUDA", "emulate")
    assert em.from_dlpack(cap).device == cuda  # refused before ember took it: still unconsumed

    class Elsewhere:
        def __dlpack_device__(self):
            return (2, 5)

        def __dlpack__(self, **kw):
            raise AssertionError("not asked")

    with pytest.raises(em.DeviceError, match=r"^\[from_dlpack\] Elsewhere is on CUDA device 5"):
        em.from_dlpack(Elsewhere())


# ----------------------------------------------------------------------------- another library's CUDA memory
class ForeignCuda:
    """A producer of "CUDA" memory that is not ember's: a numpy buffer, which under the emulator is device memory."""

    def __init__(self, arr, shape, strides, code, bits, byte_offset=0):
        self.arr, self.released, self.calls = arr, 0, []
        self.shape = (C.c_int64 * max(len(shape), 1))(*shape)
        self.strides = (C.c_int64 * max(len(shape), 1))(*strides)
        self.m = interop._DLManagedVersioned()
        self.m.version = interop._DLVersion(1, 0)
        dl = self.m.dl_tensor
        dl.data = arr.ctypes.data
        dl.device = interop._DLDevice(2, 0)
        dl.ndim = len(shape)
        dl.dtype = interop._DLDataType(code, bits, 1)
        dl.shape = C.cast(self.shape, C.POINTER(C.c_int64))
        dl.strides = C.cast(self.strides, C.POINTER(C.c_int64))
        dl.byte_offset = byte_offset

        def deleter(_addr):
            self.released += 1

        self._deleter = interop._DELETER(deleter)
        self.m.deleter = self._deleter

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        return interop._api.PyCapsule_New(C.addressof(self.m), interop._NAME_V, None)


def test_foreign_cuda_memory_is_copied_on_the_device(emulated, rng):
    a = rng.standard_normal((4, 5)).astype(np.float32)
    want = a.T.copy()
    p = ForeignCuda(a, (5, 4), (1, 5), 2, 32)  # a's transpose, through strides
    with pytest.warns(em.DLPackCopyWarning, match=r"^\[from_dlpack\] CUDA memory of another library is copied"):
        u = em.from_dlpack(p)
    assert p.calls == [{"max_version": (1, 0), "stream": 1}] and p.released == 1  # released once copied
    assert u.device == emulated and u.storage.data_ptr != a.ctypes.data
    a[:] = 0  # the producer's memory changes: the import kept its own copy
    np.testing.assert_array_equal(u.numpy(), want)


def test_foreign_cuda_memory_with_a_byte_offset(emulated, rng):
    a = rng.standard_normal((4, 5)).astype(np.float32)
    with pytest.warns(em.DLPackCopyWarning):
        u = em.from_dlpack(ForeignCuda(a, (5, 2), (1, 10), 2, 32, byte_offset=4))  # [i, j] is element 1 + i + 10 j
    np.testing.assert_array_equal(u.numpy(), np.lib.stride_tricks.as_strided(a.reshape(-1)[1:], (5, 2), (4, 40)))


@pytest.mark.parametrize("case", ["negative", "int16", "bool", "empty"])
def test_foreign_cuda_memory_through_the_host(emulated, case):
    if case == "negative":  # reversed rows: ember's layouts have no negative strides, so the host reorders them
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        p, want = ForeignCuda(a, (3, 4), (-4, 1), 2, 32, byte_offset=32), a[::-1]
    elif case == "int16":  # a dtype ember widens
        a = np.arange(-3, 3, dtype=np.int16)
        p, want = ForeignCuda(a, (6,), (1,), 0, 16), a.astype(np.int64)
    elif case == "bool":  # bytes other than 0 and 1 are normalised
        a = np.array([0, 1, 7, 0, 255], np.uint8)
        p, want = ForeignCuda(a, (5,), (1,), 6, 8), a != 0
    else:
        a = np.zeros(1, np.float32)
        p, want = ForeignCuda(a, (0, 3), (3, 1), 2, 32), np.zeros((0, 3), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", em.DLPackCopyWarning)
        u = em.from_dlpack(p)
    assert u.device == emulated and p.released == 1
    got = u.numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
