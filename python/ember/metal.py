"""ember's Metal layer as seen from Python: which backend runs Metal code (Apple's, the MSL emulator, none)."""
import os

from . import _C
from .metal_kernel import Kernel, cache_info

__all__ = ["Kernel", "backend", "cache_info"]


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
    if os.environ.get("EMBER_METAL", "").strip().lower() == "emulate":
        return "emulator"
    if _C._metal_apple_available():
        return "apple"
    return None
