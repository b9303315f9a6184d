"""The devices' allocators' public face: em.empty_cache, em.memory_stats, em.set_cache_limit (and EMBER_CACHE_LIMIT), per device."""
from __future__ import annotations

import operator
import os
import re
import warnings

from . import _C
from . import dtypes as _dt
from .errors import DTypeError, EmberValueError

_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE = re.compile(r"\s*(\d{1,24})\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)
_MAX_BYTES = 2**64 - 1  # the core stores the cap as a size_t


def _available_devices():
    """The CPU and every other device whose backend is available in this process."""
    return [_dt.cpu] + _dt._accelerators()


def _physical_memory():
    """This machine's physical memory in bytes (0 when the system does not say): no result larger than
    it can ever be allocated, on the CPU or on a device sharing it (Apple silicon's Metal)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _one_device(device):
    """``device`` as a Device, the CPU for None (raises DeviceError for an unknown one)."""
    return _dt.cpu if device is None else _dt.to_device(device)


def empty_cache(device=None) -> None:
    """Returns every freed block a device's allocator keeps for reuse to the system.

    Tensors that are alive are not affected; their memory stays allocated. Like
    ``torch.cuda.empty_cache``, this lowers the process's resident memory after large temporary
    tensors were freed.

    Args:
        device: the device whose cache to empty (an ``em.Device`` or a string); None empties every
            available device's.

    Returns:
        None.

    Raises:
        DeviceError: ``device`` is unknown or not available.
    """
    for d in _available_devices() if device is None else [_one_device(device)]:
        _C.empty_cache(d.kind, d.index)


def _device_stats(d) -> dict:
    allocated, cached, peak, limit = _C.memory_stats(d.kind, d.index)
    return {"allocated_bytes": allocated, "cached_bytes": cached, "peak_allocated_bytes": peak,
            "cache_limit_bytes": limit}


def memory_stats(device=None) -> dict:
    """What ember's allocators hold, in bytes.

    Sizes are those of the allocator's size classes (what a block really occupies, at least the
    bytes asked for). Memory borrowed from other libraries (``from_dlpack``) is not counted.

    Args:
        device: None for the totals over every available device (below), or one device (an
            ``em.Device`` or a string) for its four counts alone.

    Returns:
        For ``device=None``, a dict with the totals over every available device and one entry per
        device::

            {"allocated_bytes": int,       # in live tensors
             "cached_bytes": int,          # freed, kept for reuse (em.empty_cache returns it)
             "peak_allocated_bytes": int,  # the most allocated at once (see reset_peak_memory_stats)
             "cache_limit_bytes": int,     # the cap on cached_bytes (em.set_cache_limit)
             "devices": {"cpu": {the same four keys}, "cuda:0": {...}, "metal:0": {...}}}

        For one device, the dict of its four keys.

    Raises:
        DeviceError: ``device`` is unknown or not available.
    """
    if device is not None:
        return _device_stats(_one_device(device))
    devices = {str(d): _device_stats(d) for d in _available_devices()}
    total = {k: sum(d[k] for d in devices.values()) for k in devices["cpu"]}
    total["devices"] = devices
    return total


def reset_peak_memory_stats(device=None) -> None:
    """Starts ``memory_stats()["peak_allocated_bytes"]`` again from what is allocated now.

    Args:
        device: the device whose peak to reset; None resets every available device's.

    Returns:
        None.

    Raises:
        DeviceError: ``device`` is unknown or not available.
    """
    for d in _available_devices() if device is None else [_one_device(device)]:
        _C.reset_peak_memory(d.kind, d.index)


def _limit_arg(n, op):
    if isinstance(n, bool):
        raise DTypeError(f"[{op}] expected a number of bytes (int), got bool")
    try:
        n = operator.index(n)
    except TypeError:
        raise DTypeError(f"[{op}] expected a number of bytes (int), got {type(n).__name__}") from None
    if not 0 <= n <= _MAX_BYTES:
        raise EmberValueError(f"[{op}] cache limit must be in [0, 2**64), got {n}")
    return n


def set_cache_limit(nbytes: int, device=None) -> None:
    """Caps the bytes of freed blocks a device's allocator keeps for reuse.

    Blocks freed beyond the cap go back to the system at once; a cache above the new cap is trimmed
    now (largest blocks first). ``0`` turns caching off (every allocation then comes from the
    system, which is slower for ops that allocate often). The default is 2 GiB, or the value of the
    ``EMBER_CACHE_LIMIT`` environment variable at import (bytes, or with a ``K``/``M``/``G``/``T``
    suffix, powers of 1024: ``512M``, ``4GiB``).

    Args:
        nbytes: the cap, an int in [0, 2**64).
        device: the device whose cache to cap (an ``em.Device`` or a string); None is the CPU.

    Returns:
        None.

    Raises:
        DTypeError: ``nbytes`` is not an int.
        EmberValueError: ``nbytes`` is negative or too large.
        DeviceError: ``device`` is unknown or not available.
    """
    d = _one_device(device)
    _C.set_cache_limit(_limit_arg(nbytes, "set_cache_limit"), d.kind, d.index)


def _parse_size(text: str):
    m = _SIZE.fullmatch(text)
    if not m:
        return None
    n = int(m.group(1)) * _UNITS[m.group(2).lower()]
    return n if n <= _MAX_BYTES else None


def _apply_env() -> None:
    """Applies EMBER_CACHE_LIMIT at import; an unreadable value is ignored with a warning."""
    text = os.environ.get("EMBER_CACHE_LIMIT")
    if text is None:
        return
    n = _parse_size(text)
    if n is None:
        warnings.warn(f"[EMBER_CACHE_LIMIT] cannot read {text!r} as a byte count (e.g. 1073741824, 512M, 4G); "
                      "keeping the default", RuntimeWarning, stacklevel=2)
        return
    _C.set_cache_limit(n)


_apply_env()
