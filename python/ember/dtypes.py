"""DType and Device: value objects shared by the facade (dtype_core.py), the CPU device object
``em.cpu`` with its ``Kernel``, and the default device."""
from __future__ import annotations

import builtins

from . import _C
from .cpu_kernel import Kernel as _Kernel
from .dtype_core import (  # noqa: F401  (the package reaches them all as dtypes.X)
    _BY_NAME,
    _NP_TO_EMBER,
    _NP_WIDEN,
    _SPECS,
    ALL_DTYPES,
    BY_CODE,
    Device,
    DType,
    _np_bf16,
    bfloat16,
    bool,
    float16,
    float32,
    float64,
    from_numpy_dtype,
    int32,
    int64,
    numpy_dtype,
    to_dtype,
    uint8,
    uint32,
)
from .errors import DeviceError


class _Cpu(Device):
    """The CPU device (``em.cpu``); also the home of ``em.cpu.Kernel``, C++ CPU kernels from Python."""

    __slots__ = ()

    @property
    def Kernel(self):  # noqa: N802  (a class, reached as em.cpu.Kernel)
        """``em.cpu.Kernel(source, name, inputs, outputs, scalars, options)``: see ember.cpu_kernel.Kernel."""
        return _Kernel


cpu = _Cpu("cpu")
_default_device = cpu  # what device=None means (em.set_default_device)


def to_device(dev) -> Device:
    """The Device for ``dev``: a Device, a device string, or None (the default device)."""
    if dev is None:
        return _default_device
    return dev if isinstance(dev, Device) else Device(dev)


def set_default_device(device) -> None:
    """Sets the device that creation functions use when given ``device=None``, as torch's and MLX's do.

    ``em.tensor``, ``zeros``, ``ones``, ``full``, ``arange``, ``rand``, ``randn``, ``eye``,
    ``linspace``, ``Var``, the ``nn`` layers and ``load_safetensors`` then place their results there.
    The setting is global to the process; it starts as the CPU.

    Args:
        device: an ``em.Device`` or a string such as ``"cpu"`` or ``"metal:0"``.

    Returns:
        None.

    Raises:
        DeviceError: the device is unknown or not available in this process.
    """
    global _default_device
    dev = Device(device) if not isinstance(device, Device) else device
    if not _C.device_available(dev.kind, dev.index):
        raise DeviceError(f"[set_default_device] device {dev} is not available")
    _default_device = dev


def get_default_device() -> Device:
    """The device creation functions use when given ``device=None`` (see ``set_default_device``).

    Returns:
        Device: the default device (the CPU unless changed).
    """
    return _default_device


def cuda_is_available() -> bool:
    """Whether ``Device("cuda")`` can hold tensors in this process.

    True with ``EMBER_CUDA=emulate`` in the environment (ember's CUDA emulator, any machine), or when the
    NVIDIA driver reports a device; read at every call.

    Returns:
        True when cuda:0 is available, else False.
    """
    return builtins.bool(_C.device_available(Device._KINDS["cuda"], 0))


def metal_is_available() -> bool:
    """Whether ``Device("metal")`` can hold tensors in this process.

    True with ``EMBER_METAL=emulate`` in the environment (ember's MSL emulator, any OS), or on a build
    with the metal-cpp backend that finds a Metal device; read at every call.

    Returns:
        True when metal:0 is available, else False.
    """
    return builtins.bool(_C.device_available(Device._KINDS["metal"], 0))


def _accelerators() -> list:
    """Every device other than the CPU that this process has now: metal:0, then cuda:0 .. cuda:n-1."""
    out = [Device("metal", 0)] if metal_is_available() else []
    return out + [Device("cuda", i) for i in range(_C._cuda_device_count())]
