"""Fuzzing (hypothesis): load_safetensors accepts exactly the files the reference safetensors package
accepts, with the same values; from_dlpack either refuses a crafted capsule cleanly or reads exactly
the elements numpy reads through the same shape, strides and offset."""
import json
import os
import struct
import tempfile
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file

import ember as em

# Derandomised by default (a CI failure reproduces); EMBER_TEST_SEED=<n> explores other draws.
_SEED = os.environ.get("EMBER_TEST_SEED")
FUZZ = settings(max_examples=150, deadline=None, derandomize=_SEED is None,
                suppress_health_check=[HealthCheck.too_slow])

# The dtypes both libraries hold (ember widens the last five on load).
CODES = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "F64": np.float64, "I64": np.int64,
         "U32": np.uint32, "U8": np.uint8, "BOOL": np.bool_, "I8": np.int8, "I16": np.int16, "I32": np.int32,
         "U16": np.uint16}


@st.composite
def tensors(draw):
    n = draw(st.integers(0, 3))
    out = {}
    for i in range(n):
        code = draw(st.sampled_from(sorted(CODES)))
        shape = draw(st.lists(st.integers(0, 3), max_size=3))
        raw = draw(st.binary(min_size=int(np.prod(shape)) * np.dtype(CODES[code]).itemsize,
                             max_size=int(np.prod(shape)) * np.dtype(CODES[code]).itemsize))
        if code == "BOOL":
            raw = bytes(b & 1 for b in raw)
        out[f"t{i}"] = (code, shape, raw)
    return out


MUTATIONS = ["none", "shift-begin", "shift-end", "swap-offsets", "dtype", "shape", "trailing-bytes",
             "truncate-data", "metadata", "leading-space", "trailing-spaces", "trailing-garbage",
             "header-length", "offset-float", "offset-negative", "offset-string", "drop-key", "extra-key",
             "three-offsets", "shape-bool", "reorder", "not-object", "bad-utf8"]
METADATA = [{"k": "v"}, {"k": 1}, [], "s", None, {}, {"a": "b", "c": "d"}, {"k": ["v"]}]


def build(ts, mutation, k, meta_pick):
    """The bytes of a safetensors file holding `ts`, with one mutation applied."""
    header, blobs, at = {}, [], 0
    for name, (code, shape, raw) in ts.items():
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    names = list(header)
    pick = header[names[k % len(names)]] if names else None
    data = b"".join(blobs)
    if pick is not None:
        if mutation == "shift-begin":
            pick["data_offsets"][0] += (k % 5) - 2
        elif mutation == "shift-end":
            pick["data_offsets"][1] += (k % 5) - 2
        elif mutation == "swap-offsets" and len(names) > 1:
            other = header[names[(k + 1) % len(names)]]
            pick["data_offsets"], other["data_offsets"] = other["data_offsets"], pick["data_offsets"]
        elif mutation == "dtype":
            pick["dtype"] = sorted(CODES)[k % len(CODES)]
        elif mutation == "shape":
            pick["shape"] = pick["shape"] + [k % 3] if k % 2 else pick["shape"][:-1]
        elif mutation == "offset-float":
            pick["data_offsets"] = [float(v) for v in pick["data_offsets"]]
        elif mutation == "offset-negative":
            pick["data_offsets"][0] = -1
        elif mutation == "offset-string":
            pick["data_offsets"][1] = str(pick["data_offsets"][1])
        elif mutation == "drop-key":
            del pick[("dtype", "shape", "data_offsets")[k % 3]]
        elif mutation == "extra-key":
            pick["extra"] = k
        elif mutation == "three-offsets":
            pick["data_offsets"].append(pick["data_offsets"][1])
        elif mutation == "shape-bool":
            pick["shape"] = [True] + pick["shape"]
    if mutation == "metadata":
        header["__metadata__"] = METADATA[meta_pick % len(METADATA)]
    if mutation == "reorder":
        header = dict(reversed(list(header.items())))
    if mutation == "trailing-bytes":
        data += b"\0" * (1 + k % 8)
    if mutation == "truncate-data" and data:
        data = data[: -(1 + k % len(data))]
    text = json.dumps(header if mutation != "not-object" else list(header)).encode()
    if mutation == "leading-space":
        text = b" " + text
    if mutation == "trailing-spaces":
        text += b" " * (1 + k % 8)
    if mutation == "trailing-garbage":
        text += b"x"
    if mutation == "bad-utf8":
        text = text[:-1] + b"\xff}"
    n = len(text)
    if mutation == "header-length":
        n += (k % 7) - 3
    return struct.pack("<Q", max(n, 0)) + text + data


def outcome_ember(path):
    # Parsed into host memory, as the reference package does: the files hold float64, which not every
    # device holds, and the parser under test is the same whichever device the tensors then go to.
    try:
        return {k: np.asarray(v.numpy()) for k, v in em.load_safetensors(path, device=em.cpu).items()}
    except em.EmberError as e:
        assert str(e).startswith("[load_safetensors] "), e
        return None


def outcome_reference(path):
    try:
        return load_file(path)
    except Exception:  # the reference raises SafetensorError, ValueError, ... : any refusal counts
        return None


@FUZZ
@given(ts=tensors(), mutation=st.sampled_from(MUTATIONS), k=st.integers(0, 50), meta=st.integers(0, 20))
def test_load_safetensors_agrees_with_the_reference_package(ts, mutation, k, meta):
    blob = build(ts, mutation, k, meta)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.safetensors")
        with open(path, "wb") as f:
            f.write(blob)
        mine, ref = outcome_ember(path), outcome_reference(path)
    assert (mine is None) == (ref is None), f"ember {'refused' if mine is None else 'accepted'}, " \
                                            f"safetensors {'refused' if ref is None else 'accepted'}: {blob[:300]!r}"
    if mine is not None:
        assert sorted(mine) == sorted(ref)
        for name, want in ref.items():
            got = mine[name]
            assert got.shape == want.shape
            if want.dtype == ml_dtypes.bfloat16:
                np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
            elif want.dtype.kind == "f":
                np.testing.assert_array_equal(got.view(f"u{want.itemsize}"), want.view(f"u{want.itemsize}"))
            else:
                np.testing.assert_array_equal(got, want.astype(got.dtype))


# ----------------------------------------------------------------------------- from_dlpack
class _Producer:
    def __init__(self, cap):
        self.cap = cap

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kwargs):
        return self.cap


@FUZZ
@given(shape=st.lists(st.integers(0, 4), max_size=4), data=st.data(),
       dtype=st.sampled_from(["F32", "F64", "U8", "I64", "F16", "I16", "BOOL"]))
def test_from_dlpack_reads_what_numpy_reads_or_refuses(shape, data, dtype):
    from test_hostile_files import Producer

    npt = np.dtype(CODES[dtype])
    isz = npt.itemsize
    strides = data.draw(st.lists(st.one_of(st.integers(-6, 6), st.sampled_from([2**40, 2**62, -(2**62), 2**63 - 1])),
                                 min_size=len(shape), max_size=len(shape)))
    byte_offset = data.draw(st.integers(0, 9))
    buf = np.random.default_rng(0).integers(0, 2 if dtype == "BOOL" else 256, size=4096, dtype=np.uint8)
    base = 2048  # the data pointer lies inside buf, so negative strides have room below it
    code = ({"F": 2, "U": 1, "I": 0, "B": 6}[dtype[0]], isz * 8)
    p = Producer(buf, shape, strides, byte_offset=byte_offset, dtype=code, address=buf.ctypes.data + base)
    start = buf.ctypes.data + base + byte_offset  # the address of element 0
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0 and n > 1) * isz
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0 and n > 1) * isz
    empty = int(np.prod(shape)) == 0
    if not empty and (start + lo < 0 or start + hi + isz > 2**64 or hi - lo + isz >= 2**63):
        with pytest.raises(em.EmberValueError, match=r"^\[from_dlpack\] strides .* reach outside"):
            em.from_dlpack(p)
        return
    rel = start - buf.ctypes.data
    if not empty and (rel + lo < 0 or rel + hi + isz > buf.size):
        return  # a valid extent beyond the memory this test owns: importing it may copy (read) it
    with warnings.catch_warnings():  # dtypes ember lacks are copied with a DLPackCopyWarning: expected here
        warnings.simplefilter("ignore", em.DLPackCopyWarning)
        t = em.from_dlpack(p)
    assert t.shape == tuple(shape)
    # The elements' bytes, gathered one by one from buf.
    idx = np.zeros(shape, dtype=np.int64) + rel
    for d, (n, s) in enumerate(zip(shape, strides)):
        idx = idx + (np.arange(n) * s * isz).reshape([-1 if i == d else 1 for i in range(len(shape))])
    raw = buf[idx[..., None] + np.arange(isz)]
    want = np.ascontiguousarray(raw).view(npt).reshape(shape)
    got = t.numpy()
    if npt.kind == "f":
        np.testing.assert_array_equal(got.view(f"u{isz}"), want.view(f"u{isz}"))
    else:
        np.testing.assert_array_equal(got, want.astype(got.dtype))
