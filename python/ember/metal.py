"""ember's Metal layer as seen from Python: which backend runs Metal code, the device's synchronize and memory controls, MetalStorage.empty."""
from __future__ import annotations

from . import _C
from . import dtypes as _dt
from .errors import DeviceError, EmberValueError
from .memory import _limit_arg
from .metal_kernel import Kernel, cache_info

__all__ = ["backend", "synchronize", "memory_stats", "empty_cache", "set_cache_limit", "set_memory_limit",
           "reset_peak_memory_stats", "describe", "Kernel", "cache_info"]


def backend():
    """Names the implementation behind ``Device("metal")``.

    ``EMBER_METAL=emulate`` in the environment selects ember's MSL emulator, which runs the Metal kernels
    as C++ on the CPU on any machine (see docs/metal.md); it is never on unless asked for. Otherwise a
    build with the metal-cpp backend (macOS) that finds a Metal device reports ``"apple"``.

    Returns:
        ``"emulator"``, ``"apple"`` or ``None`` when this process has no Metal backend.

    Raises:
        Nothing.
    """
    return _C._metal_backend_kind()


def _index(device) -> int:
    if device is None:
        return 0
    d = _dt.to_device(device)
    if d.type != "metal":
        raise DeviceError(f"[metal] expected a Metal device, got {d}")
    return d.index


def synchronize(device=None) -> None:
    """Waits until every kernel encoded on the Metal device has run.

    Kernels are encoded into a shared command buffer and committed in batches; reading a tensor's
    values (``numpy()``, ``to_device("cpu")``) synchronizes by itself, so this is for timing and for
    surfacing errors. A kernel that failed since the last synchronize (an out-of-bounds access under
    the emulator, a GPU fault) raises here, once.

    Args:
        device: the Metal device (an em.Device or ``"metal:0"``); None means metal:0.

    Returns:
        None.

    Raises:
        DeviceError: no such Metal device is available.
        EmberError: a kernel failed (the message names the kernel, and under the emulator the buffer
            index and byte offset of an out-of-bounds access).
    """
    _C._metal_synchronize(_index(device))


def memory_stats(device=None) -> dict:
    """What the Metal device's buffer pool holds, in bytes, and its encoder's counters.

    Args:
        device: the Metal device; None means metal:0.

    Returns:
        A dict with ``em.memory_stats``'s four keys, the same on every device: ``allocated_bytes``
        (in live storages), ``cached_bytes`` (freed buffers kept for reuse), ``peak_allocated_bytes``
        (the most allocated at once), ``cache_limit_bytes``; then the pool's ``memory_limit_bytes``,
        ``cached_buffers``, ``pool_hits`` / ``pool_misses`` (requests served from the cache / by a new
        buffer), and the encoder's ``dispatches``, ``barriers`` (within a command buffer),
        ``fence_waits`` (on a command buffer still in flight), ``commits``, ``pipelines``,
        ``pipeline_compiles`` and ``library_compiles`` (one per kernel source: a source's pipelines
        share its compiled library).

    Raises:
        DeviceError: no such Metal device is available.
    """
    return _C._metal_stats(_index(device))  # the C++ surface names the counters as em.memory_stats does


def empty_cache(device=None) -> None:
    """Releases every cached (freed) buffer of the Metal device's pool back to the device.

    Args:
        device: the Metal device; None means metal:0.

    Returns:
        None.

    Raises:
        DeviceError: no such Metal device is available.
    """
    _C._metal_empty_cache(_index(device))


def set_cache_limit(nbytes: int, device=None) -> None:
    """Caps the bytes of freed buffers the Metal pool keeps for reuse (the oldest go first).

    Args:
        nbytes: the cap, an int in [0, 2**64); 0 keeps no freed buffer.
        device: the Metal device; None means metal:0.

    Returns:
        None.

    Raises:
        DTypeError: ``nbytes`` is not an int.
        EmberValueError: ``nbytes`` is negative or too large.
        DeviceError: no such Metal device is available.
    """
    _C._metal_set_cache_limit(_limit_arg(nbytes, "set_cache_limit"), _index(device))


def set_memory_limit(nbytes: int, device=None) -> None:
    """Caps the bytes the Metal pool may hold (live plus cached); past it an allocation first releases
    cached buffers, then raises OutOfMemory. The default is 1.5x the device's recommended working set.

    Args:
        nbytes: the limit, an int in [0, 2**64).
        device: the Metal device; None means metal:0.

    Returns:
        None.

    Raises:
        DTypeError: ``nbytes`` is not an int.
        EmberValueError: ``nbytes`` is negative or too large.
        DeviceError: no such Metal device is available.
    """
    _C._metal_set_memory_limit(_limit_arg(nbytes, "set_memory_limit"), _index(device))


def reset_peak_memory_stats(device=None) -> None:
    """Starts ``memory_stats()["peak_allocated_bytes"]`` again from what is allocated now.

    Args:
        device: the Metal device; None means metal:0.

    Returns:
        None.

    Raises:
        DeviceError: no such Metal device is available.
    """
    _C._metal_reset_peak_memory(_index(device))


def describe(device=None) -> str:
    """A line naming the Metal device and its backend, e.g. ``"metal:0 (emulator, ember MSL emulator (CPU))"``.

    Args:
        device: the Metal device; None means metal:0.

    Returns:
        The description.

    Raises:
        DeviceError: no such Metal device is available.
    """
    return _C._metal_describe(_index(device))


def _empty(n, dtype, device=None):
    """A new MetalStorage of ``n`` elements of ``dtype`` from the device's buffer pool (contents unspecified).

    Args:
        n: the element count, an int in [0, 2**63).
        dtype: an em.DType, its name or a numpy dtype; not float64 (Metal has none).
        device: the Metal device; None means metal:0.

    Returns:
        The MetalStorage.

    Raises:
        EmberValueError: ``n`` is out of range.
        DTypeError: ``dtype`` is float64 or unknown.
        DeviceError: no such Metal device is available.
    """
    n = int(n)
    if not 0 <= n < 2**63:
        raise EmberValueError(f"[empty] element count must be in [0, 2**63), got {n}")
    return _C.MetalStorage._empty_code(n, _dt.to_dtype(dtype).code, _index(device))


_C.MetalStorage.empty = staticmethod(_empty)
