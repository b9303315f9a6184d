"""Tests for safetensors IO (against the safetensors package) and DLPack interop (against torch)."""
import gc
import json
import os
import struct

import numpy as np
import pytest
import safetensors.numpy as stn
import safetensors.torch as stt
import torch

import ember as em
from ember import interop

from conftest import ALL

TORCH_OF = {em.float32: torch.float32, em.float16: torch.float16, em.bfloat16: torch.bfloat16,
            em.float64: torch.float64, em.int64: torch.int64, em.uint32: torch.uint32, em.uint8: torch.uint8,
            em.int32: torch.int32, em.bool: torch.bool}


def _sample(dtype, shape=(3, 5)):
    em.manual_seed(0)
    if dtype.is_float:
        return (em.randn(*shape) * 3).to_dtype(dtype)
    return (em.rand(*shape) * 200).to_dtype(dtype)


def _as_torch_values(t: em.Tensor) -> torch.Tensor:
    """Reference values of an ember tensor as a torch tensor of the same dtype (through float64/int64)."""
    if t.dtype.is_float:
        return torch.from_numpy(t.numpy().astype(np.float64)).to(TORCH_OF[t.dtype])
    return torch.from_numpy(t.numpy().astype(np.int64)).to(TORCH_OF[t.dtype])


# ----------------------------------------------------------------------------- safetensors
@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
def test_safetensors_ember_to_package(tmp_path, dtype):
    t = _sample(dtype)
    tensors = {"w": t, "wt": t.t(), "row": t[1], "scalar": t[0, 0], "empty": t.narrow(0, 0, 0)}
    path = tmp_path / "x.safetensors"
    em.save_safetensors(tensors, path)
    loaded = stt.load_file(str(path))
    assert set(loaded) == set(tensors)
    for name, ref in tensors.items():
        got = loaded[name]
        assert got.dtype == TORCH_OF[dtype]
        assert tuple(got.shape) == ref.shape
        assert torch.equal(got, _as_torch_values(ref)), name


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
def test_safetensors_package_to_ember(tmp_path, dtype):
    torch.manual_seed(0)
    ref = (torch.randn(4, 6) * 50).to(TORCH_OF[dtype]) if dtype.is_float else \
        torch.randint(0, 200, (4, 6)).to(TORCH_OF[dtype])
    path = tmp_path / "y.safetensors"
    stt.save_file({"a": ref, "b": ref[:2].clone(), "c": ref[0, 0].clone()}, str(path))
    loaded = em.load_safetensors(path)
    for name, r in (("a", ref), ("b", ref[:2]), ("c", ref[0, 0])):
        assert loaded[name].dtype is dtype and loaded[name].shape == tuple(r.shape)
        assert torch.equal(_as_torch_values(loaded[name]), r)


def test_safetensors_roundtrip_bit_exact_bf16_and_metadata(tmp_path):
    bits = np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC1, 0x0001, 0x3F80, 0xC2F7], dtype=np.uint16)
    t = em.tensor(bits.view(em.dtypes.numpy_dtype(em.bfloat16)))
    path = tmp_path / "bits.safetensors"
    em.save_safetensors({"t": t}, path, metadata={"format": "pt", "step": "7"})
    back = em.load_safetensors(path)["t"]
    assert np.array_equal(back.storage.numpy().view(np.uint16), bits)  # NaN payloads and -0 survive
    assert em.io.load_safetensors_metadata(path) == {"format": "pt", "step": "7"}
    with open(path, "rb") as f:  # header is 8-aligned JSON, exactly like the package writes it
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    assert n % 8 == 0 and header["t"] == {"dtype": "BF16", "shape": [8], "data_offsets": [0, 16]}
    with stt.safe_open(str(path), "pt") as f:
        assert f.metadata() == {"format": "pt", "step": "7"}


def test_safetensors_numpy_package_and_widened_dtypes(tmp_path, device):
    # I32 and BOOL have ember dtypes (int32, bool); I16 has none and widens to int64
    path = tmp_path / "np.safetensors"
    arrays = {"i32": np.arange(-3, 3, dtype=np.int32), "i16": np.array([-7, 9], dtype=np.int16),
              "b": np.array([True, False, True]), "f": np.linspace(0, 1, 7, dtype=np.float32).reshape(7, 1)}
    stn.save_file(arrays, str(path))
    loaded = em.load_safetensors(path, device=device)
    assert all(t.device == device for t in loaded.values())
    assert loaded["i32"].dtype is em.int32 and loaded["i32"].tolist() == [-3, -2, -1, 0, 1, 2]
    assert loaded["i16"].dtype is em.int64 and loaded["i16"].tolist() == [-7, 9]
    assert loaded["b"].dtype is em.bool and loaded["b"].tolist() == [True, False, True]
    np.testing.assert_array_equal(loaded["f"].numpy(), arrays["f"])


def test_safetensors_errors(tmp_path):
    path = tmp_path / "bad.safetensors"
    with pytest.raises(em.EmberError, match=r"^\[save_safetensors\]"):
        em.save_safetensors({"a": np.zeros(3)}, path)
    with pytest.raises(em.EmberError, match=r"^\[save_safetensors\]"):
        em.save_safetensors([em.zeros(3)], path)
    path.write_bytes(b"\x03")
    with pytest.raises(em.EmberError, match=r"^\[load_safetensors\]"):
        em.load_safetensors(path)
    path.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(em.EmberError, match=r"^\[load_safetensors\]"):
        em.load_safetensors(path)
    header = b'{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}}'
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 12)
    with pytest.raises(em.EmberError, match=r"^\[load_safetensors\] .*data_offsets"):
        em.load_safetensors(path)
    stt.save_file({"x": torch.zeros(2, dtype=torch.int32).to(torch.float8_e4m3fn)}, str(path))
    with pytest.raises(em.DTypeError, match=r"^\[load_safetensors\] .*F8_E4M3"):
        em.load_safetensors(path)


# ----------------------------------------------------------------------------- DLPack
@pytest.mark.parametrize("dtype", em.ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.cpu_only
def test_dlpack_torch_to_ember_zero_copy(dtype):
    torch.manual_seed(0)
    base = (torch.randn(6, 5) * 10).to(TORCH_OF[dtype]) if dtype.is_float else \
        torch.randint(0, 100, (6, 5)).to(TORCH_OF[dtype])
    view = base.t()[1:, 2:]  # strided, offset
    e = em.from_dlpack(view)
    assert e.dtype is dtype and e.shape == tuple(view.shape)
    assert e.layout.stride == view.stride()
    assert torch.equal(_as_torch_values(e), view)
    v = 0 if dtype is em.bool else 7  # a value the view does not already hold (mostly True for bool)
    base[3, 2] = v  # element [1, 1] of the view: shared memory shows through
    assert e[1, 1].item() == v


@pytest.mark.parametrize("dtype", em.ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.cpu_only
def test_dlpack_ember_to_torch_zero_copy(dtype):
    t = _sample(dtype, (4, 6))
    view = t.t()[2:]
    tt = torch.from_dlpack(view)
    assert tt.dtype == TORCH_OF[dtype] and tuple(tt.shape) == view.shape and tt.stride() == view.layout.stride
    assert torch.equal(tt, _as_torch_values(view))
    v = (not view[0, 1].item()) if dtype is em.bool else 3  # a value the view does not already hold
    tt[0, 1] = v
    assert view[0, 1].item() == v and t[1, 2].item() == v
    assert view.__dlpack_device__() == (1, 0)


@pytest.mark.cpu_only
def test_dlpack_roundtrip_and_lifetime():
    x = torch.arange(12.0).reshape(3, 4)
    e = em.from_dlpack(x)
    y = torch.from_dlpack(e)
    assert y.data_ptr() == x.data_ptr()
    del x, e
    gc.collect()
    assert y.sum().item() == 66.0  # the chain keeps the original buffer alive
    n = len(interop._LIVE)
    cap = em.arange(5).__dlpack__()
    assert len(interop._LIVE) == n + 1
    del cap  # never consumed: the capsule destructor must release the export
    gc.collect()
    assert len(interop._LIVE) == n
    z = torch.from_dlpack(em.ones(3))
    assert len(interop._LIVE) == n + 1
    del z
    gc.collect()
    assert len(interop._LIVE) == n


@pytest.mark.cpu_only
def test_dlpack_numpy_both_ways_and_copies():
    a = np.arange(10, dtype=np.float64)[::-1]  # negative stride: imported as a copy
    e = em.from_dlpack(a)
    assert e.tolist() == a.tolist()
    b = np.arange(8, dtype=np.int16)  # int16 is widened (copy), like em.tensor, and says so
    with pytest.warns(em.DLPackCopyWarning, match="int16"):
        assert em.from_dlpack(b).dtype is em.int64
    t = em.arange(6.0).reshape(2, 3)
    arr = np.from_dlpack(t)
    assert arr.shape == (2, 3)
    t.fill_(2.0)
    assert arr.sum() == 12.0  # numpy sees the same memory
    c = torch.from_dlpack(t.__dlpack__(copy=True, max_version=(1, 0)))
    t.fill_(5.0)
    assert c.sum().item() == 12.0  # copy=True: independent
    assert em.from_dlpack(t) is not t and em.from_dlpack(t).storage is t.storage


@pytest.mark.cpu_only
def test_dlpack_errors():
    with pytest.raises(em.EmberError, match=r"^\[from_dlpack\]"):
        em.from_dlpack([1, 2, 3])
    with pytest.raises(em.DTypeError, match=r"^\[from_dlpack\]"):
        em.from_dlpack(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(BufferError, match=r"^\[__dlpack__\]"):
        em.zeros(2).__dlpack__(stream=5)
    with pytest.raises(BufferError, match=r"^\[__dlpack__\]"):
        em.zeros(2).__dlpack__(dl_device=(2, 0))


@pytest.mark.cpu_only  # DLPack imports are host memory
def test_dlpack_bool_bytes_other_than_0_and_1_are_normalised():
    raw = np.array([0, 1, 2, 255, 0, 7], np.uint8)
    nz = raw != 0
    for src, ref in [(raw.view(np.bool_), nz), (raw.view(np.bool_)[1::2], nz[1::2]),
                     (torch.from_numpy(raw.copy()).view(torch.bool), nz)]:
        t = em.from_dlpack(src)
        got = t.numpy()
        assert got.view(np.uint8).max() <= 1
        np.testing.assert_array_equal(got, ref)
        assert t.sum().item() == int(ref.sum()) and t.eq(True).sum().item() == int(ref.sum())
    ok = np.array([True, False, True])  # clean 0/1 bytes are still shared, not copied
    t = em.from_dlpack(ok)
    ok[1] = True
    assert t.numpy().tolist() == [True, True, True]


def _save_many(path, k, n):
    for _ in range(n):
        em.save_safetensors({"a": em.full((4096,), float(k)), "b": em.full((3,), float(-k))}, path)


@pytest.mark.parametrize("how", ["threads", "processes"])
def test_concurrent_saves_to_one_path_each_publish_a_whole_file(tmp_path, how):
    import multiprocessing
    import threading

    path = str(tmp_path / "c.safetensors")
    if how == "threads":
        errors = []

        def work(k):
            try:
                _save_many(path, k, 15)
            except Exception as e:  # noqa: BLE001 - any failure is reported below
                errors.append(e)

        workers = [threading.Thread(target=work, args=(k,)) for k in range(1, 5)]
    else:
        ctx = multiprocessing.get_context("fork")
        workers = [ctx.Process(target=_save_many, args=(path, k, 15)) for k in range(1, 5)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    if how == "threads":
        assert not errors, errors
    else:
        assert all(w.exitcode == 0 for w in workers), [w.exitcode for w in workers]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.safetensors"]  # no temporary file left
    got = em.load_safetensors(path)
    a, b = np.unique(got["a"].numpy()), got["b"].numpy()
    assert len(a) == 1 and a[0] in (1, 2, 3, 4) and (b == -a[0]).all()  # one checkpoint, never a mix
    mode = (tmp_path / "c.safetensors").stat().st_mode & 0o777
    umask = os.umask(0o022)
    os.umask(umask)
    assert mode == 0o666 & ~umask  # the permissions open() would give, not mkstemp's 0600
