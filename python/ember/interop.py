"""DLPack interop: Tensor.__dlpack__ / __dlpack_device__ and em.from_dlpack, on CPU and CUDA (streams per the protocol)."""
from __future__ import annotations

import ctypes as C
import math
import operator
import warnings

import numpy as np

from . import _C
from . import dtypes as _dt
from .errors import DeviceError, DLPackCopyWarning, DTypeError, EmberValueError
from .tensor_type import Tensor, _from_array, _wrap

# The DLPack C structs (dlpack.h v1.x), declared with ctypes. numpy's own exporter cannot carry
# bfloat16, so ember builds and reads the capsules itself: one code path for every dtype.


class _DLDevice(C.Structure):
    _fields_ = [("device_type", C.c_int32), ("device_id", C.c_int32)]


class _DLDataType(C.Structure):
    _fields_ = [("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16)]


class _DLTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("device", _DLDevice), ("ndim", C.c_int32), ("dtype", _DLDataType),
                ("shape", C.POINTER(C.c_int64)), ("strides", C.POINTER(C.c_int64)),
                ("byte_offset", C.c_uint64)]


_DELETER = C.CFUNCTYPE(None, C.c_void_p)


class _DLManaged(C.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", C.c_void_p), ("deleter", _DELETER)]


class _DLVersion(C.Structure):
    _fields_ = [("major", C.c_uint32), ("minor", C.c_uint32)]


class _DLManagedVersioned(C.Structure):
    _fields_ = [("version", _DLVersion), ("manager_ctx", C.c_void_p), ("deleter", _DELETER),
                ("flags", C.c_uint64), ("dl_tensor", _DLTensor)]


_KDL_CPU, _KDL_CUDA, _KDL_METAL = 1, 2, 8
# The CUDA stream ember runs on, as DLPack names it: ember launches on the device's legacy default stream.
_LEGACY_STREAM, _PER_THREAD_STREAM = 1, 2
_FLAG_READ_ONLY = 1
_NAME, _USED = b"dltensor", b"used_dltensor"
_NAME_V, _USED_V = b"dltensor_versioned", b"used_dltensor_versioned"

# (DLPack type code, bits) <-> ember dtype; 0 int, 1 uint, 2 float, 4 bfloat, 6 bool.
_TO_DL = {_dt.float32: (2, 32), _dt.float16: (2, 16), _dt.bfloat16: (4, 16), _dt.float64: (2, 64),
          _dt.int64: (0, 64), _dt.uint32: (1, 32), _dt.uint8: (1, 8), _dt.int32: (0, 32), _dt.bool: (6, 8)}
_FROM_DL = {v: k for k, v in _TO_DL.items()}
# Types ember has no slot for: read through numpy and widened (a copy), like em.tensor does.
_WIDEN_NP = {(0, 8): np.int8, (0, 16): np.int16, (1, 16): np.uint16}

_api = C.pythonapi
_api.PyCapsule_New.restype = C.py_object
_api.PyCapsule_New.argtypes = [C.c_void_p, C.c_char_p, C.c_void_p]
_api.PyCapsule_IsValid.restype = C.c_int
_api.PyCapsule_IsValid.argtypes = [C.c_void_p, C.c_char_p]
_api.PyCapsule_GetPointer.restype = C.c_void_p
_api.PyCapsule_GetPointer.argtypes = [C.c_void_p, C.c_char_p]
_api.PyCapsule_SetName.restype = C.c_int
_api.PyCapsule_SetName.argtypes = [C.c_void_p, C.c_char_p]

# ----------------------------------------------------------------------------- export
# address of the managed struct -> everything that must live until the consumer calls the deleter
# (the struct itself, its shape/stride arrays and the exported tensor's storage).
_LIVE: dict = {}


def _release_export(addr):
    _LIVE.pop(addr, None)


# The deleter and the capsule destructor (which releases an export no consumer renamed) are C
# functions in _C that call _release_export with any pending Python exception set aside: a consumer
# that fails (numpy on bfloat16) calls them mid-error, and a ctypes callback would swallow its error.
_deleter_addr, _destructor_addr = _C._dlpack_callbacks(_release_export)
_release = _DELETER(_deleter_addr)
_DESTRUCTOR_PTR = C.c_void_p(_destructor_addr)


def _fill_tensor(dl: _DLTensor, t: Tensor, keep: list):
    ndim = t.ndim
    shape = (C.c_int64 * max(ndim, 1))(*t.shape)
    strides = (C.c_int64 * max(ndim, 1))(*t.layout.stride)
    keep += [shape, strides]
    code, bits = _TO_DL[t.dtype]
    # Point data at the first element (byte_offset 0): some consumers ignore byte_offset.
    dl.data = t.storage.data_ptr + t.layout.start_offset * t.dtype.itemsize
    dl.device = _DLDevice(*_dlpack_device(t))
    dl.ndim = ndim
    dl.dtype = _DLDataType(code, bits, 1)
    dl.shape = C.cast(shape, C.POINTER(C.c_int64))
    dl.strides = C.cast(strides, C.POINTER(C.c_int64))
    dl.byte_offset = 0


def _target_device(t, dl_device):
    """The ember device a consumer's ``dl_device`` names (the tensor's own for None)."""
    if dl_device is None:
        return t.device
    if not isinstance(dl_device, (tuple, list)) or len(dl_device) != 2:
        raise DTypeError(f"[__dlpack__] dl_device must be a (device_type, device_id) tuple, got {dl_device!r}")
    try:
        kind, index = (operator.index(v) for v in dl_device)
    except TypeError:
        raise DTypeError(f"[__dlpack__] dl_device must be a (device_type, device_id) tuple of ints, got {dl_device!r}") from None
    dev = {(_KDL_CPU, 0): _dt.cpu}.get((kind, index))
    if kind == _KDL_CUDA and index >= 0:
        dev = _dt.Device("cuda", index)
    if dev is None or not _C.device_available(dev.kind, dev.index):
        raise BufferError(f"[__dlpack__] cannot export to device {tuple(dl_device)}")
    return dev


def _check_stream(stream, device):
    """The consumer's stream, checked against the DLPack protocol for ``device`` (where the consumer reads)."""
    if device.type != "cuda":
        if stream is not None and stream != -1:
            raise BufferError(f"[__dlpack__] stream must be None for a {device.type.upper()} tensor")
        return
    if stream is None or stream == -1:
        return
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise BufferError(f"[__dlpack__] stream must be None or an int (a CUDA stream handle), got {stream!r}")
    if stream == 0:
        raise BufferError("[__dlpack__] stream 0 is ambiguous in DLPack: pass 1 for the legacy default stream, 2 for "
                          "the per-thread default stream, or a stream handle")
    if stream < -1:
        raise BufferError(f"[__dlpack__] stream must be -1, 1, 2 or a stream handle, got {stream}")


def _order_for_stream(stream, device):
    """Orders ember's work on ``device`` before a consumer reading on ``stream``, without a host wait.

    ember launches on the legacy default stream, which both default streams (1, 2) are ordered
    with; -1 asks for no synchronisation. Any other stream may be non-blocking: an event recorded on
    ember's stream is made the consumer stream's dependency (cuEventRecord + cuStreamWaitEvent).
    """
    if device.type == "cuda" and stream is not None and stream not in (-1, _LEGACY_STREAM, _PER_THREAD_STREAM):
        _C._cuda_order_stream(device.index, stream)


def _dlpack(self: Tensor, *, stream=None, max_version=None, dl_device=None, copy=None):
    """Exports the tensor as a DLPack capsule; on CPU and CUDA it shares this tensor's memory (zero-copy).

    Args:
        stream: the consumer's CUDA stream, as DLPack defines it (None or 1: the legacy default stream,
            which ember runs on; 2: the per-thread default stream; -1: no synchronisation; else a
            stream handle, which is made to wait, on the device, for an event recorded on ember's
            stream). None for host memory.
        max_version: the consumer's highest DLPack version; (1, x) gives a versioned capsule.
        dl_device: the (device_type, device_id) to export to; another device than the tensor's is a copy.
        copy: True always copies; False refuses a copy (BufferError); None copies only when needed.

    Returns:
        The capsule.

    Raises:
        BufferError: a stream or device the export cannot serve, or a copy that ``copy=False`` forbids.
        DTypeError: a malformed ``dl_device`` or ``max_version``.
    """
    target = _target_device(self, dl_device)
    _check_stream(stream, target)
    t = self.detach()
    if target != t.device:  # the consumer asked for another device: a copy there, unless copy=False
        if copy is False:
            raise BufferError(f"[__dlpack__] the tensor is on {t.device}; exporting it to {target} needs a copy, "
                              "and copy=False")
        t, copy = t.to_device(target), True
    elif t.device.type not in ("cpu", "cuda"):
        raise BufferError(f"[__dlpack__] export from {t.device} is not supported; move to cpu first "
                          "(or pass dl_device=(1, 0))")
    elif copy:
        s, l = _C.contiguous(t._storage, t._layout)
        t = _wrap(s, l, t._dtype, t._device)
    try:
        versioned = max_version is not None and operator.index(max_version[0]) >= 1
    except (TypeError, IndexError, KeyError):
        raise DTypeError(f"[__dlpack__] max_version must be a (major, minor) tuple of ints, got {max_version!r}") from None
    m = _DLManagedVersioned() if versioned else _DLManaged()
    keep = [m, t._storage]
    _fill_tensor(m.dl_tensor, t, keep)
    m.manager_ctx = None
    m.deleter = _release
    if versioned:
        m.version = _DLVersion(1, 0)
        # A buffer autograd saved is exported read-only: numpy honours the flag, so a write through
        # the import cannot silently change a gradient (torch ignores it; see docs/memory-and-safety.md).
        read_only = not copy and t._storage.saved
        m.flags = (2 if copy else 0) | (_FLAG_READ_ONLY if read_only else 0)  # IS_COPIED, READ_ONLY
    _order_for_stream(stream, t.device)  # first: a driver error it reports leaves no export behind
    addr = C.addressof(m)
    _LIVE[addr] = keep
    return _api.PyCapsule_New(addr, _NAME_V if versioned else _NAME, _DESTRUCTOR_PTR)


def _dlpack_device(self: Tensor):
    if self.device.type == "cpu":
        return (_KDL_CPU, 0)
    if self.device.type == "cuda":
        return (_KDL_CUDA, self.device.index)
    if self.device.type == "metal":
        return (_KDL_METAL, self.device.index)
    raise BufferError(f"[__dlpack_device__] no DLPack device for {self.device}")


METHODS = {"__dlpack__": _dlpack, "__dlpack_device__": _dlpack_device}  # bound onto Tensor by tensor_methods.py


# ----------------------------------------------------------------------------- import
class _Owner:
    """Holds a consumed DLPack tensor; calls the producer's deleter when ember's storage dies."""

    __slots__ = ("addr", "deleter")

    def __init__(self, addr, deleter):
        self.addr, self.deleter = addr, deleter

    def __del__(self):
        if self.deleter:
            self.deleter(self.addr)
            self.deleter = None


def _import_device(kind, index, what):
    """The ember device of a DLPack (device_type, device_id): the CPU, or an available cuda:index."""
    if kind == _KDL_CPU:
        return _dt.cpu
    if kind == _KDL_CUDA and index >= 0:
        dev = _dt.Device("cuda", index)
        if not _C.device_available(dev.kind, dev.index):
            raise DeviceError(f"[from_dlpack] {what} is on CUDA device {index}, and cuda:{index} is not available "
                              "in this process")
        return dev
    raise DeviceError(f"[from_dlpack] only CPU and CUDA tensors can be imported, got DLPack device ({kind}, {index})")


def _capsule_of(obj):
    if type(obj).__name__ == "PyCapsule":
        return obj
    kw = {}
    if hasattr(obj, "__dlpack_device__"):
        dev = obj.__dlpack_device__()
        try:  # the producer's answer is read, not trusted
            kind, index = (operator.index(v) for v in dev)
        except (TypeError, ValueError):
            raise DTypeError(f"[from_dlpack] __dlpack_device__ returned {dev!r}, not a (type, id) tuple") from None
        if _import_device(kind, index, type(obj).__name__).type == "cuda":
            # The consumer names the stream it reads on; the producer orders its pending work before it.
            kw["stream"] = _LEGACY_STREAM
    if not hasattr(obj, "__dlpack__"):
        raise DTypeError(f"[from_dlpack] {type(obj).__name__} does not implement __dlpack__")
    try:
        return obj.__dlpack__(max_version=(1, 0), **kw)
    except TypeError:  # producers from before DLPack 1.0 take no max_version
        return obj.__dlpack__(**kw)


def from_dlpack(obj) -> Tensor:
    """An ember tensor from any DLPack producer (torch, numpy, jax, cupy, ...) on the CPU or a CUDA device.

    On the CPU it is zero-copy when it can be: the tensor shares the producer's memory. The data is
    copied instead when it is not aligned to its element size, marked read-only, negatively strided,
    empty, or of a dtype ember widens (int8/int16/int32/uint16). See docs/memory-and-safety.md.

    CUDA data lands on ``cuda:<device_id>``. ember asks the producer to order its pending work before
    ember's stream (the legacy default stream, ``stream=1``). CUDA memory is shared too: an ember
    tensor's own capsule gives the same storage, another library's memory is wrapped (its deleter runs
    when the last ember view dies). Read-only CUDA data is copied on the device; bool, negatively
    strided, misaligned or empty data and widened dtypes go through the host (docs/cuda.md).

    Args:
        obj: an object with ``__dlpack__`` (and ``__dlpack_device__``), or an unconsumed capsule.

    Returns:
        A Tensor on the CPU or on cuda:N; an ember Tensor comes back as ``obj.detach()``.

    Raises:
        DeviceError: the data is on neither the CPU nor an available CUDA device.
        DTypeError: a dtype ember cannot hold, or ``obj`` speaks no DLPack.
        EmberValueError: a malformed capsule (bad rank, shape or version), or strides that reach
            outside the address space.
    """
    if isinstance(obj, Tensor):
        return obj.detach()
    cap = _capsule_of(obj)
    cap_addr = id(cap)  # CPython: id is the object's address, which the C API calls take
    if _api.PyCapsule_IsValid(cap_addr, _NAME_V):
        name, used = _NAME_V, _USED_V
        addr = _api.PyCapsule_GetPointer(cap_addr, name)
        m = _DLManagedVersioned.from_address(addr)
        if m.version.major != 1:
            raise EmberValueError(f"[from_dlpack] unsupported DLPack version {m.version.major}.{m.version.minor}")
        read_only = bool(m.flags & _FLAG_READ_ONLY)
    elif _api.PyCapsule_IsValid(cap_addr, _NAME):
        name, used = _NAME, _USED
        addr = _api.PyCapsule_GetPointer(cap_addr, name)
        m = _DLManaged.from_address(addr)
        read_only = False
    else:
        raise EmberValueError("[from_dlpack] expected an unconsumed DLPack capsule")
    dl = m.dl_tensor
    device = _import_device(dl.device.device_type, dl.device.device_id, "the capsule")
    key = (dl.dtype.code, dl.dtype.bits)
    if dl.dtype.lanes != 1 or (key not in _FROM_DL and key not in _WIDEN_NP):
        raise DTypeError(f"[from_dlpack] unsupported DLPack dtype (code {key[0]}, bits {key[1]}, "
                         f"lanes {dl.dtype.lanes})")
    ndim = dl.ndim
    # A producer's struct is read, not trusted: a bad rank or shape raises before ember owns it.
    if not 0 <= ndim <= 64 or (ndim and not dl.shape):
        raise EmberValueError(f"[from_dlpack] invalid DLPack tensor: ndim {ndim}")
    shape = [int(dl.shape[i]) for i in range(ndim)]
    if any(d < 0 for d in shape) or math.prod(max(d, 1) for d in shape) >= 2**63:
        raise EmberValueError(f"[from_dlpack] invalid DLPack shape {tuple(shape)}")
    if not dl.data and math.prod(shape) > 0:
        raise EmberValueError(f"[from_dlpack] DLPack tensor of shape {tuple(shape)} has no data pointer")
    # From here on ember owns the managed tensor: rename so the producer's destructor leaves it alone.
    _api.PyCapsule_SetName(cap_addr, used)
    ours = _LIVE.get(addr)  # an export of ember's own (keep[1] is the exported tensor's storage)
    owner = _Owner(addr, m.deleter if m.deleter else None)
    if dl.strides:
        strides = [int(dl.strides[i]) for i in range(ndim)]
    else:  # NULL strides mean compact row-major
        strides, acc = [0] * ndim, 1
        for i in reversed(range(ndim)):
            strides[i], acc = acc, acc * shape[i]
    # A dim of size 1 never steps: its stride (any int64, e.g. 2**62) is made 0 so no index arithmetic
    # (numpy's as_strided below included) ever multiplies by it.
    strides = [0 if n == 1 else s for n, s in zip(shape, strides)]
    itemsize = dl.dtype.bits // 8
    data = (dl.data or 0) + int(dl.byte_offset)
    numel = math.prod(shape)
    # The bytes the strides reach, relative to data: a producer's strides are not trusted either. An
    # extent that leaves the address space or that an int64 cannot count would wrap in the kernels'
    # index arithmetic and let a read run out of bounds.
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0 and n > 1)
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0 and n > 1)
    if numel and (data + lo * itemsize < 0 or data + (hi + 1) * itemsize > 2**64
                  or (hi - lo + 1) * itemsize >= 2**63):
        del owner
        raise EmberValueError(f"[from_dlpack] strides {tuple(strides)} of shape {tuple(shape)} reach outside "
                              "the address space")
    span = 0 if numel == 0 else 1 + hi
    # Zero-copy needs memory aligned to the element size: the kernels' typed and SIMD loads of a
    # misaligned buffer are undefined behaviour. Such data is copied.
    zero_copy = (key in _FROM_DL and not read_only and all(s >= 0 for s in strides) and numel > 0
                 and data % itemsize == 0)
    if device.type == "cuda":
        return _cuda_import(device, owner, ours, key, shape, strides, data, lo, hi, zero_copy, read_only)
    if zero_copy and _FROM_DL[key] is _dt.bool:
        # bool bytes other than 0 and 1 (a producer's view of other data) are copied, normalised to 0/1
        raw = (C.c_uint8 * (hi + 1)).from_address(data)
        view = np.lib.stride_tricks.as_strided(np.frombuffer(raw, dtype=np.uint8), shape, strides)
        zero_copy = not (view > 1).any()
    if zero_copy:
        dt = _FROM_DL[key]
        storage = _C.CpuStorage._borrow(data, span, dt.code, owner)
        return _wrap(storage, _C.Layout(shape, strides, 0), dt, _dt.cpu)
    raw = None
    if numel:
        raw = (C.c_uint8 * ((hi - lo + 1) * itemsize)).from_address(data + lo * itemsize)
    out = _host_copy(np.frombuffer(raw, np.uint8) if numel else None, key, shape, strides, lo)
    del owner  # the copy is made: release the producer's memory now
    return out


def _host_copy(raw, key, shape, strides, lo):
    """A CPU tensor copied from ``raw`` (the bytes the strides reach, from element ``lo`` on), for the
    data zero-copy cannot take: widened dtypes, read-only or negatively strided producers, empty tensors."""
    itemsize = key[1] // 8
    if key in _WIDEN_NP:  # said out loud: the caller asked for shared memory and does not get it
        warnings.warn(f"[from_dlpack] ember has no {np.dtype(_WIDEN_NP[key]).name}: the data is copied and widened "
                      f"to {_dt.from_numpy_dtype(np.dtype(_WIDEN_NP[key])).name}, sharing no memory",
                      DLPackCopyWarning, stacklevel=3)
    if raw is None:  # no elements
        npt = _WIDEN_NP.get(key) or _dt.numpy_dtype(_FROM_DL[key])
        zeros = np.zeros(shape, dtype=npt)
        out = _from_array(zeros, _dt.from_numpy_dtype(zeros.dtype), _dt.cpu)  # DLPack imports are host memory
        return out.to_dtype(_FROM_DL[key]) if key in _FROM_DL else out
    npt = np.dtype(_WIDEN_NP[key]) if key in _WIDEN_NP else np.dtype(f"u{itemsize}")
    flat = raw.view(npt)
    arr = np.lib.stride_tricks.as_strided(flat[-lo:], shape, [s * itemsize for s in strides])
    arr = arr.copy(order="C")  # not ascontiguousarray, which makes a 0-d array 1-d
    if key in _WIDEN_NP:
        return _from_array(arr, _dt.from_numpy_dtype(arr.dtype), _dt.cpu)
    dt = _FROM_DL[key]
    if dt is _dt.bool:
        arr = arr != 0  # any nonzero byte is true, stored as 1
    s = _C.CpuStorage._from_numpy_code(arr.reshape(-1), dt.code)
    return _wrap(s, _C.Layout.contiguous(shape), dt, _dt.cpu)


def _cuda_import(device, owner, ours, key, shape, strides, data, lo, hi, zero_copy, read_only):
    """The tensor on ``device`` (cuda:N) of a consumed CUDA capsule, whose producer ``owner`` releases."""
    itemsize = key[1] // 8
    st = ours[1] if ours is not None and len(ours) > 1 else None
    if zero_copy and isinstance(st, _C.CudaStorage) and st.device == device:
        # ember's own export: the same storage, viewed through the capsule's strides and offset
        off, rem = divmod(data - st.data_ptr, itemsize)
        if rem == 0 and 0 <= off and off + hi < st.nbytes // itemsize:
            dt = _FROM_DL[key]
            return _wrap(st, _C.Layout(shape, strides, off), dt, device)  # owner's deleter ends the export
    if zero_copy and _FROM_DL[key] is not _dt.bool:
        # Another library's memory, wrapped: the storage starts at the capsule's first element and spans
        # what its strides reach; the producer's deleter runs when the last view (and work on it) is gone.
        dt = _FROM_DL[key]
        st = _C.CudaStorage._borrow(data, hi + 1, dt.code, device.index, owner)
        return _wrap(st, _C.Layout(shape, strides, 0), dt, device)
    if read_only and key in _FROM_DL and _FROM_DL[key] is not _dt.bool and all(s >= 0 for s in strides) \
            and math.prod(shape) and data % itemsize == 0:
        # Read-only memory is not ember's to write (as on the CPU): a copy, on the device.
        dt = _FROM_DL[key]
        st = _C.CudaStorage.empty(hi + 1, dt, device)
        _C._cuda_copy_from_pointer(st, data, (hi + 1) * itemsize)
        del owner
        return _wrap(st, _C.Layout(shape, strides, 0), dt, device)
    # Widened dtypes, bool, misaligned or negatively strided data, empty tensors: through the host.
    raw = None
    if math.prod(shape):
        raw = np.empty((hi - lo + 1) * itemsize, np.uint8)
        _C._cuda_read_pointer(device.index, data + lo * itemsize, raw)
    del owner
    return _host_copy(raw, key, shape, strides, lo).to_device(device)
