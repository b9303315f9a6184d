"""em.apply_op: custom ops with any number of inputs and outputs (em.CustomOp), and their graph nodes."""
from __future__ import annotations

import weakref

from . import _C, backprop
from .backprop import MULTI_OUTPUT, Node, record
from .custom_op import CpuStorage, CustomOp, _check_inputs, _checked, _fwd, _modified_rule
from .errors import EmberTypeError, EmberValueError, UnsupportedOp
from .tensor_type import Tensor, _wrap

__all__ = ["apply_op"]


def _rule_one(node, out, grad):
    """A one-output CustomOp: its bwd in the many-output convention."""
    return node.saved.bwd(list(node.inputs), [out], [grad])


class _Outputs:
    """What the nodes of one many-output op share: the op, its inputs (as recorded), and per output
    a weak reference to the tensor plus what rebuilds it (so bwd always gets every output, even one
    the user dropped, without the nodes keeping their outputs alive in a cycle)."""

    __slots__ = ("__weakref__", "inputs", "op", "refs", "shells", "versions", "out_versions", "recorded")

    def outputs(self):
        """Every output as a tensor: the live one, else a rebuilt one with the same node."""
        res = []
        for i, (r, shell) in enumerate(zip(self.refs, self.shells)):
            t = r()
            if t is None:
                st, layout, dtype, device, shape = shell
                t = _wrap(st, layout, dtype, device, None, shape)
                if self.recorded[i]:
                    t._op = Node(self.op.name, self.inputs, (self, i), self.versions, MULTI_OUTPUT,
                                 self.out_versions[i])
            res.append(t)
        return res


def _results(op, res, tensors):
    """The forward's list of (storage, shape), checked (each output as in apply_op1, and no two
    outputs sharing memory), as tensors."""
    if type(res) is not list:
        if type(res) is tuple and len(res) == 2 and isinstance(res[0], _C.Storage):
            raise EmberTypeError(f"[{op.name}] an em.CustomOp forward returns a list of (storage, shape), one per "
                                 "output; got one (storage, shape) pair: wrap it in a list")
        try:
            res = list(res)
        except TypeError:
            raise EmberTypeError(f"[{op.name}] a forward must return a list of (storage, shape), got "
                                 f"{type(res).__name__}") from None
    want = op.out_dtypes
    if want is not None:
        if not isinstance(want, (list, tuple)):
            raise EmberTypeError(f"[{op.name}] out_dtypes must be a sequence with one dtype per output, got "
                                 f"{type(want).__name__}")
        if len(want) != len(res):
            raise EmberValueError(f"[{op.name}] forward returned {len(res)} outputs, out_dtypes names {len(want)}")
    outs = []
    for i, r in enumerate(res):
        if type(r) is tuple and len(r) == 2:
            st, shape = r
        else:
            try:
                st, shape = r
            except (TypeError, ValueError):
                raise EmberTypeError(f"[{op.name}] output {i}: a forward must return (storage, shape) per output, "
                                     f"got {type(r).__name__}") from None
        t = _checked(op, st, shape, None if want is None else want[i], tensors, f" (output {i})")
        for j, o in enumerate(outs):
            if st is o._storage or st.same_buffer(o._storage):
                raise EmberValueError(f"[{op.name}] outputs {j} and {i} share memory; return a new storage per output")
        outs.append(t)
    return outs


def _record_many(op, outs, tensors, rule):
    """Records a many-output op: one node per differentiable output, sharing an _Outputs."""
    if not backprop.is_grad_enabled():
        return
    for t in tensors:
        if backprop.tracks(t):
            break
    else:
        return
    nd = op.non_differentiable
    group = _Outputs()
    group.op, group.inputs = op, tensors
    group.versions = tuple(t._storage.saved_version for t in tensors)
    group.refs = [weakref.ref(o) for o in outs]
    group.shells = [(o._storage, o._layout, o._dtype, o._device, o._shape) for o in outs]
    group.recorded = [o._dtype.is_float and i not in nd for i, o in enumerate(outs)]
    group.out_versions = [o._storage.saved_version for o in outs]
    for i, o in enumerate(outs):
        if group.recorded[i]:
            o._op = Node(op.name, tensors, (group, i), group.versions, rule, group.out_versions[i])


def _mutating_forward(op, tensors, args):
    """Runs a forward that writes the inputs ``op.mutates`` names: checks them as in-place targets,
    snapshots other operands that overlap them, makes their views writable, bumps their versions."""
    idx = op.mutates
    n = len(tensors)
    try:
        idx = sorted({int(i) + (n if int(i) < 0 else 0) for i in idx})
    except (TypeError, ValueError):
        raise EmberTypeError(f"[{op.name}] mutates must hold input indices, got {op.mutates!r}") from None
    if any(not 0 <= i < n for i in idx):
        raise EmberValueError(f"[{op.name}] mutates={tuple(op.mutates)} names an input past the {n} given")
    targets = [tensors[i] for i in idx]
    for i, t in zip(idx, targets):
        if t.is_variable and t._dtype.is_float and backprop.is_grad_enabled():
            raise UnsupportedOp(f"[{op.name}] input {i} is a variable (a leaf that tracks gradients): an in-place "
                                "write to it would not be differentiated; run the op under em.no_grad()")
        for d, st in zip(t._layout.shape, t._layout.stride):
            if st == 0 and d > 1:
                raise EmberValueError(f"[{op.name}] cannot write input {i} in place through a broadcast (stride 0) "
                                      f"view {t._layout!r}")
    for j, t in enumerate(tensors):
        for i, m in zip(idx, targets):
            if j != i and (t._storage is m._storage or t._storage.same_buffer(m._storage)):
                if j in idx:
                    raise EmberValueError(f"[{op.name}] mutated inputs {i} and {j} share memory")
                # read as it was before the write, as InplaceOp2 does
                args[j] = _C.contiguous(t._storage, t._layout)
                break
    fwd = _fwd(op, tensors[0]._storage)
    stores = [t._storage for t in targets]
    prev = _C._push_inplace_targets(stores)
    try:
        res = fwd(args)
    finally:
        _C._pop_inplace_targets(prev)
        for s in stores:
            s.bump_version()  # even after a failure: the forward may have written part of the data
    for t in targets:
        node = t._op
        if node is not None:  # its own rule may read the overwritten values: make that loud
            t._op = Node(op.name, node.inputs, None, node.versions, _modified_rule)
    return res


_profile_hook = None  # set by em.profiler while it records: times each apply_op (em.apply_op is this function)


def apply_op(op, *tensors):
    """Runs an ``em.CustomOp`` on any number of input tensors and records it for backward.

    Args:
        op: a ``CustomOp`` instance; its forward for the inputs' device runs.
        *tensors: the inputs, on one device.

    Returns:
        Tensor for an op with one output; otherwise a tuple with one Tensor per output (an empty
        tuple for an in-place op that returns none).

    Raises:
        EmberTypeError: ``op`` is not a CustomOp, an input is not a Tensor, or the forward returned
            something other than a list of (storage, shape).
        DeviceError, DTypeError, ShapeError, EmberValueError: an output fails its checks (see
            ``CustomOp``), each naming the op.
        UnsupportedOp: the op has no forward for this device.
    """
    if _profile_hook is not None:
        return _profile_hook(op, tensors)
    return _apply_op(op, *tensors)


def _apply_op(op, *tensors):
    if not isinstance(op, CustomOp):
        raise EmberTypeError(f"[apply_op] expected an em.CustomOp instance, got {type(op).__name__}"
                             + (" (use x.apply_op1/2/3 for CustomOp1/2/3)" if hasattr(op, "_arity") else ""))
    if len(tensors) == 1:  # the common case, without a loop
        x = tensors[0]
        if not isinstance(x, Tensor):
            raise EmberTypeError(f"[{op.name}] input 0 must be a Tensor, got {type(x).__name__}")
        args = [(x._storage, x._layout)]
    else:
        if not tensors:
            raise EmberValueError(f"[{op.name}] apply_op needs at least one input tensor")
        x = tensors[0]
        if not isinstance(x, Tensor):
            raise EmberTypeError(f"[{op.name}] input 0 must be a Tensor, got {type(x).__name__}")
        _check_inputs(op, tensors)
        args = [(t._storage, t._layout) for t in tensors]
    if op.mutates:
        res = _mutating_forward(op, tensors, args)
    else:
        s = x._storage
        res = (op.cpu_fwd if type(s) is CpuStorage else _fwd(op, s))(args)
    if type(res) is list and len(res) == 1 and op.out_dtypes is None:
        r = res[0]
        if type(r) is tuple and len(r) == 2:  # one output, as apply_op1 checks it
            out = _checked(op, r[0], r[1], None, tensors, "")
            return out if op.non_differentiable else record(out, op.name, tensors, op, _rule_one)
    outs = _results(op, res, tensors)
    if len(outs) == 1:
        if op.non_differentiable:
            return outs[0]
        return record(outs[0], op.name, tensors, op, _rule_one)
    _record_many(op, outs, tensors, MULTI_OUTPUT)
    return tuple(outs)
