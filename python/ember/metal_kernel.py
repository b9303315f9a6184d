"""em.metal.Kernel: Metal kernels written in MSL from Python (for a custom op's ``metal_fwd``), compiled once per
device at first use and run through ember's Metal backend (or its MSL emulator, on any machine)."""
from __future__ import annotations

import numbers

import numpy as np

from . import _C
from .errors import EmberTypeError, EmberValueError

__all__ = ["Kernel", "cache_info"]

_MAX_SCALAR_BYTES = 4096  # Metal's set_bytes limit


def _storage_check(s, what, i):
    if not isinstance(s, _C.Storage):
        raise EmberTypeError(f"[metal.Kernel] {what}[{i}] must be a MetalStorage, got {type(s).__name__}")
    if s.device_kind != 1:
        raise EmberTypeError(f"[metal.Kernel] {what}[{i}] is a {type(s).__name__} (not on a Metal device); "
                             "move the data with Tensor.to_device or allocate with em.MetalStorage.empty")
    return s


def _scalar_bytes(v, i):
    if isinstance(v, np.generic):
        return np.asarray(v).tobytes()
    if isinstance(v, np.ndarray):
        if v.nbytes > _MAX_SCALAR_BYTES:
            raise EmberValueError(f"[metal.Kernel] scalars[{i}] holds {v.nbytes} bytes; at most {_MAX_SCALAR_BYTES} "
                              "go by value (pass larger data as an input storage)")
        return np.ascontiguousarray(v).tobytes()
    raise EmberTypeError(f"[metal.Kernel] scalars[{i}] must be a numpy scalar or a small numpy array (its dtype is "
                         f"the MSL type: np.uint32(n) for a `constant uint&`), got {type(v).__name__}")


def _dims(v, what, least):
    if isinstance(v, numbers.Integral):
        v = (v,)
    try:
        dims = tuple(v)
    except TypeError:
        raise EmberTypeError(f"[metal.Kernel] {what} must be 1 to 3 ints, got {type(v).__name__}") from None
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool)
                                          for d in dims):
        raise EmberTypeError(f"[metal.Kernel] {what} must be 1 to 3 ints, got {v!r}")
    if any(d < least or d > 0xFFFFFFFF for d in dims):
        raise EmberValueError(f"[metal.Kernel] {what} {dims} must be ints in [{least}, 2^32)")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))


class Kernel:
    """A Metal compute kernel written in MSL, callable on Metal storages.

    Nothing is compiled when the object is made: the first call on a device compiles ``source`` there
    (Apple's Metal compiler, or the emulator's C++ compiler) and caches the pipeline by (device, hash
    of the source, name, options), never by name alone, so two kernels sharing a name but not a
    source never share a pipeline. ``[[buffer(i)]]`` binds the inputs, then the outputs, then the
    scalars, in that order.

    Args:
        source: the MSL text (``#include <metal_stdlib>`` and ``kernel void name(...)``).
        name: the kernel function to run (a ``[[host_name]]`` for templates).
        options: None, or a dict with ``"constants"``: ``{index: value}`` for the
            ``[[function_constant(index)]]`` values (bool, int or float; part of the cache key).

    Raises:
        EmberTypeError: ``source`` or ``name`` is not a str, or options are malformed.
        EmberValueError: a function constant outside its type's range (an int outside int32) or a
            float constant that is NaN or infinite (``[metal]``).
    """

    def __init__(self, source: str, name: str, options: dict | None = None):
        if not isinstance(source, str) or not isinstance(name, str):
            raise EmberTypeError("[metal.Kernel] source and name must be str")
        if not name:
            raise EmberValueError("[metal.Kernel] name must not be empty")
        options = {} if options is None else options
        if not isinstance(options, dict) or set(options) - {"constants"}:
            raise EmberTypeError(f"[metal.Kernel] options must be None or a dict with 'constants', got {options!r}")
        # (index, value) pairs: types, ranges and finiteness are checked by _C's one parser of constants
        consts = sorted(dict(options.get("constants", {})).items())
        self.source, self.name, self.options = source, name, options
        self._k = _C._metal_kernel_new(source, name, f"{name}.metal", consts)

    def __repr__(self):
        return f"em.metal.Kernel({self.name!r}, source {self._k.source_hash[:12]})"

    def __call__(self, inputs=(), outputs=(), scalars=(), grid_threads=(1, 1, 1), threads_per_threadgroup=(1, 1, 1)):
        """Encodes one dispatch on the storages' device (its shared command encoder).

        Args:
            inputs: MetalStorages the kernel reads, bound from ``[[buffer(0)]]`` on.
            outputs: MetalStorages it writes (registered as written with the hazard tracker, so a
                later kernel reading them waits), bound after the inputs.
            scalars: numpy scalars or small numpy arrays (at most 4096 bytes), passed by value
                (``constant T&``), bound after the outputs.
            grid_threads: the grid in threads (1 to 3 ints), as Metal's ``dispatchThreads``: edge
                threadgroups may be partial.
            threads_per_threadgroup: the threadgroup size (1 to 3 ints; their product at most the
                device's limit, 1024).

        Returns:
            None. The outputs hold the results once the device has run the work (reading them,
            e.g. through a Tensor, synchronizes).

        Raises:
            EmberTypeError: an input or output is not a Metal storage (a CpuStorage, a numpy array),
                or a scalar is not a numpy value.
            DeviceError: the storages are on different devices.
            EmberValueError: a threadgroup over the device's limit, bad sizes, or the source does not
                compile (the message carries the compiler's log).
        """
        ins = [_storage_check(s, "inputs", i) for i, s in enumerate(inputs)]
        outs = [_storage_check(s, "outputs", i) for i, s in enumerate(outputs)]
        sc = [_scalar_bytes(v, i) for i, v in enumerate(scalars)]
        grid = _dims(grid_threads, "grid_threads", 0)
        group = _dims(threads_per_threadgroup, "threads_per_threadgroup", 1)
        _C._metal_kernel_call(self._k, ins, outs, sc, grid, group)


def cache_info() -> dict:
    """The Kernel pipeline cache, per Metal device.

    Returns:
        dict: ``{"metal:<index>": {"compiles": n, "hits": m}}``: the distinct (source, name,
        options) compiled on that device, and the calls that found theirs compiled.

    Raises:
        Nothing.
    """
    return {f"metal:{i}": dict(v) for i, v in _C._metal_kernel_cache_info().items()}
