"""Argument orders of the index ops: ember's (candle's) ``gather(indices, dim)`` or torch's ``gather(dim, index)``.

The two are told apart by the argument types: torch's order starts with the dim, a Python int, where
ember's starts with the indices (a tensor, list or array); keywords name their order (``index=``,
``src=`` are torch's). Anything else raises an error that shows both signatures.
"""
from __future__ import annotations

import numpy as np

from .errors import EmberTypeError

_TORCH_KW = {"index": "indices", "src": "source"}  # torch's keyword -> ember's


def _is_dim(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def bind(op, args, kwargs, ember_names, torch_names, extra=()):
    """Binds ``args``/``kwargs`` of index op ``op`` in either order.

    Args:
        op: the op name, for errors.
        args: the positional arguments.
        kwargs: the keyword arguments (ember's or torch's names, and those in ``extra``).
        ember_names: ember's positional names, such as ``("indices", "dim")``.
        torch_names: torch's, in ember's spelling, such as ``("dim", "indices")``.
        extra: keyword-only names the op also takes (their values pass through).

    Returns:
        ``{name: value}`` under ember's names; ``dim`` is an int, ``indices`` is not.

    Raises:
        EmberTypeError: arguments that fit neither order, naming both signatures.
    """
    def sig(names):
        return f"{op}({', '.join(_torch_spelling(n) if names is torch_names else n for n in names)})"

    usage = f"expected {sig(ember_names)} (ember's order) or {sig(torch_names)} (torch's)"
    torch_style = (bool(args) and _is_dim(args[0])) or any(k in kwargs for k in _TORCH_KW)
    names = torch_names if torch_style else ember_names
    if len(args) > len(names):
        raise EmberTypeError(f"[{op}] takes {len(names)} arguments, got {len(args)}: {usage}")
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        name = _TORCH_KW.get(k, k)
        if k in extra:
            bound[k] = v
            continue
        if name not in ember_names:
            raise EmberTypeError(f"[{op}] unexpected keyword argument {k!r}: {usage}")
        if name in bound:
            raise EmberTypeError(f"[{op}] got {k!r} twice: {usage}")
        bound[name] = v
    missing = [n for n in ember_names if n not in bound]
    if missing:
        raise EmberTypeError(f"[{op}] missing {', '.join(missing)}: {usage}")
    if not _is_dim(bound["dim"]) or _is_dim(bound["indices"]):
        got = ", ".join(type(a).__name__ for a in args)
        raise EmberTypeError(f"[{op}] {usage}, with dim an int and the indices a tensor; got ({got})")
    return bound


def _torch_spelling(name):
    return {"indices": "index", "source": "src"}.get(name, name)
