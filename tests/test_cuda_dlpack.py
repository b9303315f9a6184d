"""DLPack on cuda (kDLCUDA, device type 2): __dlpack_device__, __dlpack__'s stream (an event for a stream
handle), dl_device and copy arguments, em.from_dlpack of ember's own CUDA capsules without a copy.
Another library's CUDA memory: tests/test_cuda_dlpack_foreign.py."""

import numpy as np
import pytest

import ember as em


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


def counts_since(before):
    now = em._C._cuda_emulator_counts()
    return {k: now[k] - before[k] for k in now}


def test_stream_handle_is_ordered_by_an_event_not_a_synchronize(emulated, syncs):
    t = em.ones(4, device=emulated) * 3  # work on ember's stream before the export
    before = em._C._cuda_emulator_counts()
    for stream in (None, -1, 1, 2):  # nothing to do: the same stream, a default stream ordered with it, or "none"
        em.from_dlpack(t.__dlpack__(stream=stream))
    assert counts_since(before) == {"records": 0, "waits": 0, "destroys": 0, "synchronizes": 0}
    for stream in (7, 2**40):  # a stream handle that may be non-blocking: it waits, on the device, for an event
        u = em.from_dlpack(t.__dlpack__(stream=stream))
    assert counts_since(before) == {"records": 2, "waits": 2, "destroys": 2, "synchronizes": 0}
    assert syncs == []  # no host-side synchronize
    np.testing.assert_array_equal(u.numpy(), np.full(4, 3, np.float32))


@pytest.mark.parametrize("stream, msg", [(0, "stream 0 is ambiguous"), (-2, "stream must be -1, 1, 2 or a stream handle"),
                                         (1.0, "stream must be None or an int"), (True, "stream must be None or an int"),
                                         ("1", "stream must be None or an int")])
def test_bad_streams(cuda, stream, msg):
    with pytest.raises(BufferError, match=rf"^\[__dlpack__\] {msg}"):
        em.ones(2, device=cuda).__dlpack__(stream=stream)


def test_cpu_export_still_refuses_a_stream(cuda):
    with pytest.raises(BufferError, match=r"^\[__dlpack__\] stream must be None for a CPU tensor"):
        em.ones(2, device="cpu").__dlpack__(stream=1)


def test_dl_device_and_copy(cuda):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = em.tensor(a, device=cuda)
    host = em.from_dlpack(t.__dlpack__(dl_device=(1, 0)))  # to the host: a copy
    assert host.device == em.cpu and host.storage is not t.storage
    np.testing.assert_array_equal(host.numpy(), a)
    back = em.from_dlpack(em.tensor(a, device="cpu").__dlpack__(dl_device=(2, 0), stream=None))
    assert back.device == cuda
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
