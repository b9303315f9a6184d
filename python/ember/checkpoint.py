"""em.checkpoint: gradient checkpointing (run a function without keeping its intermediates, recompute them in backward)."""
from __future__ import annotations

from . import _C, backprop
from .backprop import MULTI_OUTPUT, record
from .custom_op_n import _record_many, _rule_one
from .errors import EmberTypeError
from .reference import _rebind, _stand_in
from .tensor_type import Tensor, _ids, _wrap
from .variable import Var

__all__ = ["checkpoint"]


def _outside_inputs(outs, first_id):
    """The tensors made before ``first_id`` (ids only grow) that the graph of ``outs`` reaches and that
    carry gradients: the checkpointed function's real inputs, whether passed as arguments or captured
    (a module's parameters). Iterative; the graph inside the function is walked once."""
    seen, found, stack = set(), [], list(outs)
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t._id < first_id:
            if backprop.tracks(t):
                found.append(t)
            continue
        node = t._op
        if node is not None:
            stack.extend(i for i in node.inputs if i is not None)
    return found


class _Checkpoint:
    """The node's saved op: recomputes the function (same random numbers) and differentiates it."""

    name = "checkpoint"
    non_differentiable = ()

    def __init__(self, fn, args, kwargs, rng, n_out):
        self.fn, self.args, self.kwargs, self.rng, self.n_out = fn, args, kwargs, rng, n_out

    def bwd(self, inputs, outputs, grads):
        # The inputs stand as leaves while the recomputed graph is differentiated, so the inner
        # backward stops at them; their own history is restored after (create_graph continues into it).
        swapped = []
        for t in inputs:
            if not t.is_variable:
                swapped.append((t, t.__class__, t._op))
                t.__class__, t._op = Var, None  # Var adds no slots
        mode = backprop._mode
        prev_mode, prev_rng = mode.enabled, _C._rng_state()
        create = prev_mode  # inside backward, grad mode is on exactly under create_graph
        try:
            mode.enabled = True
            _C._set_rng_state(*self.rng)
            try:
                outs = _as_tuple(self.fn(*self.args, **self.kwargs))
            finally:
                _C._set_rng_state(*prev_rng)
            root, stand_ins = None, []
            for o, g in zip(outs, grads):
                if g is None or not backprop.tracks(o):
                    continue
                if not create:
                    g = g.detach()
                elif backprop.tracks(g):  # g's own graph stays out of this backward; rebound after
                    p = _stand_in(g)
                    stand_ins.append((p, g))
                    g = p
                term = (o * g).sum()
                root = term if root is None else root + term
            mode.enabled = prev_mode
            if root is None:
                return [None] * len(inputs)
            store = backprop.backward(root, create_graph=create)
            for p, g in stand_ins:
                _rebind(p, g)
        finally:
            mode.enabled = prev_mode
            for t, cls, node in swapped:
                t.__class__, t._op = cls, node
        return [store.get(t) for t in inputs]


def _as_tuple(out):
    if isinstance(out, Tensor):
        return (out,)
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, Tensor) for o in out):
        return tuple(out)
    raise EmberTypeError(f"[checkpoint] the function must return a Tensor or a tuple of Tensors, got "
                         f"{type(out).__name__}")


def checkpoint(fn, *args, **kwargs):
    """Runs ``fn(*args, **kwargs)`` without keeping its intermediate results; backward recomputes them.

    This trades compute for memory: the graph keeps only ``fn``'s inputs (the tensors it was passed
    and those it uses from outside, such as a module's parameters), and ``backward`` runs ``fn`` once
    more to rebuild what it needs. Random ops inside ``fn`` draw the same numbers again (the
    generator's seed and counter are saved and restored, as torch's ``preserve_rng_state``), and
    custom ops, fused ops and ``backward(create_graph=True)`` work through it. Outside grad mode, or
    when no input tracks a gradient, it simply calls ``fn``.

    Args:
        fn: a function of tensors returning a Tensor or a tuple of Tensors. It must compute the same
            thing when called again (no side effects that change its result).
        *args: its arguments (tensors or other values).
        **kwargs: its keyword arguments.

    Returns:
        What ``fn`` returns: a Tensor, or a tuple of Tensors, recorded as one checkpoint node.

    Raises:
        EmberTypeError: ``fn`` returned something other than tensors.
    """
    if not callable(fn):
        raise EmberTypeError(f"[checkpoint] expected a function, got {type(fn).__name__}")
    if not backprop.is_grad_enabled():
        return fn(*args, **kwargs)
    rng = _C._rng_state()
    first = next(_ids)
    out = fn(*args, **kwargs)
    outs = _as_tuple(out)
    inputs = tuple(_outside_inputs(outs, first))
    # New result objects over the same storages: the graph inside fn is dropped with the old ones.
    res = [_wrap(o._storage, o._layout, o._dtype, o._device, None, o._shape) for o in outs]
    if inputs:
        op = _Checkpoint(fn, args, kwargs, rng, len(res))
        if len(res) == 1:
            record(res[0], "checkpoint", inputs, op, _rule_one)
        else:
            _record_many(op, res, inputs, MULTI_OUTPUT)
    return res[0] if isinstance(out, Tensor) else tuple(res)
