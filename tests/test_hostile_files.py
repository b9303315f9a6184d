"""Hostile input to load_safetensors and from_dlpack: special files, crafted headers, misaligned and
overflowing DLPack tensors. Each refusal is a clean "[op]" EmberError."""
import ctypes as C
import errno
import json
import os
import struct
import threading

import numpy as np
import pytest

import ember as em
from ember import interop


def write_st(path, header, data=b"", raw_header=None):
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def refused(path, cls=em.EmberValueError, match=""):
    with pytest.raises(cls, match=r"^\[load_safetensors\] " + match):
        em.load_safetensors(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "f.safetensors"
    os.mkfifo(fifo)
    box = {}

    def load():
        try:
            em.load_safetensors(fifo)
        except BaseException as e:  # noqa: B036 - handed to the test thread
            box["error"] = e

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # blocked in open(): give it a writer so the thread can end, then fail
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(10)
        pytest.fail("load_safetensors blocked on a FIFO")
    assert isinstance(box.get("error"), em.EmberIOError), box
    assert str(box["error"]).startswith("[load_safetensors]") and "not a regular file" in str(box["error"])


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null", "/proc/self/maps", "/proc/self/status"])
def test_special_files_are_refused(path):
    if not os.path.exists(path):
        pytest.skip(f"{path} does not exist here")
    with pytest.raises(em.EmberError, match=r"^\[load_safetensors\] "):
        em.load_safetensors(path)


def test_directory_and_missing_file(tmp_path):
    with pytest.raises(em.EmberIOError, match=r"^\[load_safetensors\] ") as e:
        em.load_safetensors(tmp_path)
    assert isinstance(e.value, OSError)
    with pytest.raises(em.EmberIOError, match=r"^\[load_safetensors\] ") as e:
        em.load_safetensors(tmp_path / "missing.safetensors")
    assert isinstance(e.value, OSError) and e.value.errno == errno.ENOENT
    with pytest.raises(em.EmberIOError, match=r"^\[load_safetensors_metadata\] "):
        em.io.load_safetensors_metadata(tmp_path / "missing.safetensors")


def test_huge_json_integer(tmp_path):
    raw = b'{"a":{"dtype":"F32","shape":[' + b"9" * 5000 + b'],"data_offsets":[0,4]}}'
    refused(write_st(tmp_path / "a.safetensors", None, b"\0" * 4, raw_header=raw), match=".*not valid JSON")


ENTRY = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize("case, header, data, match", [
    ("overlap", {"a": ENTRY, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, 12, "overlaps"),
    ("duplicate-range", {"a": ENTRY, "b": ENTRY}, 8, "overlaps"),
    ("gap", {"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, 12, "leaves a gap"),
    ("gap-between", {"a": ENTRY, "b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}}, 16,
     "leaves a gap"),
    ("trailing-bytes", {"a": ENTRY}, 12, "cover 8 bytes of a 12-byte"),
    ("metadata-list", {"__metadata__": ["x"], "a": ENTRY}, 8, "__metadata__"),
    ("metadata-int-value", {"__metadata__": {"k": 1}, "a": ENTRY}, 8, "__metadata__"),
    ("metadata-str", {"__metadata__": "x", "a": ENTRY}, 8, "__metadata__"),
    ("rank-65", {"a": {"dtype": "F32", "shape": [1] * 65, "data_offsets": [0, 4]}}, 4, ".*at most 64"),
])
def test_refused_like_the_safetensors_package(tmp_path, case, header, data, match):
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    p = write_st(tmp_path / f"{case}.safetensors", header, b"\0" * data)
    refused(p, match=".*" + match)
    if case != "rank-65":  # the rank bound is ember's own
        with pytest.raises((SafetensorError, ValueError, TypeError)):
            load_file(str(p))


def test_million_dims_refused_fast(tmp_path):
    raw = b'{"a":{"dtype":"F32","shape":[' + b",".join([b"1"] * 1_000_000) + b'],"data_offsets":[0,4]}}'
    refused(write_st(tmp_path / "a.safetensors", None, b"\0" * 4, raw_header=raw), match=".*1000000 dims")


def test_valid_file_with_metadata_still_loads(tmp_path):
    p = tmp_path / "ok.safetensors"
    em.save_safetensors({"a": em.arange(6.0).reshape(2, 3), "e": em.zeros(0)}, p, metadata={"k": "v"})
    out = em.load_safetensors(p)
    assert out["a"].tolist() == [[0, 1, 2], [3, 4, 5]] and out["e"].shape == (0,)
    assert em.io.load_safetensors_metadata(p) == {"k": "v"}


# ----------------------------------------------------------------------------- from_dlpack
class Producer:
    """A DLPack producer whose (versioned) struct is written by hand over `buf`."""

    def __init__(self, buf, shape, strides, byte_offset=0, dtype=(2, 32), address=None):
        self.buf = buf
        self.shape = (C.c_int64 * max(len(shape), 1))(*shape)
        self.strides = (C.c_int64 * max(len(strides), 1))(*strides)
        m = interop._DLManagedVersioned()
        m.version = interop._DLVersion(1, 0)
        m.dl_tensor.data = address if address is not None else buf.ctypes.data
        m.dl_tensor.device = interop._DLDevice(1, 0)
        m.dl_tensor.ndim = len(shape)
        m.dl_tensor.dtype = interop._DLDataType(dtype[0], dtype[1], 1)
        m.dl_tensor.shape = C.cast(self.shape, C.POINTER(C.c_int64))
        m.dl_tensor.strides = C.cast(self.strides, C.POINTER(C.c_int64))
        m.dl_tensor.byte_offset = byte_offset
        self.m = m

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kwargs):
        return interop._api.PyCapsule_New(C.addressof(self.m), interop._NAME_V, None)


def test_misaligned_numpy_is_copied_not_borrowed():
    a = np.frombuffer(bytearray(64), np.float32, offset=1, count=10)
    a[:] = np.arange(10) - 4.5
    t = em.from_dlpack(a)
    assert t.storage.data_ptr % 4 == 0  # a copy, in ember's aligned memory
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_allclose(t.exp().numpy(), np.exp(a))


@pytest.mark.parametrize("offset", [1, 2, 3, 5])
def test_misaligned_byte_offset_is_copied(offset):
    buf = np.arange(64, dtype=np.uint8)
    p = Producer(buf, [3], [1], byte_offset=offset)
    t = em.from_dlpack(p)
    assert t.storage.data_ptr % 4 == 0
    np.testing.assert_array_equal(t.numpy(), np.frombuffer(buf.tobytes()[offset:offset + 12], np.float32))


@pytest.mark.parametrize("shape, strides", [
    ([3], [2**62]), ([2, 2], [2**62, 2**62]), ([3], [-(2**62)]), ([2**31, 2**31], [2**31, 2**31]),
    ([5], [2**61 + 1]),
])
def test_overflowing_extent_is_refused(shape, strides):
    buf = np.zeros(16, np.float32)
    with pytest.raises(em.EmberValueError, match=r"^\[from_dlpack\] strides .* reach outside the address space"):
        em.from_dlpack(Producer(buf, shape, strides))


def test_wrapping_address_is_refused():
    buf = np.zeros(16, np.float32)
    with pytest.raises(em.EmberValueError, match=r"^\[from_dlpack\] "):
        em.from_dlpack(Producer(buf, [4], [1], address=2**64 - 8))
