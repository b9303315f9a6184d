"""Safetensors checkpoints: save_safetensors / load_safetensors in the real on-disk format."""
from __future__ import annotations

import json
import math
import mmap
import os
import stat
import struct
import sys
import tempfile
import threading

import numpy as np

from . import _C
from . import dtypes as _dt
from .errors import DTypeError, EmberIOError, EmberTypeError, EmberValueError
from .tensor_type import Tensor, _wrap

# Format: u64 little-endian header length N, N bytes of JSON (padded with spaces to a multiple of 8
# so tensor data stays aligned), then one flat byte buffer that every data_offsets pair indexes.
_TO_CODE = {
    _dt.float32: "F32", _dt.float16: "F16", _dt.bfloat16: "BF16", _dt.float64: "F64",
    _dt.int64: "I64", _dt.uint32: "U32", _dt.uint8: "U8", _dt.int32: "I32", _dt.bool: "BOOL",
}
_FROM_CODE = {v: k for k, v in _TO_CODE.items()}
# Types ember has no slot for are widened on load, like em.tensor does for numpy arrays.
_WIDEN = {"I8": (np.int8, _dt.int64), "I16": (np.int16, _dt.int64), "U16": (np.uint16, _dt.int64)}
_MAX_HEADER = 100_000_000  # the safetensors package refuses larger headers too
_MAX_RANK = 64  # the core's bound (numpy's)

if sys.byteorder != "little":  # pragma: no cover - every platform ember targets is little-endian
    raise ImportError("ember.io assumes a little-endian host")


def _raw_bytes(t: Tensor) -> np.ndarray:
    """The tensor's values as a flat, C-ordered uint8 array (bf16 stays bf16 bit for bit)."""
    t = t.detach().to_device("cpu")
    s, l = _C.contiguous(t._storage, t._layout)
    start, end = l.contiguous_offsets()
    return s.numpy()[start:end].view(np.uint8)


def _path(path, op):
    """A filesystem path; a wrong type raises EmberTypeError here instead of a bare TypeError from open()."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise EmberTypeError(f"[{op}] path must be a str or os.PathLike, got {type(path).__name__}") from None
    if ("\0" if isinstance(path, str) else b"\0") in path:
        raise EmberValueError(f"[{op}] path {path!r} contains a NUL byte")
    return path


def save_safetensors(tensors, path, metadata=None) -> None:
    """Writes ``{name: tensor}`` to ``path`` in the safetensors format (``metadata``: str -> str)."""
    if not isinstance(tensors, dict):
        raise EmberTypeError(f"[save_safetensors] expected a dict of name -> Tensor, got {type(tensors).__name__} "
                             "(em.save writes lists and nested structures)")
    path = _path(path, "save_safetensors")
    header, blobs, offset = {}, [], 0
    for name in tensors:  # before sorting: sorted() of mixed key types raises a bare TypeError
        if not isinstance(name, str) or name == "__metadata__":
            raise EmberValueError(f"[save_safetensors] invalid tensor name {name!r}")
    if metadata is not None and not isinstance(metadata, dict):
        raise EmberTypeError(f"[save_safetensors] metadata must be a dict of str -> str, got {type(metadata).__name__}")
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise EmberTypeError("[save_safetensors] metadata keys and values must be strings")
        header["__metadata__"] = dict(metadata)
    for name in sorted(tensors):
        t = tensors[name]
        if not isinstance(t, Tensor):
            raise EmberTypeError(f"[save_safetensors] value for {name!r} is a {type(t).__name__}, not a Tensor")
        raw = _raw_bytes(t)
        header[name] = {"dtype": _TO_CODE[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + raw.nbytes]}
        blobs.append(raw)
        offset += raw.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    # A unique temporary file beside the target, then an atomic rename: concurrent saves to one path
    # (threads or processes) each publish a whole checkpoint, and a crash never leaves half of one.
    folder, base = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=base + (b"." if isinstance(base, bytes) else "."),
                               suffix=b".tmp" if isinstance(base, bytes) else ".tmp", dir=folder or None)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600: the permissions open() would have given
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for raw in blobs:
                f.write(raw.data)
        os.replace(tmp, path)
    except BaseException:  # e.g. path is a directory: the rename fails after the temp file was written
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


_UMASK = []
_UMASK_LOCK = threading.Lock()


def _umask():
    """The process's umask, read once (from /proc where it can be, without changing it)."""
    with _UMASK_LOCK:
        if not _UMASK:
            try:
                with open("/proc/self/status") as f:
                    _UMASK.extend(int(ln.split()[1], 8) for ln in f if ln.startswith("Umask:"))
            except OSError:
                pass
            if not _UMASK:
                m = os.umask(0o022)
                os.umask(m)
                _UMASK.append(m)
        return _UMASK[0]


def _refuse(op, path, why, cls=EmberValueError):
    return cls(f"[{op}] {path}: {why}")


def _io_error(op, path, e: OSError) -> EmberIOError:
    err = EmberIOError(f"[{op}] {path}: {e.strerror or e}")
    err.errno, err.filename = e.errno, path
    return err


def _map_file(path, op):
    """The file's bytes as a read-only uint8 array (memory-mapped). Opens without blocking, so a FIFO
    cannot hang the call, and refuses anything but a regular file (devices, FIFOs, sockets, dirs)."""
    flags = os.O_RDONLY
    for name in ("O_NONBLOCK", "O_CLOEXEC", "O_NOCTTY", "O_BINARY"):
        flags |= getattr(os, name, 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise _io_error(op, path, e) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(op, path, "not a regular file", EmberIOError)
        if st.st_size == 0:  # mmap refuses empty files (and /proc files report size 0)
            return np.zeros(0, dtype=np.uint8)
        return np.frombuffer(mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ), dtype=np.uint8)
    except OSError as e:
        if isinstance(e, EmberIOError):
            raise
        raise _io_error(op, path, e) from None
    finally:
        os.close(fd)  # the mapping keeps its own reference to the file


def _read_header(buf: np.ndarray, path, op="load_safetensors"):
    """Parses the header as the reference ``safetensors`` package does, refusing what it refuses.

    Returns:
        ``(header, data_start)``: the JSON object and the offset of the byte buffer in ``buf``.
    """
    if buf.size < 8:
        raise _refuse(op, path, "file too small to be safetensors")
    n = int(buf[:8].view("<u8")[0])
    if n > _MAX_HEADER or 8 + n > buf.size:
        raise _refuse(op, path, f"header length {n} does not fit the file")
    try:
        text = buf[8 : 8 + n].tobytes().decode("utf-8")
    except UnicodeDecodeError:
        raise _refuse(op, path, "header is not UTF-8") from None
    try:
        header = json.loads(text)
    # ValueError: an integer past Python's digit limit; RecursionError: deep nesting
    except (ValueError, RecursionError) as e:
        raise _refuse(op, path, f"header is not valid JSON ({str(e)[:200]})") from None
    if not isinstance(header, dict):
        raise _refuse(op, path, "header is not a JSON object")
    meta = header.get("__metadata__", {})
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise _refuse(op, path, "__metadata__ is not a map of strings")
    return header, 8 + n


def _entries(header, size, path, op="load_safetensors"):
    """Checks every tensor entry against the data buffer of ``size`` bytes before anything is read:
    known dtype, exact integer shape within the rank bound, and byte ranges that tile the buffer from
    0 to its end without gaps or overlaps (the reference package's rules).

    Returns:
        ``[(name, dtype, numpy dtype of the stored bytes, shape, begin, end)]`` in header order.
    """
    out = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            code, shape, (begin, end) = info["dtype"], list(info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise _refuse(op, path, f"malformed entry for {name!r}") from None
        if isinstance(shape, list) and len(shape) > _MAX_RANK:
            raise _refuse(op, path, f"tensor {name!r} has {len(shape)} dims; at most {_MAX_RANK} "
                          "are supported")
        # Exact JSON integers only: int(1.5) would truncate, and a bool or string is no size at all.
        if (not isinstance(code, str) or not all(type(v) is int for v in (*shape, begin, end))
                or any(d < 0 for d in shape)):
            raise _refuse(op, path, f"malformed entry for {name!r}: dtype {code!r}, "
                          f"shape {shape!r}, data_offsets {[begin, end]!r}")
        if code in _FROM_CODE:
            dt = _FROM_CODE[code]
            npt = np.dtype(f"<u{dt.itemsize}") if dt is _dt.bfloat16 else _dt.numpy_dtype(dt)
        elif code in _WIDEN:
            npt, dt = np.dtype(_WIDEN[code][0]), _WIDEN[code][1]
        else:
            raise DTypeError(f"[{op}] tensor {name!r} has dtype {code}, which ember cannot hold")
        if math.prod(max(d, 1) for d in shape) >= 2**63:
            raise _refuse(op, path, f"shape {tuple(shape)} of {name!r} is too large")
        n = math.prod(shape)  # exact: np.prod wraps, and (2**32, 2**32) would pass for 0 bytes
        if not 0 <= begin <= end or end - begin != n * npt.itemsize:
            raise _refuse(op, path, f"data_offsets {[begin, end]} of {name!r} do not match "
                          f"shape {tuple(shape)} and dtype {code}")
        out.append((name, dt, npt, shape, begin, end))
    at = 0
    for name, *_, begin, end in sorted(out, key=lambda e: (e[4], e[5])):
        if begin != at:
            what = "overlaps the tensor before it" if begin < at else f"leaves a gap at byte {at}"
            raise _refuse(op, path, f"data_offsets {[begin, end]} of {name!r} {what}")
        at = end
    if at != size:
        raise _refuse(op, path, f"the tensors cover {at} bytes of a {size}-byte data buffer")
    return out


def load_safetensors(path, device=None) -> dict:
    """Reads a safetensors file into ``{name: Tensor}``.

    The file is checked as the reference ``safetensors`` package checks it (a file one accepts and the
    other refuses would be a portability bug), and must be a regular file.

    Args:
        path: a ``str`` or ``os.PathLike``.
        device: where the tensors go (default: the default device, see ``em.set_default_device``).

    Returns:
        ``{name: Tensor}``; I32 and BOOL load as int32 and bool, I8, I16 and U16 widen to int64.

    Raises:
        EmberIOError: the file cannot be opened or is not a regular file (a FIFO, a device, ...).
        EmberValueError: the header or an entry is malformed, byte ranges overlap, leave gaps or do not
            cover the data, or a tensor has more than 64 dims.
        DTypeError: a dtype ember cannot hold.
        EmberTypeError: a path of the wrong type.
    """
    return read_tensors(path, device, "load_safetensors")[0]


def read_tensors(path, device, op):
    """``load_safetensors``'s work, for it and ``em.load``: every check, then the tensors.

    Returns:
        ``({name: Tensor}, header)``; errors name ``op``.
    """
    path = _path(path, op)
    # Map the file instead of reading it: each tensor is copied out once, so peak memory stays ~1x.
    buf = _map_file(path, op)
    header, data_start = _read_header(buf, path, op)
    data = buf[data_start:]
    out = {}
    for name, dt, npt, shape, begin, end in _entries(header, data.size, path, op):
        # Copy out of the file buffer: offsets in foreign files need not be aligned to the itemsize.
        arr = np.array(data[begin:end]).view(npt)
        if dt is _dt.bool:  # a foreign file's BOOL bytes may be any value: ember's bools are 0 or 1
            arr = arr.view(np.uint8) != 0
        if arr.dtype != _dt.numpy_dtype(dt) and dt is not _dt.bfloat16:
            arr = arr.astype(_dt.numpy_dtype(dt))
        s = _C.CpuStorage._from_numpy_code(arr, dt.code)
        t = _wrap(s, _C.Layout.contiguous(shape), dt, _dt.cpu)
        out[name] = t.to_device(device)  # None: the default device
    return out, header


def load_safetensors_metadata(path) -> dict:
    """The ``__metadata__`` mapping of a safetensors file.

    Args:
        path: a ``str`` or ``os.PathLike``.

    Returns:
        ``{str: str}``, ``{}`` when the file has none.

    Raises:
        EmberIOError, EmberValueError, DTypeError: as ``load_safetensors`` does for the header.
    """
    op = "load_safetensors_metadata"
    path = _path(path, op)
    header, _ = _read_header(_map_file(path, op), path, op)
    return dict(header.get("__metadata__") or {})
