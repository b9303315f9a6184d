"""What the backward rules share. The rules themselves sit beside their ops (views.py, elementwise.py,
reduce.py, indexing.py, sorting.py, ...): one short function per recorded op, written with ordinary
Tensor ops so that second order works, registered in backprop.RULES by @rule. Each takes (node, out,
grad) and returns one gradient (or None) per input."""
from __future__ import annotations

from . import _C
from .backprop import _READS_NOTHING, RULES, USES, record, rule, wanted  # noqa: F401  (the table, re-exported)
from .creation import zeros
from .multi import where


def _zeros(shape, like):
    return zeros(shape, dtype=like._dtype, device=like._device)


def _mask(cond, g):
    """g where cond holds, else 0 (differentiable in g, exact for inf/nan elsewhere)."""
    return where(cond, g, 0.0)


def _scatter_view(g, shape, idx):
    """Zeros of ``shape`` with g written into the region ``zeros[idx]`` (the adjoint of basic
    indexing); recorded as ``index_scatter`` so that second order goes back through indexing."""
    z = _zeros(shape, g)
    view = z[idx]
    _C.copy_into(g._storage, g._layout, z._storage, view._layout, "index")
    return record(z, "index_scatter", (g,), idx)
