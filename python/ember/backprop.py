"""Autograd core: the recorded Node, grad mode (no_grad), the iterative backward walk and GradStore.

Works only through the tensors it is handed (never imports tensor.py), so there is no import cycle.
"""
from __future__ import annotations

import threading

from .errors import BackwardNotSupported, EmberError  # noqa: F401  (re-exported for the walk)


class _GradMode(threading.local):
    enabled = True


_mode = _GradMode()


def is_grad_enabled() -> bool:
    return _mode.enabled


class no_grad:
    """Context manager (and decorator) inside which no op is recorded (per thread)."""

    def __enter__(self):
        self._prev = _mode.enabled
        _mode.enabled = False
        return self

    def __exit__(self, *exc):
        _mode.enabled = self._prev
        return False

    def __call__(self, fn):
        def wrapped(*a, **k):
            with no_grad():
                return fn(*a, **k)

        wrapped.__name__ = getattr(fn, "__name__", "wrapped")
        wrapped.__doc__ = getattr(fn, "__doc__", None)
        return wrapped


class Node:
    """What an op result remembers: the op name, its inputs, the parameters its rule needs, the
    storage versions of the inputs when recorded (in-place check), and an optional rule override
    (custom ops carry their own ``bwd``)."""

    __slots__ = ("name", "inputs", "saved", "versions", "rule")

    def __init__(self, name, inputs, saved, versions, rule):
        self.name, self.inputs, self.saved, self.versions, self.rule = name, inputs, saved, versions, rule

    def __repr__(self):
        return f"Node({self.name})"


def tracks(t) -> bool:
    """True when gradients can flow into ``t`` (a float variable, or the result of a recorded op)."""
    return (t._op is not None or t.is_variable) and t._dtype.is_float


def record(out, name, inputs, saved=None, rule=None):
    """Attaches a Node to ``out`` when grad mode is on and some float input leads to a variable."""
    if not _mode.enabled or not out._dtype.is_float:
        return out
    for t in inputs:
        if t is not None and (t._op is not None or t.is_variable) and t._dtype.is_float:
            break
    else:
        return out
    out._op = Node(name, inputs, saved, tuple(t._storage.version if t is not None else 0 for t in inputs), rule)
    return out
