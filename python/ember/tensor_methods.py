"""The one place Tensor gets its methods: each op module's METHODS table (name -> function), bound in
one loop, then the docstrings of tensor_docs.py. Importing this module completes Tensor."""
from __future__ import annotations

from . import (
    backprop,
    composite,
    custom_op,
    elementwise,
    indexing,
    interop,
    reduce,
    tensor_docs,
    torch_names,
    views,
)
from .tensor_type import Tensor
from .torch_names import _rebuild  # noqa: F401  (pickles made before the split name ember.tensor_methods._rebuild)
from .variable import Var

_MODULES = (views, elementwise, reduce, indexing, composite, torch_names, backprop, custom_op, interop)


def _bind():
    """Sets every module's METHODS on Tensor; a name claimed by two modules is a bug, said at import."""
    owner = {}
    for mod in _MODULES:
        for name, fn in mod.METHODS.items():
            if name in owner:
                raise RuntimeError(f"[Tensor] method {name!r} is defined by both {owner[name]} and {mod.__name__}")
            owner[name] = mod.__name__
            if getattr(fn, "__name__", None) == "_" + name:  # sum, max, abs, ...: named _sum in their module
                fn.__name__ = name                            # so as not to shadow the builtin there
            setattr(Tensor, name, fn)
    tensor_docs.apply(Tensor, Var)


_bind()
