"""Safetensors checkpoints: save_safetensors / load_safetensors in the real on-disk format."""
from __future__ import annotations

import json
import math
import os
import struct
import sys

import numpy as np

from . import _C
from . import dtypes as _dt
from .errors import DTypeError, EmberValueError
from .tensor import Tensor, _wrap

# Format: u64 little-endian header length N, N bytes of JSON (padded with spaces to a multiple of 8
# so tensor data stays aligned), then one flat byte buffer that every data_offsets pair indexes.
_TO_CODE = {
    _dt.float32: "F32", _dt.float16: "F16", _dt.bfloat16: "BF16", _dt.float64: "F64",
    _dt.int64: "I64", _dt.uint32: "U32", _dt.uint8: "U8",
}
_FROM_CODE = {v: k for k, v in _TO_CODE.items()}
# Types ember has no slot for are widened on load, like em.tensor does for numpy arrays.
_WIDEN = {"BOOL": (np.bool_, _dt.uint8), "I8": (np.int8, _dt.int64), "I16": (np.int16, _dt.int64),
          "I32": (np.int32, _dt.int64), "U16": (np.uint16, _dt.int64)}
_MAX_HEADER = 100_000_000  # the safetensors package refuses larger headers too

if sys.byteorder != "little":  # pragma: no cover - every platform ember targets is little-endian
    raise ImportError("ember.io assumes a little-endian host")


def _raw_bytes(t: Tensor) -> np.ndarray:
    """The tensor's values as a flat, C-ordered uint8 array (bf16 stays bf16 bit for bit)."""
    t = t.detach().to_device("cpu")
    s, l = _C.contiguous(t._storage, t._layout)
    start, end = l.contiguous_offsets()
    return s.numpy()[start:end].view(np.uint8)


def _path(path, op):
    """A filesystem path; a wrong type raises DTypeError here instead of a bare TypeError from open()."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise DTypeError(f"[{op}] path must be a str or os.PathLike, got {type(path).__name__}") from None
    if ("\0" if isinstance(path, str) else b"\0") in path:
        raise EmberValueError(f"[{op}] path {path!r} contains a NUL byte")
    return path


def save_safetensors(tensors, path, metadata=None) -> None:
    """Writes ``{name: tensor}`` to ``path`` in the safetensors format (``metadata``: str -> str)."""
    if not isinstance(tensors, dict):
        raise DTypeError(f"[save_safetensors] expected a dict of name -> Tensor, got {type(tensors).__name__}")
    path = _path(path, "save_safetensors")
    header, blobs, offset = {}, [], 0
    for name in tensors:  # before sorting: sorted() of mixed key types raises a bare TypeError
        if not isinstance(name, str) or name == "__metadata__":
            raise EmberValueError(f"[save_safetensors] invalid tensor name {name!r}")
    if metadata is not None and not isinstance(metadata, dict):
        raise DTypeError(f"[save_safetensors] metadata must be a dict of str -> str, got {type(metadata).__name__}")
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise DTypeError("[save_safetensors] metadata keys and values must be strings")
        header["__metadata__"] = dict(metadata)
    for name in sorted(tensors):
        t = tensors[name]
        if not isinstance(t, Tensor):
            raise DTypeError(f"[save_safetensors] value for {name!r} is a {type(t).__name__}, not a Tensor")
        raw = _raw_bytes(t)
        header[name] = {"dtype": _TO_CODE[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + raw.nbytes]}
        blobs.append(raw)
        offset += raw.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    tmp = f"{path}.tmp{os.getpid()}" if isinstance(path, str) else path + b".tmp%d" % os.getpid()
    try:
        with open(tmp, "wb") as f:  # write then rename: a crash never leaves a half-written checkpoint
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for raw in blobs:
                f.write(raw.data)
        os.replace(tmp, path)
    except BaseException:  # e.g. path is a directory: the rename fails after the temp file was written
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _read_header(buf: np.ndarray, path):
    if buf.size < 8:
        raise EmberValueError(f"[load_safetensors] {path}: file too small to be safetensors")
    n = int(buf[:8].view("<u8")[0])
    if n > _MAX_HEADER or 8 + n > buf.size:
        raise EmberValueError(f"[load_safetensors] {path}: header length {n} does not fit the file")
    try:
        header = json.loads(buf[8 : 8 + n].tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:  # deep nesting recurses
        raise EmberValueError(f"[load_safetensors] {path}: header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise EmberValueError(f"[load_safetensors] {path}: header is not a JSON object")
    return header, 8 + n


def load_safetensors(path, device=None) -> dict:
    """Reads a safetensors file.

    Args:
        path: the file's path (a str or os.PathLike).
        device: where the tensors go (default the CPU).

    Returns:
        dict: ``{name: Tensor}`` in the file's order.

    Raises:
        EmberError: the file is not a valid safetensors file (the message says why).
    """
    path = _path(path, "load_safetensors")
    # Map the file instead of reading it: each tensor is copied out once, so peak memory stays ~1x.
    try:
        buf = np.memmap(path, dtype=np.uint8, mode="r")
    except ValueError:  # numpy cannot map an empty file
        buf = np.zeros(0, dtype=np.uint8)
    header, data_start = _read_header(buf, path)
    data = buf[data_start:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            code, shape, (begin, end) = info["dtype"], list(info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise EmberValueError(f"[load_safetensors] {path}: malformed entry for {name!r}") from None
        # Exact JSON integers only: int(1.5) would truncate, and a bool or string is no size at all.
        if (not isinstance(code, str) or not all(type(v) is int for v in (*shape, begin, end))
                or any(d < 0 for d in shape)):
            raise EmberValueError(f"[load_safetensors] {path}: malformed entry for {name!r}: dtype {code!r}, "
                             f"shape {shape!r}, data_offsets {[begin, end]!r}")
        if code in _FROM_CODE:
            dt = _FROM_CODE[code]
            npt = np.dtype(f"<u{dt.itemsize}") if dt is _dt.bfloat16 else _dt.numpy_dtype(dt)
        elif code in _WIDEN:
            npt, dt = np.dtype(_WIDEN[code][0]), _WIDEN[code][1]
        else:
            raise DTypeError(f"[load_safetensors] tensor {name!r} has dtype {code}, which ember cannot hold")
        n = math.prod(shape)  # exact: np.prod wraps, and (2**32, 2**32) would pass for 0 bytes
        if math.prod(max(d, 1) for d in shape) >= 2**63:
            raise EmberValueError(f"[load_safetensors] {path}: shape {tuple(shape)} of {name!r} is too large")
        if not (0 <= begin <= end <= data.size) or end - begin != n * npt.itemsize:
            raise EmberValueError(f"[load_safetensors] {path}: data_offsets {[begin, end]} of {name!r} do not match "
                             f"shape {tuple(shape)} and dtype {code}")
        # Copy out of the file buffer: offsets in foreign files need not be aligned to the itemsize.
        arr = np.array(data[begin:end]).view(npt)
        if arr.dtype != _dt.numpy_dtype(dt) and dt is not _dt.bfloat16:
            arr = arr.astype(_dt.numpy_dtype(dt))
        s = _C.CpuStorage._from_numpy_code(arr, dt.code)
        t = _wrap(s, _C.Layout.contiguous(shape), dt, _dt.cpu)
        out[name] = t if device is None else t.to_device(device)
    return out


def load_safetensors_metadata(path) -> dict:
    """The ``__metadata__`` mapping of a safetensors file ({} when absent)."""
    path = _path(path, "load_safetensors_metadata")
    with open(path, "rb") as f:
        head = np.frombuffer(f.read(8), dtype=np.uint8)
        n = int(head.view("<u8")[0]) if head.size == 8 else 0
        buf = np.concatenate([head, np.frombuffer(f.read(min(n, _MAX_HEADER)), dtype=np.uint8)])
    header, _ = _read_header(buf, path)
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict):
        raise EmberValueError(f"[load_safetensors_metadata] {path}: __metadata__ is a {type(meta).__name__}, not a map")
    return dict(meta)
