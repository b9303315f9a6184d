"""em.Generator: a random stream of its own (seed + counter), for rand/randn/randint/multinomial/dropout/init."""
from __future__ import annotations

import contextlib
import os

from . import _C
from .args import int_arg
from .errors import EmberTypeError

__all__ = ["Generator", "default_seed"]

default_seed = 67280421310721  # torch's Generator default, so an unseeded Generator is reproducible too


class Generator:
    """A reproducible random stream independent of the global one, as ``torch.Generator``: ops that
    take ``generator=`` (``em.rand``, ``em.randn``, ``em.randint``, ``em.multinomial``,
    ``nn.functional.dropout``, ``nn.init.*``) draw from it and advance it, leaving ``em.manual_seed``'s
    stream untouched. A Generator seeded with n gives the same values as ``em.manual_seed(n)`` does
    for the same calls, on every device and thread count (the same counter-based draws).

    Args:
        device: accepted for torch's signature; the stream is the same on every device.
    """

    def __init__(self, device="cpu"):
        self.device = device
        self.manual_seed(default_seed)

    def manual_seed(self, seed):
        """Restarts the stream from ``seed`` (an int); returns self."""
        self._seed = int_arg(seed, "Generator.manual_seed", "seed") & 0xFFFFFFFFFFFFFFFF
        self._mixed = _C.rng_mix(self._seed)
        self._counter = 0
        return self

    def seed(self):
        """Seeds the stream from the OS's entropy; returns the seed."""
        s = int.from_bytes(os.urandom(8), "little") >> 1
        self.manual_seed(s)
        return s

    def initial_seed(self):
        """The seed the stream started from."""
        return self._seed

    def get_state(self):
        """The stream's position, a tuple to give back to ``set_state``."""
        return (self._seed, self._counter)

    def set_state(self, state):
        """Restores a position from ``get_state``.

        Raises:
            EmberTypeError: state is not a (seed, counter) pair of ints.
        """
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise EmberTypeError(f"[Generator.set_state] expected the (seed, counter) pair of get_state, got {state!r}")
        self.manual_seed(state[0])
        self._counter = int_arg(state[1], "Generator.set_state", "counter") & 0xFFFFFFFFFFFFFFFF
        return self

    @contextlib.contextmanager
    def _drawing(self):
        """Draws made inside come from this stream (on this thread), which then moves past them."""
        _C.rng_install(self._mixed, self._counter)
        try:
            yield
        finally:
            self._counter = _C.rng_uninstall()

    def __repr__(self):
        return f"Generator(seed={self._seed}, offset={self._counter})"


def drawing(generator, op):
    """A context in which the draws of ``op`` come from ``generator`` (None: the global stream)."""
    if generator is None:
        return contextlib.nullcontext()
    if not isinstance(generator, Generator):
        raise EmberTypeError(f"[{op}] generator must be an em.Generator or None, got {type(generator).__name__}")
    return generator._drawing()
