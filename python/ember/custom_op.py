"""Custom ops written in Python (docs/custom-ops.md): CustomOp1/2/3, InplaceOp1/2/3, device dispatch, output checks."""
from __future__ import annotations

import itertools
import math
import operator

# storage_ext is imported for its effect: CpuStorage.from_numpy/empty and storages' .dtype/.device.
from . import _C, backprop, storage_ext  # noqa: F401
from . import dtypes as _dt
from .backprop import Node, record
from .errors import (
    BackwardNotSupported,
    DeviceError,
    DTypeError,
    EmberError,
    EmberTypeError,
    EmberValueError,
    InplaceModifiedError,
    ShapeError,
    UnsupportedOp,
)
from .reference import bwd_from_reference, reference_grads
from .tensor_type import Tensor, _contig, _wrap

CpuStorage = _C.CpuStorage
_BY_CODE = _dt.BY_CODE
_MAX_RANK = 64  # the core's bound on dims (numpy's)
_FWD_NAMES = tuple(f"{kind}_fwd" for kind in _C.DEVICE_KINDS)  # indexed by the storage's device kind

MetalStorage = getattr(_C, "MetalStorage", None)
if MetalStorage is None:

    class MetalStorage:  # type: ignore[no-redef]
        """Placeholder: this build has no Metal backend, so no MetalStorage can exist."""

        def __new__(cls, *args, **kwargs):
            raise DeviceError("[metal] this build of ember has no Metal backend")


# ----------------------------------------------------------------------------- the op classes
def _default_bwd(self, *args):
    raise BackwardNotSupported(
        self.name,
        f"[{self.name}] custom op {self.name} defines no bwd: add bwd() to {type(self).__name__}, "
        "or detach() its inputs if no gradient is needed",
    )


class _OpBase:
    """What every custom op shares: a name, per-device forwards and the default failures."""

    name = ""
    # Expected output dtype: None means "the first input's dtype"; else an em.DType (or its name),
    # or a callable taking the inputs' dtypes and returning one. A forward returning another
    # dtype is an error, which catches numpy's silent float64 promotion.
    out_dtype = None
    # A custom op may define ``reference(self, *inputs)``: the same math in Tensor ops (slow). With
    # no bwd, backward differentiates it; check_op compares the forward (and bwd) against it.
    reference = None
    _arity = 0
    _has_bwd = False
    _bwd_is_reference = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__:
            return  # the base classes themselves
        if not getattr(cls, "name", ""):
            cls.name = cls.__name__
        # Decided once per class (not per call): check_op skips the gradient check without a bwd.
        # An op with a reference but no bwd gets one that differentiates the reference (reference.py).
        has_ref = getattr(cls, "reference", None) is not None
        own_bwd = getattr(cls, "bwd", _default_bwd)
        if has_ref and (own_bwd is _default_bwd or getattr(own_bwd, "_from_reference", False)) and \
                issubclass(cls, _CustomOpBase):
            cls.bwd = bwd_from_reference(cls._arity)
        cls._bwd_is_reference = getattr(cls.bwd, "_from_reference", False) if hasattr(cls, "bwd") else False
        cls._has_bwd = getattr(cls, "bwd", _default_bwd) is not _default_bwd

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"

    def reference_grads(self, inputs, grads):
        """The gradients of ``reference`` at ``inputs`` for the output gradients ``grads`` (one per
        output, None where none arrives): one Tensor | None per input. The reference is recomputed
        from ``inputs`` and differentiated; under ``backward(create_graph=True)`` the result keeps its
        graph. A ``bwd`` may call it for a path it has no kernel for (ember's fused ops do, for
        second order).

        Args:
            inputs: the op's input tensors, as ``bwd`` received them.
            grads: the gradients flowing into the outputs (a Tensor for a one-output op, or a list).

        Returns:
            list: one gradient (Tensor or None) per input.
        """
        return reference_grads(self, list(inputs), grads)

    def cpu_fwd(self, *args):
        raise UnsupportedOp(f"[{self.name}] no cpu implementation for {self.name}")

    def metal_fwd(self, *args):
        raise UnsupportedOp(f"[{self.name}] no metal implementation for {self.name}")

    def cuda_fwd(self, *args):
        raise UnsupportedOp(f"[{self.name}] no cuda implementation for {self.name}")


class _CustomOpBase(_OpBase):
    bwd = _default_bwd


class CustomOp1(_CustomOpBase):
    """Base class of an op with one input, written in Python: subclass it, then ``y = x.apply_op1(op)``.

    The contract (CustomOp2/3 are the same with more inputs):

    * ``name`` (class attribute): the op's name in errors and in the graph; defaults to the class name.
    * ``cpu_fwd(self, storage, layout) -> (storage, shape)`` (required for CPU tensors): ``storage``
      is the input's ``CpuStorage`` and ``layout`` the ``Layout`` that says how to read it (any
      strides and offset: ``storage.as_numpy(layout)`` is a zero-copy, read-only strided view).
      Return a *new* storage (``em.CpuStorage.from_numpy(arr)`` or ``em.CpuStorage.empty(n, dtype)``)
      holding the output densely in row-major order, and the output's shape.
    * ``metal_fwd(self, storage, layout)`` / ``cuda_fwd(...)``: the same for a tensor on that device;
      the default raises ``EmberError("[name] no metal implementation for name")``.
    * ``out_dtype`` (class attribute): the dtype the forward must return. None (the default) means the
      input's dtype; else an ``em.DType``, its name, or a callable taking the inputs' dtypes. A forward
      returning another dtype raises ``DTypeError`` (this catches numpy's silent float64 promotion).
    * ``bwd(self, arg, res, grad_res) -> Tensor | None``: the gradient with respect to ``arg``, written
      with ordinary Tensor ops (so it is itself differentiable); ``res`` is the forward's output and
      ``grad_res`` the gradient flowing into it. None means "no gradient for this input". Without a
      ``bwd``, a ``backward`` that reaches the op on a path to a variable raises
      ``BackwardNotSupported``.

    What the forward returns is checked: the storage kind and device, the dtype, the element count
    against the shape, and that it shares no memory with an input; each mismatch raises an
    ``EmberError`` subclass whose message starts with ``[name]``.

    ``x.apply_op1_no_bwd(op)`` records no backward rule (a later backward through the result raises).
    ``em.testing.check_op(op, x)`` checks an op: strided inputs, aliasing, dtypes, the gradient
    against finite differences and every available device.

    Example::

        class Softplus(em.CustomOp1):
            name = "softplus"
            def cpu_fwd(self, storage, layout):
                x = storage.as_numpy(layout)
                return em.CpuStorage.from_numpy(np.logaddexp(0, x)), layout.shape
            def bwd(self, arg, res, grad_res):
                return grad_res * em.nn.ops.sigmoid(arg)
    """

    _arity = 1


class CustomOp2(_CustomOpBase):
    """Base class of an op with two inputs: ``y = a.apply_op2(b, op)``.

    ``cpu_fwd(self, s1, l1, s2, l2) -> (storage, shape)`` receives each input's storage and layout;
    both inputs are on one device (else ``DeviceError``). ``bwd(self, arg1, arg2, res, grad_res)``
    returns ``(grad1, grad2)``, each a Tensor shaped like its input or None. Everything else (name,
    out_dtype, metal_fwd, the output checks) is as in ``CustomOp1``.
    """

    _arity = 2


class CustomOp3(_CustomOpBase):
    """Base class of an op with three inputs: ``y = a.apply_op3(b, c, op)``.

    ``cpu_fwd(self, s1, l1, s2, l2, s3, l3) -> (storage, shape)``;
    ``bwd(self, arg1, arg2, arg3, res, grad_res)`` returns ``(grad1, grad2, grad3)``, each a Tensor or
    None. Everything else is as in ``CustomOp1``.
    """

    _arity = 3


class CustomOp(_CustomOpBase):
    """Base class of an op with any number of inputs and outputs: ``outs = em.apply_op(op, *tensors)``.

    * ``cpu_fwd(self, inputs) -> [(storage, shape), ...]``: ``inputs`` is a list with one
      ``(storage, layout)`` pair per input; return one ``(storage, shape)`` per output, each a new
      storage holding that output densely. ``metal_fwd`` / ``cuda_fwd`` take the same arguments.
    * ``out_dtypes`` (class attribute): one entry per output, each as ``CustomOp1.out_dtype`` (None:
      the first input's dtype; an ``em.DType``, its name, or a callable of the input dtypes). None
      (the default) gives every output the first input's dtype.
    * ``non_differentiable``: indices of the outputs that carry no gradient (integer indices, a mask):
      they are returned unrecorded, and ``bwd`` gets None for them.
    * ``mutates``: indices of the inputs the forward writes in place (their ``as_numpy`` views are
      writable during the call). The writes bump each one's version counter, so a later backward
      that needs the old values raises ``InplaceModifiedError``; a mutated input gets no gradient.
      An op that mutates may return no output at all.
    * ``bwd(self, inputs, outputs, grads) -> [Tensor | None, ...]``: tensors; ``grads[i]`` is None
      where no gradient reaches output ``i``. Return one gradient (or None) per input.
    * ``reference(self, *inputs)``: optional, the same math in Tensor ops. Without a ``bwd`` the
      backward differentiates it (recomputed from the saved inputs); with both, ``check_op``
      checks the forward and ``bwd`` against it.

    Everything a forward returns is checked as for ``CustomOp1`` (kind, device, dtype, element
    count, no memory shared with an input), and outputs must not share memory with each other.
    ``em.apply_op`` returns a Tensor for one output and a tuple otherwise.

    Example::

        class SinCos(em.CustomOp):
            name = "sincos"
            def cpu_fwd(self, inputs):
                (s, l), = inputs
                x = s.as_numpy(l)
                return [(em.CpuStorage.from_numpy(np.sin(x)), l.shape),
                        (em.CpuStorage.from_numpy(np.cos(x)), l.shape)]
            def bwd(self, inputs, outputs, grads):
                (x,), (s, c), (gs, gc) = inputs, outputs, grads
                g = 0
                if gs is not None:
                    g = g + gs * c
                if gc is not None:
                    g = g - gc * s
                return [g]

        s, c = em.apply_op(SinCos(), x)
    """

    out_dtypes = None
    non_differentiable = ()
    mutates = ()
    _arity = -1  # any number


class InplaceOp1(_OpBase):
    """Base class of an op that mutates its one operand: ``t.inplace_op1(op)``.

    ``cpu_fwd(self, storage, layout)`` writes the new values through ``storage.as_numpy(layout)``
    (writable for the operand being mutated, during the call) and returns None. The write lands in
    the shared storage, so every view sees it, and bumps the storage's version counter: a later
    ``backward`` that needs the overwritten values raises ``InplaceModifiedError``. A broadcast
    (stride 0) operand is refused. There is no ``bwd``: in-place ops are not differentiated.
    """

    _arity = 1


class InplaceOp2(_OpBase):
    """Base class of an in-place op with a second, read-only operand: ``a.inplace_op2(b, op)``.

    ``cpu_fwd(self, s1, l1, s2, l2)`` mutates the first operand and reads the second, returning None.
    When the operands share memory (``a.inplace_op2(a, op)``) the second is read as it was before the
    write. See ``InplaceOp1``.
    """

    _arity = 2


class InplaceOp3(_OpBase):
    """Base class of an in-place op with two read-only operands: ``a.inplace_op3(b, c, op)``.

    ``cpu_fwd(self, s1, l1, s2, l2, s3, l3)`` mutates the first operand and reads the others, returning
    None. See ``InplaceOp1`` and ``InplaceOp2``.
    """

    _arity = 3


# ----------------------------------------------------------------------------- forward helpers
def _fwd(op, storage):
    """The forward for the device that holds ``storage``."""
    if type(storage) is CpuStorage:
        return op.cpu_fwd
    kind = storage.device_kind
    if kind >= len(_FWD_NAMES):
        raise DeviceError(f"[{op.name}] no forward slot for device kind {kind}")
    return getattr(op, _FWD_NAMES[kind])


def _check_op(op, cls, method):
    if not isinstance(op, cls):
        raise EmberTypeError(f"[{method}] expected a {cls.__name__} instance, got {type(op).__name__}")


def _check_inputs(op, tensors):
    """All operands must be tensors on one device (same storage class and index)."""
    x = tensors[0]
    xs = x._storage
    for i in range(1, len(tensors)):
        t = tensors[i]
        if not isinstance(t, Tensor):
            raise EmberTypeError(f"[{op.name}] input {i} must be a Tensor, got {type(t).__name__}")
        if type(t._storage) is not type(xs) or (type(xs) is not CpuStorage and x._device != t._device):
            raise DeviceError(f"[{op.name}] inputs on different devices: {x._device} and {t._device}")


def _resolve_dtype(op, want, tensors):
    """An op's declared out_dtype (a DType, its name, or a callable of the input dtypes) as a DType."""
    if callable(want):
        want = want(*(t._dtype for t in tensors))
    try:
        return _dt.to_dtype(want)
    except EmberError:
        raise DTypeError(f"[{op.name}] out_dtype gave {want!r}, expected an ember dtype") from None


def _shape_of(op, shape):
    """A forward's returned shape as a tuple of non-negative Python ints."""
    try:  # operator.index, not int(): a 3.5 dim is an error, never silently 3
        # At most one dim past the rank bound is read: the shape may be an endless iterator.
        shape = tuple(operator.index(d) for d in itertools.islice(shape, _MAX_RANK + 1))
    except (TypeError, ValueError):
        raise ShapeError(f"[{op.name}] forward returned shape {shape!r}, expected a tuple of ints") from None
    if len(shape) > _MAX_RANK:
        raise ShapeError(f"[{op.name}] forward returned a shape of more than {_MAX_RANK} dims")
    if any(d < 0 for d in shape):
        raise ShapeError(f"[{op.name}] forward returned a negative dimension in shape {shape}")
    if math.prod(max(d, 1) for d in shape) >= 2**63:  # e.g. (2**64, 2**64, 0): 0 elements, uncountable
        raise ShapeError(f"[{op.name}] forward returned shape {shape}, too large for an int64 element count")
    return shape


def _output(op, res, tensors):
    """Validates what a forward returned and wraps it as the result tensor (the hot path: every
    check is one attribute read or one call into _C)."""
    if type(res) is tuple and len(res) == 2:
        st, shape = res
    else:
        try:
            st, shape = res
        except (TypeError, ValueError):
            raise EmberTypeError(
                f"[{op.name}] a forward must return (storage, shape), got {type(res).__name__}") from None
    return _checked(op, st, shape, op.out_dtype, tensors, "")


def _checked(op, st, shape, want, tensors, which):
    """One returned (storage, shape) checked against the inputs and the wanted dtype (None: the first
    input's), wrapped as a tensor; ``which`` names the output in errors ("" for a one-output op)."""
    x = tensors[0]
    xs = x._storage
    if type(st) is not type(xs):
        if not isinstance(st, _C.Storage):
            raise EmberTypeError(f"[{op.name}] forward returned a {type(st).__name__}{which}, expected a storage")
        raise DeviceError(f"[{op.name}] forward returned a {type(st).__name__}{which} for inputs on {x._device}")
    if type(st) is not CpuStorage and st.device_index != x._device.index:
        raise DeviceError(f"[{op.name}] forward returned a storage{which} on {st.device}, inputs are on {x._device}")
    if want is None:
        want = x._dtype
    elif type(want) is not _dt.DType:
        want = _resolve_dtype(op, want, tensors)
    if st.dtype_code != want.code:
        raise DTypeError(
            f"[{op.name}] forward returned a {_BY_CODE[st.dtype_code].name} storage{which}, expected {want.name} "
            "(convert the result, or declare out_dtype on the op)")
    if type(shape) is not tuple or len(shape) > _MAX_RANK:
        shape = _shape_of(op, shape)
    n = 1
    for d in shape:
        if type(d) is not int or d < 0:
            shape = _shape_of(op, shape)  # numpy ints become ints; negative or non-int dims raise
            n = math.prod(shape)
            break
        n *= d
    if n == 0 and shape:  # only then can a dim exceed the storage's (int64) count: check it slowly
        shape = _shape_of(op, shape)
    if st.numel != n:
        raise ShapeError(
            f"[{op.name}] forward returned a storage{which} of {st.numel} elements for shape {shape} ({n} elements)")
    for i, t in enumerate(tensors):
        if st.same_buffer(t._storage):
            raise EmberValueError(
                f"[{op.name}] forward returned a storage{which} that shares memory with input {i}; return a new "
                "storage (e.g. CpuStorage.from_numpy(result))")
    return _wrap(st, _contig(shape), want, x._device, None, shape)


# ----------------------------------------------------------------------------- backward rules
# The walk (backprop._custom_grads) checks what bwd returns: one Tensor-or-None per input, each
# shaped, typed and placed like its input; None is always accepted.
def _rule1(node, out, grad):
    a, = node.inputs
    return node.saved.bwd(a, out, grad)


def _rule2(node, out, grad):
    a, b = node.inputs
    return node.saved.bwd(a, b, out, grad)


def _rule3(node, out, grad):
    a, b, c = node.inputs
    return node.saved.bwd(a, b, c, out, grad)


def _modified_rule(node, out, grad):
    raise InplaceModifiedError(
        f"[{node.name}] this tensor was modified in place by {node.name} after it was computed, so "
        "backward through it would use the new values; clone() it before the in-place op")


_NO_BWD = backprop.NO_BACKWARD  # the walk raises BackwardNotSupported naming the op and the fixes


# ----------------------------------------------------------------------------- apply (Tensor methods)
def apply_op1(self, op):
    """Runs a custom op on this tensor and records it for backward.

    Args:
        op: a ``CustomOp1`` instance; its forward for this tensor's device runs.

    Returns:
        Tensor: the checked output (see ``CustomOp1`` for the checks).

    Raises:
        DTypeError: ``op`` is not a CustomOp1, or the forward returned the wrong dtype or kind.
        ShapeError: the returned storage does not hold the returned shape.
        UnsupportedOp: the op has no forward for this device.
    """
    if not isinstance(op, CustomOp1):
        _check_op(op, CustomOp1, "apply_op1")
    s = self._storage
    res = (op.cpu_fwd if type(s) is CpuStorage else _fwd(op, s))(s, self._layout)
    return record(_output(op, res, (self,)), op.name, (self,), op, _rule1)


def _apply(ins, op, cls, api, rule):
    """Checks op and operands, runs the device's forward on (storage, layout) pairs, checks the output
    and records it with ``rule`` (the op's bwd, or _NO_BWD)."""
    _check_op(op, cls, api)
    _check_inputs(op, ins)
    args = []
    for t in ins:
        args += (t._storage, t._layout)
    res = _fwd(op, ins[0]._storage)(*args)
    return record(_output(op, res, ins), op.name, ins, op, rule)


def apply_op2(self, other, op):
    """Runs a two-input custom op on ``(self, other)`` and records it for backward.

    Args:
        other: the second input, a Tensor on the same device.
        op: a ``CustomOp2`` instance.

    Returns:
        Tensor: the checked output.

    Raises:
        DeviceError: the inputs are on different devices.
        DTypeError: ``op`` is not a CustomOp2, or the forward returned the wrong dtype or kind.
    """
    return _apply((self, other), op, CustomOp2, "apply_op2", _rule2)


def apply_op3(self, b, c, op):
    """Runs a three-input custom op on ``(self, b, c)`` and records it for backward.

    Args:
        b: the second input, a Tensor on the same device.
        c: the third input, a Tensor on the same device.
        op: a ``CustomOp3`` instance.

    Returns:
        Tensor: the checked output.

    Raises:
        DeviceError: the inputs are on different devices.
        DTypeError: ``op`` is not a CustomOp3, or the forward returned the wrong dtype or kind.
    """
    return _apply((self, b, c), op, CustomOp3, "apply_op3", _rule3)


def apply_op1_no_bwd(self, op):
    """Like ``apply_op1``, recording no backward rule.

    A later ``backward`` that must pass through the result towards a variable raises
    ``BackwardNotSupported`` (use ``apply_op1`` or ``detach()``) instead of dropping the gradient.

    Args:
        op: a ``CustomOp1`` instance.

    Returns:
        Tensor: the checked output.
    """
    return _apply((self,), op, CustomOp1, "apply_op1_no_bwd", _NO_BWD)


def apply_op2_no_bwd(self, other, op):
    """Like ``apply_op2``, recording no backward rule (see ``apply_op1_no_bwd``).

    Args:
        other: the second input.
        op: a ``CustomOp2`` instance.

    Returns:
        Tensor: the checked output.
    """
    return _apply((self, other), op, CustomOp2, "apply_op2_no_bwd", _NO_BWD)


def apply_op3_no_bwd(self, b, c, op):
    """Like ``apply_op3``, recording no backward rule (see ``apply_op1_no_bwd``).

    Args:
        b: the second input.
        c: the third input.
        op: a ``CustomOp3`` instance.

    Returns:
        Tensor: the checked output.
    """
    return _apply((self, b, c), op, CustomOp3, "apply_op3_no_bwd", _NO_BWD)


# ----------------------------------------------------------------------------- in place
def _inplace(op, target, others):
    """Runs an in-place forward on ``target`` reading ``others``; see InplaceOp1."""
    _check_inputs(op, (target,) + others)
    if target.is_variable and target._dtype.is_float and backprop.is_grad_enabled():
        # the rule of v[0] = 5 (and torch's for a leaf that requires grad): the write is not differentiated
        raise UnsupportedOp(f"[{op.name}] an in-place op on a variable (a leaf that tracks gradients) would not be "
                            "differentiated; run it under em.no_grad() (as an optimizer update does), or write "
                            "new values with v.set(t)")
    s, l = target._storage, target._layout
    for d, st in zip(l.shape, l.stride):
        if st == 0 and d > 1:
            raise EmberValueError(f"[{op.name}] cannot write in place through a broadcast (stride 0) view {l!r}")
    args = [s, l]
    for t in others:
        ts, tl = t._storage, t._layout
        if ts is s or ts.same_buffer(s):
            # Snapshot an operand that overlaps the target so it is read as it was before the
            # write (a.inplace_op2(a, add) doubles a); no lock is involved, so nothing can deadlock.
            ts, tl = _C.contiguous(ts, tl)
        args += (ts, tl)
    fwd = _fwd(op, s)
    prev = _C._set_inplace_target(s)  # this thread's as_numpy views of s default to writable
    try:
        res = fwd(*args)
    finally:
        _C._restore_inplace_target(prev)
        s.bump_version()  # even after a failure: the forward may have written part of the data
    if res is not None:
        raise EmberTypeError(
            f"[{op.name}] an in-place forward mutates its first operand and returns None, got {type(res).__name__}")
    node = target._op
    if node is not None:
        # target's own backward rule may read its (now overwritten) values: make that loud.
        target._op = Node(op.name, node.inputs, None, node.versions, _modified_rule)


def inplace_op1(self, op):
    """Runs an in-place custom op on this tensor (see ``InplaceOp1``).

    The write lands in the shared storage (every view sees it) and bumps its version counter.

    Args:
        op: an ``InplaceOp1`` instance.

    Raises:
        DTypeError: ``op`` is not an InplaceOp1, or its forward returned something other than None.
        EmberValueError: the tensor is a broadcast (stride 0) view.
    """
    _check_op(op, InplaceOp1, "inplace_op1")
    _inplace(op, self, ())


def inplace_op2(self, other, op):
    """Runs an in-place custom op on this tensor, reading ``other`` (see ``InplaceOp2``).

    Args:
        other: the read-only operand, a Tensor on the same device; read as it was before the write
            even when it shares memory with ``self``.
        op: an ``InplaceOp2`` instance.

    Raises:
        DTypeError: ``op`` is not an InplaceOp2, or its forward returned something other than None.
        DeviceError: the operands are on different devices.
    """
    _check_op(op, InplaceOp2, "inplace_op2")
    _inplace(op, self, (other,))


def inplace_op3(self, b, c, op):
    """Runs an in-place custom op on this tensor, reading ``b`` and ``c`` (see ``InplaceOp3``).

    Args:
        b: the first read-only operand.
        c: the second read-only operand.
        op: an ``InplaceOp3`` instance.

    Raises:
        DTypeError: ``op`` is not an InplaceOp3, or its forward returned something other than None.
        DeviceError: the operands are on different devices.
    """
    _check_op(op, InplaceOp3, "inplace_op3")
    _inplace(op, self, (b, c))


METHODS = {_f.__name__: _f for _f in (  # bound onto Tensor by tensor_methods.py
    apply_op1, apply_op2, apply_op3, apply_op1_no_bwd, apply_op2_no_bwd, apply_op3_no_bwd,
    inplace_op1, inplace_op2, inplace_op3)}
