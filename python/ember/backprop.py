"""Autograd core: the recorded Node, grad mode (no_grad), the iterative backward walk and GradStore.

Holds the rule table (RULES, filled by @rule in grad_rules.py and the op modules); sits below every
op module and imports only the tensor type and creation (to seed the walk with ones).
"""
from __future__ import annotations

import threading
import weakref

from . import _C
from .creation import ones_like, zeros
from .errors import (
    BackwardNotSupported,
    DeviceError,
    DTypeError,
    EmberTypeError,
    EmberValueError,
    InplaceModifiedError,
    NoGradientPath,
    ShapeError,
)
from .tensor_type import _SCALAR_LAYOUT, _wrap

__all__ = [
    "MULTI_OUTPUT", "NO_BACKWARD", "GradStore", "Node", "backward", "is_grad_enabled", "needs_grad", "no_grad", "record",
    "sorted_nodes", "tracks",
]


class _GradMode(threading.local):
    enabled = True


_mode = _GradMode()


def is_grad_enabled() -> bool:
    """False inside ``with em.no_grad():`` (on this thread), else True."""
    return _mode.enabled


class no_grad:
    """Context manager (and decorator) inside which no op is recorded, on this thread.

    Results computed inside track no gradients, which saves the memory the graph would keep::

        with em.no_grad():
            logits = model(x)

    As a decorator, ``@em.no_grad()`` runs the whole function so.
    """

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


class _NoBackward:
    """Marker rule for results of ``apply_op*_no_bwd``: backward through them must fail loudly."""

    __slots__ = ()

    def __repr__(self):
        return "NO_BACKWARD"


NO_BACKWARD = _NoBackward()


class _MultiOutput:
    """Marker rule of the nodes of a many-output em.CustomOp: ``node.saved`` is (shared outputs, index);
    the walk gathers the gradients of every output before calling the op's bwd once."""

    __slots__ = ()

    def __repr__(self):
        return "MULTI_OUTPUT"


MULTI_OUTPUT = _MultiOutput()


class Node:
    """What an op result remembers: the op name, its inputs, the parameters its rule needs, the
    storage versions of the inputs (and of the result) when recorded (in-place check), and an
    optional rule override: a callable ``rule(node, out, grad)`` for custom ops, or NO_BACKWARD."""

    __slots__ = ("inputs", "name", "out_version", "rule", "saved", "versions")

    def __init__(self, name, inputs, saved, versions, rule, out_version=None):
        self.name = name
        self.inputs = inputs
        self.saved = saved
        self.versions = versions
        self.rule = rule
        self.out_version = out_version

    def __repr__(self):
        return f"Node({self.name})"


def tracks(t) -> bool:
    """True when gradients can flow into ``t`` (a float variable, or the result of a recorded op)."""
    return (t._op is not None or t.is_variable) and t._dtype.is_float


# Ops whose table rule reads the op's result: only these pay for reading its version when recorded.
_READS_OUT = frozenset(("exp", "tanh", "sqrt", "recip", "sigmoid", "pow", "max", "min", "expm1", "rsqrt", "tan",
                        "scatter_amax", "scatter_amin", "scatter_prod"))


def record(out, name, inputs, saved=None, rule=None):
    """Attaches a Node to ``out`` when grad mode is on and some float input leads to a variable.
    This runs on every op, so it is written for speed (no generators, one version read per input)."""
    if not _mode.enabled or not out._dtype.is_float:
        return out
    for t in inputs:
        if t is not None and (t._op is not None or t.is_variable) and t._dtype.is_float:
            break
    else:
        return out
    # saved_version also marks the storage as saved, so a DLPack export of it is read-only.
    n = len(inputs)
    if n == 2 and inputs[0] is not None and inputs[1] is not None:
        versions = (inputs[0]._storage.saved_version, inputs[1]._storage.saved_version)
    elif n == 1 and inputs[0] is not None:
        versions = (inputs[0]._storage.saved_version,)
    else:
        versions = tuple([t._storage.saved_version if t is not None else 0 for t in inputs])
    node = Node(name, inputs, saved, versions, rule)
    if rule is not None or name in _READS_OUT:
        node.out_version = out._storage.saved_version
    out._op = node
    return out


# --------------------------------------------------------------------- the walk
# Ops whose gradient is zero (or flows only to ints): candle prunes them from the graph.
_PRUNED = frozenset(("ceil", "floor", "round", "sign", "trunc", "argmax", "argmin"))


_MAYBE_PRUNED = _PRUNED | {"affine", "to_dtype"}
_UNSEEN = object()


def _pruned(node) -> bool:
    name = node.name
    if name in _PRUNED:
        return True
    if name == "affine":
        return node.saved is not None and node.saved[0] == 0.0
    if name == "to_dtype":  # a cast from an int tensor carries no gradient
        return node.saved is not None and not getattr(node.saved, "is_float", True)
    return False


def sorted_nodes(root):
    """The results with an op on some path from ``root`` to a variable, root first (a topological
    order). Iterative depth-first search, memoised on "leads to a variable", so deep chains never
    recurse and shared subgraphs are visited once."""
    return _walk(root)[0]


class _Walk(threading.local):
    leads = None  # during a backward: id(tensor) -> whether it leads to a variable (its walk's memo)


_walk_state = _Walk()


class _Rebinds:
    """The ids of the live tensors that ``t[idx] = v`` rebound to their written result (indexing.py):
    only nodes with such an input are resolved (_as_recorded), so other graphs cost next to nothing."""

    ids = set()

    def add(self, t):
        k = id(t)
        if k not in self.ids:
            self.ids.add(k)
            weakref.finalize(t, self.ids.discard, k)  # ids are reused once t is gone


_rebinds = _Rebinds()
SETITEM = "setitem"  # the node indexing.py records; its saved (idx, version just before the write)


def _as_recorded(inp, ver, out=None, used_at=None):
    """The tensor a node meant by input ``inp`` (recorded at storage version ``ver``): after
    ``t[idx] = v`` the object t stands for the written result, so a node recorded before that write
    reads the shell kept as the write's first input, t as it was. ``out``/``used_at``: when ``out`` is a
    view of inp (one buffer) first used after the write, its values are the written ones and its
    recorded op no longer says how they came about: raise, rather than send gradients the wrong way."""
    n = inp._op
    while n is not None and n.name == SETITEM and n.rule is None and ver <= n.saved[1]:
        if used_at is not None and used_at > n.saved[1] and out._storage.same_buffer(inp._storage):
            raise InplaceModifiedError(
                f"[backward] a view ({out._op.name}) of a tensor was made before t[idx] = v wrote into that "
                "tensor and used after it: its gradient would go to the old values. Take the view after the "
                "write, or clone it before.")
        inp = n.inputs[0]
        n = inp._op
    return inp


def needs_grad(t) -> bool:
    """Whether backward needs a gradient for ``t`` (torch's ``needs_input_grad``): a float variable, or
    a result that leads to one. Rules ask it so that a constant operand costs nothing.

    Args:
        t: a tensor (or None).

    Returns:
        A bool; outside a backward, True for every float tensor.
    """
    if t is None or not t._dtype.is_float:
        return False
    if t.is_variable:
        return True
    leads = _walk_state.leads
    return True if leads is None else bool(leads.get(id(t), False))


def _walk(root):
    """(sorted_nodes(root), the memo: id -> leads to a variable) of one walk."""
    if root._op is None:
        return [], {}
    state = {}  # id(tensor) -> None while its inputs are being visited, then "leads to a variable"
    rebound = _rebinds.ids
    order = []
    stack = [root]
    push, pop, get = stack.append, stack.pop, state.get
    while stack:
        t = stack[-1]
        k = id(t)
        st = get(k, _UNSEEN)
        if st is _UNSEEN:  # first visit: schedule the inputs not seen yet
            node = t._op
            # pruning is by table op name; a custom op (own rule) that happens to share one is kept
            if node.name in _MAYBE_PRUNED and node.rule is None and _pruned(node):
                state[k] = False
                pop()
                continue
            state[k] = None
            ins = node.inputs
            for inp in (ins if not rebound or rebound.isdisjoint(map(id, ins)) else _recorded_inputs(node)):
                if inp is not None and inp._op is not None and id(inp) not in state and inp._dtype.is_float:
                    push(inp)
            continue
        pop()
        if st is not None:  # a second copy of a finished node
            continue
        leads = False
        ins = t._op.inputs
        for inp in (ins if not rebound or rebound.isdisjoint(map(id, ins)) else _recorded_inputs(t._op)):
            if inp is not None and inp._dtype.is_float and (
                    inp.is_variable or (inp._op is not None and state[id(inp)])):
                leads = True
                break
        state[k] = leads
        if leads:
            order.append(t)
    order.reverse()
    return order, state


def _recorded_inputs(node, out=None, used_at=None):
    """node's inputs as they were recorded (see _as_recorded)."""
    return [inp if inp is None or inp._op is None or inp._op.name != SETITEM else
            _as_recorded(inp, ver, out, used_at) for inp, ver in zip(node.inputs, node.versions)]


# --------------------------------------------------------------------- the gradient store
def _key(t):
    if isinstance(t, int):
        return t
    try:
        return t._id
    except AttributeError:  # a clear error for gs["w"], not an AttributeError from inside the store
        raise EmberTypeError(f"[GradStore] keys are tensors or tensor ids, got {type(t).__name__}") from None


class GradStore:
    """The gradients ``backward()`` returns, keyed by tensor: ``grads[v]`` is the gradient of ``v``.

    ember keeps gradients here rather than on the tensors (there is no ``v.grad``): ``g =
    loss.backward(); g[w]``, and optimizers take the store (``opt.step(g)``). ``GradStore()`` makes
    an empty one; ``get(t)``, ``gs[t]``, ``t in gs``, ``insert``, ``remove``, ``extend``, ``ids()``,
    ``tensors()``, ``items()`` and ``len()`` read and change it.
    """

    __slots__ = ("_map",)

    def __init__(self):
        self._map = {}  # id -> (tensor, grad)

    def get(self, t):
        """The gradient of tensor ``t``, or None when the store holds none."""
        e = self._map.get(_key(t))
        return None if e is None else e[1]

    def __getitem__(self, t):
        """The gradient of tensor ``t``; raises KeyError when the store holds none."""
        e = self._map.get(_key(t))
        if e is None:
            what = (f"tensor id {t}" if isinstance(t, int) else
                    f"{'Var' if t.is_variable else 'tensor'} of shape {t.shape} and dtype {t.dtype.name} (id {t._id})")
            raise KeyError(f"no gradient reached the {what}: the root does not depend on it, or every op on the "
                           "way gave it none (a custom op's bwd returning None, an integer input); "
                           "gs.get(t) returns None instead of raising")
        return e[1]

    def __contains__(self, t):
        """True when the store holds a gradient for tensor ``t``."""
        return _key(t) in self._map

    def insert(self, t, g):
        """Sets (replaces) the gradient of tensor ``t`` to the tensor ``g``; raises DTypeError for non-tensors."""
        if not hasattr(t, "_id") or not hasattr(g, "_storage"):
            raise EmberTypeError(f"[GradStore] insert expects (Tensor, Tensor), got ({type(t).__name__}, "
                             f"{type(g).__name__})")
        self._map[t._id] = (t, g)

    __setitem__ = insert

    def remove(self, t):
        """Removes and returns the gradient of tensor ``t`` (None when absent)."""
        e = self._map.pop(_key(t), None)
        return None if e is None else e[1]

    def extend(self, other):
        """Adds the gradients of the GradStore ``other`` into this one, summing where both hold one."""
        if not isinstance(other, GradStore):
            raise EmberTypeError(f"[GradStore] extend expects a GradStore, got {type(other).__name__}")
        for k, (t, g) in other._map.items():
            e = self._map.get(k)
            self._map[k] = (t, g) if e is None else (t, e[1] + g)

    def ids(self):
        """The ids (``t.id``) of the tensors the store holds gradients for, a list."""
        return list(self._map)

    def items(self):
        """(tensor, gradient) pairs."""
        return [(t, g) for t, g in self._map.values()]

    def tensors(self):
        """The tensors the store holds gradients for, a list."""
        return [t for t, _ in self._map.values()]

    def __len__(self):
        return len(self._map)

    def __iter__(self):
        return iter(list(self._map))

    def __repr__(self):
        return f"GradStore({len(self._map)} gradients)"


# --------------------------------------------------------------------- backward
_READS_NOTHING = ((), False)

RULES = {}  # op name -> backward rule; filled by @rule in grad_rules.py (and indexing.py, ...)
# Which saved tensors a rule reads, for the in-place check: (input indices or None = all, reads out).
# Rules that only need shapes read nothing, so harmless in-place edits there do not raise.
USES = {}


def rule(name, inputs=None, out=False):
    """Registers fn as the rule of op ``name``; ``inputs``/``out`` say which values it reads."""

    def deco(fn):
        RULES[name] = fn
        USES[name] = _READS_NOTHING if inputs == () and not out else (inputs, out)
        return fn

    return deco


def wanted(t) -> bool:
    """Whether an input should receive a gradient: a float tensor that leads to a variable
    (needs_grad, torch's needs_input_grad), never the 0-d constants that operands.py makes from
    Python scalars (the user has no handle on them)."""
    return t is not None and t._layout is not _SCALAR_LAYOUT and needs_grad(t)


def _check_versions(node, out, uses):
    """Raises when a tensor the rule reads was modified in place after it was recorded."""
    idx, use_out = uses
    versions, inputs = node.versions, node.inputs
    for i in (range(len(inputs)) if idx is None else idx):
        t = inputs[i]
        if t is not None and t._storage.version != versions[i]:
            raise InplaceModifiedError(
                f"[backward] an input of {node.name} was modified in place (version {versions[i]} -> "
                f"{t._storage.version}) after it was saved; its gradient would be wrong. Clone the "
                f"tensor before modifying it, or modify it before the op.")
    if use_out and node.out_version is not None and out._storage.version != node.out_version:
        raise InplaceModifiedError(
            f"[backward] the result of {node.name} was modified in place (version {node.out_version} -> "
            f"{out._storage.version}) after it was saved; its gradient would be wrong. Clone it "
            f"before modifying it.")


def _custom_grads(node, out, g, rule):
    """Calls a custom op's rule and checks what it returns (count, shape, dtype, device)."""
    res = rule(node, out, g)
    n = len(node.inputs)
    if res is None:
        return (None,) * n
    if hasattr(res, "_storage"):
        res = (res,)
    if not isinstance(res, (tuple, list)):  # an array or other iterable is no list of gradients
        raise EmberTypeError(f"[{node.name}] bwd returned a {type(res).__name__}, expected a Tensor, None or a "
                             "tuple of them (wrap an array with em.tensor(arr, device=...))")
    res = tuple(res)
    if len(res) != n:
        raise EmberValueError(f"[{node.name}] bwd returned {len(res)} gradients for {n} inputs")
    for i, (inp, gi) in enumerate(zip(node.inputs, res)):
        if gi is None or inp is None:
            continue
        if not hasattr(gi, "_storage"):
            raise EmberTypeError(f"[{node.name}] bwd returned a {type(gi).__name__} for input {i}, expected a Tensor")
        if gi.shape != inp.shape:
            raise ShapeError(f"[{node.name}] bwd returned a gradient of shape {gi.shape} for input {i} of "
                             f"shape {inp.shape}")
        if gi._dtype is not inp._dtype and inp._dtype.is_float:
            raise DTypeError(f"[{node.name}] bwd returned a {gi._dtype.name} gradient for input {i} of "
                             f"dtype {inp._dtype.name}")
        if gi._device != inp._device:
            raise DeviceError(f"[{node.name}] bwd returned a gradient on {gi._device} for input {i} on "
                             f"{inp._device}")
    return res


def _multi_counts(nodes):
    """Per many-output op in ``nodes``: how many of its outputs the walk will reach, and a slot per
    output for the gradients gathered so far."""
    res = {}
    for t in nodes:
        node = t._op
        if node.rule is MULTI_OUTPUT:
            group = node.saved[0]
            st = res.get(id(group))
            if st is None:
                res[id(group)] = [1, [None] * len(group.shells)]
            else:
                st[0] += 1
    return res


def _multi_rule(node, out, grads):
    group = node.saved[0]
    return group.op.bwd(list(node.inputs), group.outputs(), list(grads))


def _check_multi_versions(node):
    """As _check_versions for every input and every output of a many-output op."""
    _check_versions(node, None, (None, False))
    group = node.saved[0]
    for i, (shell, ver) in enumerate(zip(group.shells, group.out_versions)):
        if shell[0].version != ver:
            raise InplaceModifiedError(
                f"[backward] output {i} of {node.name} was modified in place (version {ver} -> "
                f"{shell[0].version}) after it was saved; its gradient would be wrong. Clone it before "
                f"modifying it.")


def _inputs_used(node, out, used):
    """node's recorded inputs (see _as_recorded), noting in ``used`` the latest version each was read at."""
    res = _recorded_inputs(node, out, used.get(id(out)))
    for inp, ver in zip(res, node.versions):
        if inp is not None and used.get(id(inp), -1) < ver:
            used[id(inp)] = ver
    return res


def _zeros_in_order(t, like, zeroed=True):
    """Zeros of t's shape whose strides run in t's order when t is dense (a permuted view), so that
    the views' backward that follows hands a contiguous gradient on instead of copying. With
    ``zeroed`` False the memory is left as allocated (the caller writes or zeros every element)."""
    shape, stride = t.shape, t._layout.stride
    n = len(shape)
    order = sorted(range(n), key=lambda d: (-stride[d], d))
    dense, step = order != list(range(n)), 1
    for d in reversed(order):
        if shape[d] != 1 and stride[d] != step:
            dense = False
        step *= shape[d]
    if not dense:
        return _new(shape, like, zeroed)
    z = _new([shape[d] for d in order], like, zeroed)
    return z.permute([order.index(i) for i in range(n)])


def _new(shape, like, zeroed):
    if zeroed:
        return zeros(*shape, dtype=like._dtype, device=like._device)
    numel = 1
    for d in shape:
        numel *= d
    dev = like._device
    s = _C.alloc(dev.kind, dev.index, like._dtype.code, numel, False)
    return _wrap(s, _C.Layout.contiguous(list(shape)), like._dtype, like._device)


_ALL = slice(None)


def _whole_row(idx):
    """The int of an index that selects one whole slab of the first dim (``qkv[1]``, ``x[0, :]``), else None."""
    if type(idx) is int:
        return idx
    if (isinstance(idx, tuple) and idx and type(idx[0]) is int
            and all(i is Ellipsis or (type(i) is slice and i == _ALL) for i in idx[1:])):
        return idx[0]
    return None


def _settle(g, owned, unfilled):
    """Zeros what no index wrote of a gradient _index_into allocated unzeroed, before anything reads it or
    writes part of a slab (q, k, v = qkv[0], qkv[1], qkv[2] cover all of qkv's gradient: nothing to zero).
    Until then every region written is a whole slab (_whole_row)."""
    k = id(g._storage)
    z = unfilled.pop(k, None)
    if z is None:
        return
    n = z.shape[0]
    # one fill per run of unwritten slabs (x[5] of a 10^5-row tensor is two fills, not 10^5)
    start = 0
    for c in sorted({_whole_row(r) % n for r in owned[k]}) + [n]:
        if c > start:
            v = z[start:c]
            _C.fill(v._storage, v._layout, 0.0)
        start = c + 1


def _disjoint(i, j):
    """Whether two basic indices surely select disjoint regions: different ints on the first dim
    (q, k, v = qkv[0], qkv[1], qkv[2]), normalised by the dim's size."""
    i0 = i[0] if isinstance(i, tuple) and i else i
    j0 = j[0] if isinstance(j, tuple) and j else j
    return type(i0) is int and type(j0) is int and i0 != j0 and (i0 < 0) == (j0 < 0)


def _index_into(grads, owned, unfilled, inp, g, idx):
    """First-order backward of ``inp[idx]``: g is written into inp's gradient in place when the walk
    owns that buffer (the second and third of q, k, v = qkv[0], qkv[1], qkv[2]), else into a fresh
    buffer laid out as inp is; instead of one zero-filled input-sized tensor per index and a sum of them.
    A fresh buffer for a whole slab of the first dim is left unzeroed: _settle zeros the rest of it
    before it is read."""
    k = id(inp)
    acc = grads.get(k)
    if acc is not None and id(acc[1]._storage) in owned:
        regions = owned[id(acc[1]._storage)]
        view = acc[1][idx]
        if regions is not None and all(_disjoint(idx, r) for r in regions):
            if unfilled and _whole_row(idx) is None:
                _settle(acc[1], owned, unfilled)
            _C.copy_into(g._storage, g._layout, view._storage, view._layout, "index")  # still zeros there
            regions.append(idx)
        else:
            _settle(acc[1], owned, unfilled)
            s = view + g
            _C.copy_into(s._storage, s._layout, view._storage, view._layout, "index")
        return
    lazy = acc is None and inp.ndim > 0 and _whole_row(idx) is not None
    z = _zeros_in_order(inp, g, zeroed=not lazy)
    view = z[idx]
    _C.copy_into(g._storage, g._layout, z._storage, view._layout, "index")
    if acc is None:
        grads[k] = [inp, z]
        owned[id(z._storage)] = [idx]
        if lazy:
            unfilled[id(z._storage)] = z
    else:
        _accumulate(acc, z, owned, unfilled)


def _accumulate(acc, gi, owned, unfilled):
    """acc[1] += gi as a fresh sum, which only this entry holds (the id of the replaced gradient is
    forgotten: a later tensor may reuse it)."""
    if unfilled:
        _settle(acc[1], owned, unfilled)
    owned.pop(id(acc[1]._storage), None)
    acc[1] = acc[1] + gi
    owned[id(acc[1]._storage)] = None


def _fold(node, get, owned, unfilled):
    """For an op whose fused backward can return its first input's gradient plus another tensor
    (``folds_dx``: layer_norm, rms_norm), when that input already holds a gradient (the residual's, in a
    pre-norm block): hands that gradient to the op (``dx_add``) and returns its grads entry, so the sum is
    made in the kernel's pass instead of a separate add. On the CPU only, for a dense gradient like the
    input."""
    op = node.saved
    if not getattr(op, "folds_dx", False) or not node.inputs:
        return None
    x = node.inputs[0]
    acc = get(id(x)) if x is not None else None
    if acc is None or x._device.type != "cpu":
        return None
    a = acc[1]
    if a._dtype is not x._dtype or a._device != x._device or a.shape != x.shape or not a._layout.is_contiguous():
        return None
    if unfilled:
        _settle(a, owned, unfilled)
    op.dx_add = a
    return acc


def backward(root, create_graph=False, seed=None):
    """Gradients of ``root`` (seeded with ones, any shape) with respect to every variable it depends
    on, and only those: rules compute no gradient for an input that leads to no variable (needs_grad).
    With ``create_graph`` the gradients keep their graph (second order); otherwise the walk records
    nothing. Raises NoGradientPath when no variable is reachable. ``seed``: the gradient of root
    instead of ones (torch's ``y.backward(gradient)``), same shape, dtype and device."""
    store = GradStore()
    if not root._dtype.is_float:
        raise DTypeError(f"[backward] expected a float tensor, got {root._dtype.name}")
    if seed is not None and (not hasattr(seed, "_storage") or seed.shape != root.shape
                             or seed._dtype is not root._dtype or seed._device != root._device):
        raise ShapeError(f"[backward] seed must be a tensor like the root ({root.shape}, {root._dtype.name}, "
                         f"{root._device}), got {getattr(seed, 'shape', type(seed).__name__)}")
    nodes, leads = _walk(root)
    if not root.is_variable and not nodes:
        how = "under em.no_grad()" if root._op is None else "from constants only"
        raise NoGradientPath(
            f"[backward] this result depends on no variable (it was made {how}, or every path to a "
            "variable goes through an int or a non-differentiable op); wrap the inputs to differentiate "
            "in em.Var(t)")
    table, uses_of = RULES, USES
    grads = {id(root): [root, ones_like(root) if seed is None else seed]}  # id -> [tensor, grad]
    pop, get = grads.pop, grads.get
    # a graph that reads a rebound tensor resolves its inputs and notes when each was read (_inputs_used)
    ids = _rebinds.ids
    rebound = bool(ids) and any(not ids.isdisjoint(map(id, t._op.inputs)) for t in nodes)
    used = {id(root): root._storage.version} if rebound else None  # id -> last storage version it was used at
    prev, prev_leads = _mode.enabled, _walk_state.leads
    _mode.enabled = bool(create_graph)
    _walk_state.leads = leads
    try:
        multi = None  # id(shared outputs) -> [outputs still to come in `nodes`, their gradients]
        owned = {}  # id(storage) of a gradient only its grads entry holds -> regions maybe non-zero, or None
        unfilled = {}  # id(storage) -> an owned gradient whose regions outside owned's are not zeroed yet
        for t in nodes:
            e = pop(id(t), None)
            if e is None and t._op.rule is not MULTI_OUTPUT:  # no gradient arrived: nothing to propagate
                continue
            g = None if e is None else e[1]
            if owned and g is not None:
                if unfilled:
                    _settle(g, owned, unfilled)
                owned.pop(id(g._storage), None)  # handed to a rule now, which may share it
            node = t._op
            rule = node.rule
            if rule is None and node.name == "index" and not create_graph:
                inp = node.inputs[0] if not rebound else _inputs_used(node, t, used)[0]
                _index_into(grads, owned, unfilled, inp, g, node.saved)
                continue
            if rule is MULTI_OUTPUT:
                if multi is None:
                    multi = _multi_counts(nodes)
                group, i = node.saved
                st = multi[id(group)]
                if g is not None:
                    st[1][i] = g if st[1][i] is None else st[1][i] + g
                st[0] -= 1
                if st[0] or all(x is None for x in st[1]):
                    continue  # the op's bwd runs once, when its last output in the walk is reached
                g = st[1]
            if rule is None:
                fn = table.get(node.name)
                if fn is None:
                    raise BackwardNotSupported(node.name)
                uses = uses_of[node.name]
                if uses is not _READS_NOTHING:
                    _check_versions(node, t, uses)
                # table rules give None to inputs that take no gradient (ints, scalar constants)
                for inp, gi in zip(node.inputs if not rebound else _inputs_used(node, t, used),
                                   fn(node, t, g)):
                    if gi is not None:
                        k = id(inp)
                        acc = get(k)
                        if acc is None:
                            grads[k] = [inp, gi]
                        else:
                            _accumulate(acc, gi, owned, unfilled)
                continue
            if rule is NO_BACKWARD:
                n = len(node.inputs)
                raise BackwardNotSupported(
                    node.name,
                    f"[{node.name}] backward is not supported: this result was made by apply_op{n}_no_bwd, "
                    f"which records no backward rule; use apply_op{n} (it records the op's bwd) or "
                    f"detach() the inputs")
            if rule is MULTI_OUTPUT:
                _check_multi_versions(node)
                rule = _multi_rule
            else:
                _check_versions(node, t, (None, True))
            fold = _fold(node, get, owned, unfilled) if not (create_graph or rebound) else None
            try:
                res = _custom_grads(node, t, g, rule)
            finally:
                if fold is not None and node.saved.dx_add is not None:  # the op did not add it: add below
                    node.saved.dx_add = fold = None
            for i, (inp, gi) in enumerate(zip(node.inputs if not rebound else _inputs_used(node, t, used), res)):
                if gi is None or not wanted(inp):
                    continue
                if not create_graph and gi._op is not None:
                    gi = gi.detach()
                k = id(inp)
                acc = get(k)
                if acc is None:
                    grads[k] = [inp, gi]
                elif i == 0 and acc is fold:  # gi is dx + the gradient acc held: a fresh sum, as _accumulate's
                    owned.pop(id(acc[1]._storage), None)
                    acc[1] = gi
                    owned[id(gi._storage)] = None
                else:
                    _accumulate(acc, gi, owned, unfilled)
        for e in grads.values() if unfilled else ():
            _settle(e[1], owned, unfilled)
    finally:
        _mode.enabled = prev
        _walk_state.leads = prev_leads
    m = store._map
    owners = set()  # storages already handed out: each stored gradient gets its own
    if seed is not None:
        owners.add(id(seed._storage))  # the caller's seed is never stored as a gradient itself
    for t, g in grads.values():
        if t.is_variable:  # only variables: constants got none, intermediates were popped (or pruned)
            if not create_graph and g._op is not None:
                g = g.detach()
            # pass-through rules (add, views, sum's broadcast) can hand one tensor, or views of one
            # storage, to several inputs: materialise so that an in-place update of one gradient
            # (an optimizer, clipping) never changes another
            if id(g._storage) in owners or not g._layout.is_contiguous():
                g = g.copy()
            owners.add(id(g._storage))
            m[t._id] = (t, g)
    return store


def _backward(self, create_graph=False):
    return backward(self, create_graph=create_graph)


METHODS = {"backward": _backward}  # bound onto Tensor by tensor_methods.py (its docstring: tensor_docs.py)
