"""Tensor indexing: t[idx] reads (basic indices as views; masks and index arrays through
index_select) and t[idx] = value writes (slice_set, elementwise select, index_copy), with torch's rules
for where advanced indices' dims go; under autograd a write rebinds t to the written result; and the
index ops: index_select, gather, index_add, scatter_add, slice_set, fill_."""
from __future__ import annotations

import numbers

import numpy as np

from . import _C
from . import backprop as _bp
from . import dtypes as _dt
from .argorder import bind
from .args import float_arg, i64_arg
from .backprop import SETITEM, _rebinds, is_grad_enabled, no_grad, record, rule, tracks, wanted
from .backprop import rule as _rule
from .backprop import wanted as _wanted
from .creation import full, tensor
from .errors import EmberError, EmberValueError, IndexOutOfRange, ShapeError, UnsupportedOp
from .grad_rules import _scatter_view, _zeros
from .multi import where
from .operands import _as_index
from .reduce import _sum_to
from .tensor_type import Tensor, _broadcast_shape, _check_tensor_arg, _dim, _index_np, _wrap


def getitem(t, idx):
    """t[idx]: a view for basic indices (ints, slices, None, ...); for a mask or index arrays, a new tensor
    (through index_select, so differentiable) whose array dims sit where torch puts them."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    if len(idx) == 1 and _is_mask(idx[0]):
        return _select_mask(t, idx[0])
    for i in idx:
        if _is_scalar_bool(i):
            return _getitem_scalar_bools(t, idx)
    adv = _split_advanced(idx, t.ndim, "index") if _may_be_advanced(idx) else None
    if adv is not None:
        _, view, d, flat, rows = _advanced_plan(t, adv, "index")
        try:
            picked = view.index_select(flat, d)
        except EmberError as e:  # an index out of range
            raise _as_op(e, "index_select", "index") from None
        # the indices' dims take the place of the dim they index (torch's rule)
        vs = view.shape
        return picked if len(rows) == 1 else picked.reshape(*vs[:d], *rows, *vs[d + 1:])
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if sum(1 for i in idx if i is Ellipsis) > 1:
        raise IndexOutOfRange("[index] an index can only have a single ellipsis")
    if n_real > t.ndim:
        raise IndexOutOfRange(f"[index] too many indices ({n_real}) for a tensor with {t.ndim} dims")
    layout, dim, src = t._layout, 0, 0  # dim: in the layout being built; src: the dim of t it reads
    for i in idx:
        if i is Ellipsis:
            dim += t.ndim - n_real
            src += t.ndim - n_real
        elif i is None:
            layout = layout.unsqueeze(dim)
            dim += 1
        elif isinstance(i, slice):
            size = layout.shape[dim]
            try:  # slice.indices clamps like Python, so 2**70 or -2**70 cannot overflow int64 below
                start, stop, step = i.indices(size)
            except (TypeError, ValueError) as e:
                raise IndexOutOfRange(f"[index] invalid slice {i!r}: {e}") from None
            if step < 1:
                raise EmberValueError(f"[index] slice step must be >= 1, got {step} (ember's views have no negative "
                                      "strides; for a reversed copy use t.flip(dim))")
            # slice.indices clamps start/stop but not step; any step past the size picks one element
            layout = layout.slice(dim, start, max(start, stop), min(step, 2**63 - 1))
            dim += 1
            src += 1
        elif isinstance(i, (numbers.Integral, np.integer)) and not isinstance(i, bool) or (
                isinstance(i, Tensor) and not i._dtype.is_float and i._dtype is not _dt.bool and i.ndim == 0):
            v, size = int(i) if not isinstance(i, Tensor) else int(i.item()), layout.shape[dim]
            if not -size <= v < size:  # named after t's own dim (the layout's dims shift as ints drop them)
                raise IndexOutOfRange(f"[index] index {v} out of range for dim {src} of size {size}")
            layout = layout.select(dim, v)
            src += 1
        else:
            raise IndexOutOfRange(f"[index] unsupported index {i!r} (use ints, slices, None, ...)")
    return t._view(layout, "index", idx)  # the rule replays idx on zeros

def setitem(t, idx, value):
    """t[idx] = value: an in-place write into t's storage (every view sees it, as with slice_set) for
    basic indices (ints, slices, None, ...), 0/1 masks and integer index arrays; value broadcasts to
    what idx selects, as in torch (t[mask] = v takes one value per selected element, in row-major
    order, or broadcasts to them). A repeated index keeps its last value, as in numpy. When t or the
    value tracks gradients the write is recorded (see _setitem_recorded)."""
    if is_grad_enabled() and t._dtype.is_float and (tracks(t) or (isinstance(value, Tensor) and tracks(value))):
        return _setitem_recorded(t, idx, value)
    single = idx[0] if isinstance(idx, tuple) and len(idx) == 1 else idx
    idx_t = idx if isinstance(idx, tuple) else (idx,)
    if _is_mask(single):
        if isinstance(single, Tensor):  # an ember mask (a comparison's result) stays in ember
            _check_mask_shape(single.shape, t.shape, "setitem")
            scalar = isinstance(value, (numbers.Number, np.generic)) or (isinstance(value, Tensor) and not value.ndim)
            # a scalar fits any count; else count the set positions (any nonzero value counts once)
            mt, m, count = single, None, 1 if scalar else int(single.ne(0).sum().item())
        else:
            m = _mask_array(single, t.shape, "setitem")
            mt, count = tensor(m.astype(np.uint8), device=t._device), int(np.count_nonzero(m))
        rest = t.shape[mt.ndim:]
        value = _setitem_value(value, t._dtype, t._device, (count,) + rest)
        if value.ndim <= len(rest) or value.shape[0] == 1:
            # one value (or sub-tensor) for every selected position: an elementwise select, two passes
            v = value.reshape(value.shape[1:]) if value.ndim > len(rest) else value
            with no_grad():
                keep = mt.reshape(*mt.shape, *(1,) * len(rest))
                return _slice_set_as(t, where(keep, v, t), "setitem")
        # a value per selected element (so not a scalar: count is exact): write them where the mask is set
        m = mt.numpy() if m is None else m
        with no_grad():
            plan = t, t.reshape(m.size, *rest), 0, \
                tensor(np.flatnonzero(m).astype(np.int64), device=t._device), (count,)
        return _write_selected(t, plan, value)
    adv = _split_advanced(idx_t, t.ndim, "setitem") if _may_be_advanced(idx_t) else None
    if adv is not None:
        with no_grad():
            plan = _advanced_plan(t, adv, "setitem")
        return _write_selected(t, plan, value)
    with no_grad():
        target = t[idx]  # a view sharing t's storage
    src = _setitem_value(value, target._dtype, target._device, target.shape)
    if target.ndim == 0:
        target, src = target.unsqueeze(0), src.reshape(1)
    _slice_set_as(target, src.broadcast_as(target.shape) if src.shape != target.shape else src, "setitem")

def _setitem_recorded(t, idx, value):
    """t[idx] = value under autograd, as torch records it: the values are written in place (views see
    them, and a saved tensor of this storage that the write overwrites raises in backward, by the
    version counter), and t becomes the written result in the graph: a node whose inputs are t as it was
    (a shell keeping its old node; the gradient there is zero where written) and the value (the
    gradient gathered at idx, summed over broadcast). Nodes recorded before the write keep reading the
    old t (backprop._as_recorded). Refused for a variable (a leaf: torch refuses too) and for a view
    whose base would change unseen by the graph."""
    if t.is_variable:
        raise UnsupportedOp("[setitem] in-place assignment into a Var (a leaf that tracks gradients) would "
                            "replace the values its gradient is for; write into a copy (y = v.clone(); y[idx] = "
                            "value), or assign under em.no_grad()")
    node = t._op
    if node is not None and node.name != SETITEM and any(i is not None and i._storage is t._storage
                                                         for i in node.inputs):
        raise UnsupportedOp(f"[setitem] this tensor is a view ({node.name}) of one that tracks gradients: the write "
                            "would change that tensor unseen by its graph; index the base tensor instead, or "
                            "clone the view first")
    lay = t._layout
    if node is None and not (lay.is_contiguous() and lay.start_offset == 0 and lay.numel() == t._storage.numel):
        raise UnsupportedOp("[setitem] writing a value that tracks gradients into part of a larger storage "
                            "(a view) would change the other tensors of that storage unseen by the graph; "
                            "index the whole tensor (buf[i, j] = v rather than buf[i][j] = v)")
    with no_grad():
        shape = getitem(t, idx).shape  # what idx selects (and every index check, before anything is written)
    src = _setitem_value(value, t._dtype, t._device, shape)
    old = _wrap(t._storage, t._layout, t._dtype, t._device)
    old._op = node
    src_version = src._storage.saved_version
    pre = t._storage.version
    with no_grad():
        setitem(t, idx, src)
    t._op = None
    record(t, SETITEM, (old, src), (idx, pre))
    if t._op is not None:  # the value was read before the write (t[0] = t[1] reads t's old row)
        t._op.versions = (t._op.versions[0], src_version)
        _rebinds.add(t)


@_rule(SETITEM, ())
def _setitem_rule(n, out, g):
    old, src = n.inputs
    idx = n.saved[0]
    go = gv = None
    if _wanted(old):
        go = g.copy()
        go[idx] = 0.0  # the written positions came from the value (recorded again under create_graph)
    if _wanted(src):
        gv = _sum_to(g[idx], src.shape)
    return go, gv


def _is_scalar_bool(i):
    """A 0-d mask: a Python or numpy bool, a 0-d bool array, or a 0-d bool (a comparison's result) or
    uint8 tensor."""
    if isinstance(i, (bool, np.bool_)):
        return True
    if isinstance(i, np.ndarray):
        return i.ndim == 0 and i.dtype == np.bool_
    return isinstance(i, Tensor) and i.ndim == 0 and (i._dtype is _dt.bool or i._dtype is _dt.uint8)


def _getitem_scalar_bools(t, idx):
    """t[idx] where idx holds 0-d masks: each adds a dim of size 1 (true) or 0 (false), as in numpy
    and torch (t[True] is t[None]; t[False] selects nothing)."""
    if _may_be_advanced(tuple(i for i in idx if not _is_scalar_bool(i))):
        raise UnsupportedOp("[index] a 0-d mask (True/False) cannot be combined with index arrays or masks")
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis and not _is_scalar_bool(i))
    basic, empty, out_dim = [], [], 0
    for i in idx:
        if _is_scalar_bool(i):
            if not bool(i.item() if isinstance(i, (Tensor, np.ndarray)) else i):
                empty.append(out_dim)
            basic.append(None)
            out_dim += 1
        else:
            basic.append(i)
            if i is Ellipsis:
                out_dim += max(t.ndim - n_real, 0)
            elif i is None or isinstance(i, slice):
                out_dim += 1
    out = getitem(t, tuple(basic))
    for d in empty:
        out = out.narrow(d, 0, 0)
    return out

def _write_selected(t, plan, value):
    """Writes value (broadcast to the selection's shape) at an _advanced_plan's positions: in place
    when the indexed dims merge as a view of t, else into a contiguous copy of the indexed view,
    written back whole."""
    pre, merged, d, flat, sel = plan
    ms = merged.shape
    rows = ms[:d] + sel + ms[d + 1:]
    src = _setitem_value(value, t._dtype, t._device, rows)
    if src.shape != rows:
        src = src.broadcast_as(rows)
    src = src.reshape(*ms[:d], flat.shape[0], *ms[d + 1:])
    if merged.numel() == 0 or merged._storage.same_buffer(t._storage):
        _C.index_copy(merged._storage, merged._layout, flat._storage, flat._layout, src._storage, src._layout, d)
        return
    with no_grad():
        work = pre.contiguous()
        target = work.reshape(*ms)
    _C.index_copy(target._storage, target._layout, flat._storage, flat._layout, src._storage, src._layout, d)
    _slice_set_as(pre, work, "setitem")

def _select_mask(t, mask):
    """t[mask]: the elements (or sub-tensors) where a 0/1 mask over t's leading dims is set, in
    row-major order, as in torch and numpy; a new tensor, differentiable through index_select."""
    m = _mask_array(mask, t.shape, "index")
    flat = t.reshape(m.size, *t.shape[m.ndim:])
    return flat.index_select(tensor(np.flatnonzero(m).astype(np.int64), device=t._device), 0)

def _setitem_value(value, dtype, device, shape):
    """The value of t[idx] = value as a tensor of t's dtype that broadcasts to shape (what idx selects)."""
    if not isinstance(value, Tensor):
        if isinstance(value, (numbers.Number, np.generic)) and not isinstance(value, complex):
            return full((), value, dtype=dtype, device=device)
        try:
            value = tensor(value, device=device)
        except EmberError as e:  # a string, a ragged list...
            raise _as_op(e, "tensor", "setitem") from None
    if value._dtype is not dtype:
        value = value.to_dtype(dtype)
    if value.ndim > len(shape) and all(n == 1 for n in value.shape[:value.ndim - len(shape)]):
        value = value.reshape(value.shape[value.ndim - len(shape):])  # numpy/torch drop leading size-1 dims
    if _broadcast_shape(value.shape, shape) != shape:
        raise ShapeError(f"[setitem] value of shape {value.shape} cannot be broadcast to {shape}")
    return value

def _may_be_advanced(idx):
    """A cheap first look for basic indexing's hot path: can an entry be an index array or a mask?"""
    for i in idx:
        if isinstance(i, (list, np.ndarray, Tensor)):
            return True
    return False

def _as_op(e, inner, op):
    """The EmberError e raised by the internal op `inner`, re-made under the op the user wrote."""
    return type(e)(str(e).replace(f"[{inner}]", f"[{op}]", 1))

def _slice_set_as(target, src, op):
    """target.slice_set(src, 0, 0), its errors (a broadcast target, say) named after the op the user wrote."""
    try:
        target.slice_set(src, 0, 0)
    except EmberError as e:
        raise _as_op(e, "slice_set", op) from None

def _split_advanced(idx, ndim, op):
    """For an index tuple holding index arrays or 1-D masks among basic entries (ints, slices, None, ...):
    (the basic tuple with a full slice in each array's place, the dims of that view the arrays index,
    the arrays, the masks' lengths or None). None when idx holds no index array, or is a lone mask
    (which has its own path and may span several dims). A mask becomes the positions where it is set."""
    pos = [k for k, i in enumerate(idx) if _is_mask(i) or _is_index_array(i)]
    if not pos or (len(idx) == 1 and _is_mask(idx[0])):
        return None
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    dims, arrays, mask_lens, d = [], [], [], 0
    for k, i in enumerate(idx):
        if k in pos:
            n = None
            if _is_mask(i):
                m = i.numpy() if isinstance(i, Tensor) else np.asarray(i)
                if m.ndim != 1:
                    raise UnsupportedOp(f"[{op}] a mask next to other indices must be 1-D, got shape {m.shape}")
                i, n = np.flatnonzero(m), m.shape[0]
            dims.append(d)
            arrays.append(i)
            mask_lens.append(n)
            d += 1
        elif i is Ellipsis:
            d += max(ndim - n_real, 0)
        elif i is None or isinstance(i, slice):
            d += 1
    basic = tuple(slice(None) if k in pos else i for k, i in enumerate(idx))
    return basic, dims, arrays, mask_lens

def _advanced_plan(t, adv, op):
    """How t[idx] with index arrays reads and writes: (the indexed view of t, that view with the indexed
    dims merged into one (a view, or a copy when they do not merge), the dim d0 of it that the arrays
    index, the flat int64 positions along d0, the arrays' broadcast shape S). Several arrays index the
    view's dims merged into one (moved to the front first when they are not adjacent: torch's rule),
    through their row-major positions; the result has S in place of d0."""
    basic, dims, arrays, mask_lens = adv
    n_real = sum(1 for i in basic if i is not None and i is not Ellipsis)
    if n_real > t.ndim:
        raise IndexOutOfRange(f"[{op}] too many indices ({n_real}) for a tensor with {t.ndim} dims")
    view = t[basic]
    for d, n in zip(dims, mask_lens):
        if n is not None and n != view.shape[d]:
            raise ShapeError(f"[{op}] mask of length {n} does not match dim {d} of size {view.shape[d]}")
    if len(arrays) == 1:
        ids = _as_index(arrays[0], op, t._device)
        return view, view, dims[0], ids.reshape(-1) if ids.ndim != 1 else ids, ids.shape
    arrs = []
    for a, d in zip(arrays, dims):
        a = _index_np(a.numpy() if isinstance(a, Tensor) else a, op)
        n = view.shape[d]
        bad = (a < -n) | (a >= n)
        if bad.any():
            raise IndexOutOfRange(f"[{op}] index {a[bad].flat[0]} out of range for a dim of size {n}")
        arrs.append(np.where(a < 0, a + n, a))
    try:
        arrs = np.broadcast_arrays(*arrs)
    except ValueError:
        raise ShapeError(f"[{op}] index arrays of shapes {[a.shape for a in arrs]} do not broadcast") from None
    k = len(dims)
    if dims != list(range(dims[0], dims[0] + k)):  # separated by a slice: their dims go first
        view = view.permute(*dims, *[d for d in range(view.ndim) if d not in dims])
        dims = list(range(k))
    d0, vs = dims[0], view.shape
    sizes = vs[d0:d0 + k]
    merged = view.reshape(*vs[:d0], int(np.prod(sizes)), *vs[d0 + k:])
    lin = np.ravel_multi_index(tuple(arrs), sizes) if arrs[0].size else np.zeros(arrs[0].shape, np.int64)
    flat = tensor(np.ascontiguousarray(lin, dtype=np.int64).reshape(-1), device=t._device)
    return view, merged, d0, flat, arrs[0].shape

def _is_index_array(i):
    """An integer index array (list, numpy array or ember tensor with at least one dim) that picks rows of
    dim 0; call after _is_mask, which claims bool and uint8 tensors and bool arrays."""
    return isinstance(i, (list, np.ndarray)) or (isinstance(i, Tensor) and i.ndim > 0)

def _is_mask(i):
    """A boolean mask index: a bool tensor (a comparison's result) or a uint8 0/1 tensor, 1-D or more, or
    a bool array or list. numpy uint8 arrays stay integer indices, as in numpy."""
    if isinstance(i, Tensor):
        return (i._dtype is _dt.bool or i._dtype is _dt.uint8) and i.ndim > 0
    if isinstance(i, np.ndarray):
        return i.dtype == np.bool_ and i.ndim > 0
    if isinstance(i, list) and i:
        return np.asarray(i).dtype == np.bool_
    return False

def _check_mask_shape(mshape, shape, op):
    """A mask must cover the leading dims of the indexed shape exactly."""
    if len(mshape) > len(shape) or tuple(mshape) != shape[:len(mshape)]:
        raise ShapeError(f"[{op}] mask of shape {tuple(mshape)} does not match the leading dims of {shape}")

def _mask_array(mask, shape, op):
    """A mask index as a numpy array, checked against the leading dims of the indexed shape."""
    m = mask.numpy() if isinstance(mask, Tensor) else np.asarray(mask)
    _check_mask_shape(m.shape, shape, op)
    return m


# ----------------------------------------------------------------------------- index ops
def _index_add_zeros(shape, ids, src, dim):
    """zeros(shape).index_add(ids, src, dim) without copying the zeros; not recorded (backward rules)."""
    s, l = _C.index_add_zeros(list(shape), ids._storage, ids._layout, src._storage, src._layout, dim)
    return _wrap(s, l, src._dtype, src._device)


def _scatter_add_zeros(shape, ids, src, dim):
    """zeros(shape).scatter_add(ids, src, dim) without copying the zeros; not recorded."""
    s, l = _C.scatter_add_zeros(list(shape), ids._storage, ids._layout, src._storage, src._layout, dim)
    return _wrap(s, l, src._dtype, src._device)


def index_select(self, *args, **kwargs):
    a = bind("index_select", args, kwargs, ("indices", "dim"), ("dim", "indices"))
    return self._index_select(a["indices"], a["dim"])

def _index_select(self, indices, dim):
    dim = _dim(dim, self.ndim, "index_select")
    ids = _as_index(indices, "index_select", self._device)
    s, l = _C.index_select(self._storage, self._layout, ids._storage, ids._layout, dim)
    return record(_wrap(s, l, self._dtype, self._device), "index_select", (self, ids), dim)

def gather(self, *args, **kwargs):
    a = bind("gather", args, kwargs, ("indices", "dim"), ("dim", "indices"))
    return self._gather(a["indices"], a["dim"])

def _gather(self, indices, dim):
    dim = _dim(dim, self.ndim, "gather")
    ids = _as_index(indices, "gather", self._device)
    s, l = _C.gather(self._storage, self._layout, ids._storage, ids._layout, dim)
    return record(_wrap(s, l, self._dtype, self._device), "gather", (self, ids), dim)

def index_add(self, *args, alpha=1, **kwargs):
    """Out of place: a copy of self with source's slices added at indices along dim.

    Takes ember's order ``index_add(indices, source, dim)`` or torch's ``index_add(dim, index,
    source, alpha=1)``, told apart by the argument types (torch's starts with the int dim).

    Args:
        *args: ``(indices, source, dim)`` or ``(dim, index, source)``.
        alpha: ``source`` is multiplied by it first (torch's argument).
        **kwargs: the same by name (``indices``/``index``, ``source``/``src``, ``dim``).

    Raises:
        EmberTypeError: arguments that fit neither order.
    """
    a = bind("index_add", args, kwargs, ("indices", "source", "dim"), ("dim", "indices", "source"))
    source = a["source"]
    if alpha != 1:
        _check_tensor_arg(source, "index_add", "source")
        source = source * alpha
    return self._index_add(a["indices"], source, a["dim"])

def _index_add(self, indices, source, dim):
    dim = _dim(dim, self.ndim, "index_add")
    ids = _as_index(indices, "index_add", self._device)
    _check_tensor_arg(source, "index_add", "source")
    s, l = _C.index_add(self._storage, self._layout, ids._storage, ids._layout,
                        source._storage, source._layout, dim)
    return record(_wrap(s, l, self._dtype, self._device), "index_add", (self, ids, source), dim)

def scatter_add(self, *args, **kwargs):
    """Out of place: a copy of self with source added at indices along dim (torch semantics).

    Takes ember's order ``scatter_add(indices, source, dim)`` or torch's ``scatter_add(dim, index,
    src)``, told apart by the argument types (torch's starts with the int dim).

    Args:
        *args: ``(indices, source, dim)`` or ``(dim, index, src)``.
        **kwargs: the same by name (``indices``/``index``, ``source``/``src``, ``dim``).

    Raises:
        EmberTypeError: arguments that fit neither order.
    """
    a = bind("scatter_add", args, kwargs, ("indices", "source", "dim"), ("dim", "indices", "source"))
    return self._scatter_add(a["indices"], a["source"], a["dim"])

def _scatter_add(self, indices, source, dim):
    dim = _dim(dim, self.ndim, "scatter_add")
    ids = _as_index(indices, "scatter_add", self._device)
    _check_tensor_arg(source, "scatter_add", "source")
    s, l = _C.scatter_add(self._storage, self._layout, ids._storage, ids._layout,
                          source._storage, source._layout, dim)
    return record(_wrap(s, l, self._dtype, self._device), "scatter_add", (self, ids, source), dim)

def slice_set(self, src, dim, offset):
    """Writes src into self at [offset, offset + src.shape[dim]) along dim; every view sees it."""
    dim = _dim(dim, self.ndim, "slice_set")
    if self.ndim == 0:  # normalize_dim accepted dim 0, but a scalar has no dim to slice
        raise ShapeError("[slice_set] cannot slice_set into a 0-d tensor")
    offset = i64_arg(offset, "slice_set", "offset")
    if not isinstance(src, Tensor):  # lists / arrays, like Var.set
        src = tensor(src, dtype=self._dtype, device=self._device)
    if src.ndim != self.ndim:
        raise ShapeError(f"[slice_set] src has shape {src.shape}, expected {self.ndim} dims like {self.shape}")
    if offset < 0 or offset + src.shape[dim] > self.shape[dim]:
        raise IndexOutOfRange(f"[slice_set] offset {offset} + length {src.shape[dim]} out of range for dim "
                              f"{dim} of size {self.shape[dim]}")
    dst = self._layout.narrow(dim, offset, src.shape[dim])
    for d, st in zip(dst.shape, dst.stride):  # several elements share one address: the last write would win
        if st == 0 and d > 1:
            raise EmberValueError(f"[slice_set] cannot write into a broadcast (stride 0) view {self._layout!r}")
    s_st, s_l = src._storage, src._layout
    if s_st.same_buffer(self._storage):  # snapshot an aliasing source so the write reads old values
        s_st, s_l = _C.contiguous(s_st, s_l)
    _C.copy_into(s_st, s_l, self._storage, dst, "slice_set")

def zero_set(self):
    _C.fill(self._storage, self._layout, 0.0)

def fill_(self, value):
    _C.fill(self._storage, self._layout, float_arg(value, "fill_", "value"))
    return self


def _getitem(self, idx):
    return getitem(self, idx)


def _setitem(self, idx, value):
    setitem(self, idx, value)


# ----------------------------------------------------------------------------- backward rules
@rule("index", ())
def _index_bwd(n, out, g):
    return (_scatter_view(g, n.inputs[0].shape, n.saved),)


@rule("index_scatter", ())
def _index_scatter_bwd(n, out, g):
    return (g[n.saved],)


# ----- selection and indexing
@rule("where", (2,))
def _where_bwd(n, out, g):
    a, b, cond = n.inputs
    ga = _sum_to(where(cond, g, 0.0), a.shape) if wanted(a) else None
    gb = _sum_to(where(cond, 0.0, g), b.shape) if wanted(b) else None
    return ga, gb, None


@rule("index_select", (1,))
def _index_select_bwd(n, out, g):
    x, ids = n.inputs
    if not _bp.is_grad_enabled():  # first order: add straight into fresh zeros (an embedding table's
        return (_index_add_zeros(x.shape, ids, g, n.saved), None)  # size is not copied once more)
    return (_zeros(x.shape, g).index_add(ids, g, n.saved), None)


@rule("gather", (1,))
def _gather_bwd(n, out, g):
    x, ids = n.inputs
    if not _bp.is_grad_enabled():
        return (_scatter_add_zeros(x.shape, ids, g, n.saved), None)
    return (_zeros(x.shape, g).scatter_add(ids, g, n.saved), None)


@rule("index_add", (1,))
def _index_add_bwd(n, out, g):
    x, ids, src = n.inputs
    return (g if wanted(x) else None, None, g.index_select(ids, n.saved) if wanted(src) else None)


@rule("scatter_add", (1,))
def _scatter_add_bwd(n, out, g):
    x, ids, src = n.inputs
    # the core requires src.shape == ids.shape, so gathering back gives src's shape
    return (g if wanted(x) else None, None, g.gather(ids, n.saved) if wanted(src) else None)


@rule("cat", ())
def _cat_bwd(n, out, g):
    dim, sizes = n.saved
    res, off = [], 0
    for t, k in zip(n.inputs, sizes):
        res.append(g.narrow(dim, off, k) if wanted(t) else None)
        off += k
    return tuple(res)


METHODS = {  # bound onto Tensor by tensor_methods.py
    "__getitem__": _getitem, "__setitem__": _setitem,
    "index_select": index_select, "_index_select": _index_select, "gather": gather, "_gather": _gather,
    "index_add": index_add, "_index_add": _index_add, "scatter_add": scatter_add, "_scatter_add": _scatter_add,
    "slice_set": slice_set, "zero_set": zero_set, "fill_": fill_,
}
