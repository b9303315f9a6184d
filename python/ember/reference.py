"""Backward from a reference: the vector-Jacobian product of a custom op's ``reference`` (Tensor ops)."""
from __future__ import annotations

from . import backprop
from .backprop import Node
from .errors import EmberTypeError, NoGradientPath
from .tensor_type import Tensor, _wrap
from .variable import Var

__all__ = ["bwd_from_reference", "reference_grads", "vjp"]


def _pass(node, out, grad):
    return (grad,)


def _stand_in(t):
    """A leaf (Var) over ``t``'s storage: the inner backward stops there, and no data is copied."""
    return _wrap(t._storage, t._layout, t._dtype, t._device, Var, t._shape)


def _rebind(p, t):
    """Turns the stand-in ``p`` into an identity of ``t``: gradients that the outer graph later sends
    into ``p`` (create_graph) continue into ``t`` and whatever ``t`` came from."""
    p.__class__ = Tensor  # Var adds no slots: the object keeps its fields
    p._op = Node("reference_input", (t,), None, (t._storage.saved_version,), _pass)


def vjp(fn, inputs, grads, create_graph=None):
    """The gradients of ``fn(*inputs)`` for the output gradients ``grads``, one per input.

    ``fn`` runs on stand-ins of the tensor inputs that need a gradient, so its graph ends there; the
    gradients come from one ``backward`` of ``sum(out_i * grad_i)``. With ``create_graph`` (default:
    whether grad mode is on, i.e. inside ``backward(create_graph=True)``) the stand-ins are then made
    identities of the inputs (and of the incoming gradients), so the result differentiates further.

    Args:
        fn: a function of ``inputs`` returning a Tensor or a sequence of them.
        inputs: the arguments (tensors, or other values passed as they are).
        grads: a Tensor or None per output of ``fn`` (a single one for a Tensor result).
        create_graph: keep the graph of the result.

    Returns:
        list: a Tensor or None per input (None where no gradient reaches it).
    """
    create = backprop.is_grad_enabled() if create_graph is None else bool(create_graph)
    args, pairs = [], []
    for x in inputs:
        if isinstance(x, Tensor) and backprop.needs_grad(x):
            p = _stand_in(x)
            pairs.append((p, x))
            args.append(p)
        elif isinstance(x, Tensor):
            args.append(x.detach())
        else:
            args.append(x)
    if not pairs:
        return [None] * len(inputs)
    mode = backprop._mode
    prev = mode.enabled
    mode.enabled = True
    try:
        outs = fn(*args)
        if isinstance(outs, Tensor):
            outs, grads = (outs,), (grads if isinstance(grads, (list, tuple)) else (grads,))
        outs, grads = tuple(outs), tuple(grads)
        if len(outs) != len(grads):
            raise EmberTypeError(f"[reference] gave {len(outs)} outputs for {len(grads)} gradients")
        root = None
        for o, g in zip(outs, grads):
            if g is None or not isinstance(o, Tensor) or not backprop.tracks(o):
                continue
            if create and (g._op is not None or g.is_variable):
                gp = _stand_in(g)
                pairs.append((gp, g))
                g = gp
            elif g._op is not None or g.is_variable:
                g = g.detach()
            term = (o * g.to_dtype(o._dtype) if g._dtype is not o._dtype else o * g).sum()
            root = term if root is None else root + term
    finally:
        mode.enabled = prev
    if root is None:
        return [None] * len(inputs)
    try:
        store = backprop.backward(root, create_graph=create)
    except NoGradientPath:
        return [None] * len(inputs)
    by_id = {id(x): store.get(p) for p, x in pairs}
    res = [by_id.get(id(x)) if isinstance(x, Tensor) else None for x in inputs]
    if create:
        for p, x in pairs:
            _rebind(p, x)
    return res


def reference_grads(op, inputs, grads):
    """``vjp(op.reference, inputs, grads)``, naming the op when it has no reference."""
    if op.reference is None:
        raise EmberTypeError(f"[{op.name}] reference_grads needs a reference(self, *inputs) on the op")
    return vjp(op.reference, inputs, grads)


def bwd_from_reference(arity):
    """The ``bwd`` an op with a reference and no bwd gets, in the calling convention of its class:
    ``arity`` 1-3 for CustomOp1/2/3, -1 for CustomOp."""
    if arity == -1:
        def bwd(self, inputs, outputs, grads):
            return reference_grads(self, list(inputs), list(grads))
    elif arity == 1:
        def bwd(self, arg, res, grad_res):
            return reference_grads(self, [arg], [grad_res])[0]
    else:
        def bwd(self, *args):
            return tuple(reference_grads(self, list(args[:arity]), [args[-1]]))
    bwd._from_reference = True
    bwd.__doc__ = "The gradients of ``reference``, recomputed from the saved inputs (no bwd was written)."
    return bwd
