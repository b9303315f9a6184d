"""Views and copies: dtype/device conversion, contiguous copies, transpose, permute, narrow, squeeze,
broadcast, reshape/view, flatten. Each view shares the storage and records its op."""
from __future__ import annotations

from . import _C
from . import dtypes as _dt
from .args import i64_arg
from .backprop import record, rule
from .errors import ShapeError
from .grad_rules import _scatter_view
from .reduce import _sum_to
from .tensor_type import Tensor, _dim, _shape_arg, _wrap


def to_dtype(self, dtype) -> Tensor:
    dtype = _dt.to_dtype(dtype)
    if dtype is self._dtype:
        return self
    s, l = _C.to_dtype(self._storage, self._layout, dtype.code)
    out = _wrap(s, l, dtype, self._device)
    if self._dtype.is_float:  # casts from ints are pruned
        record(out, "to_dtype", (self,), self._dtype)
    return out

astype = to_dtype

def to_device(self, device) -> Tensor:
    device = _dt.to_device(device)
    if device == self._device:
        return self
    s, l = _C.to_device(self._storage, self._layout, device.kind, device.index)
    out = _wrap(s, l, self._dtype, device)
    if self._dtype.is_float:
        record(out, "to_device", (self,), self._device)
    return out

def contiguous(self) -> Tensor:
    return self if self._layout.is_contiguous() else self.copy()

def copy(self) -> Tensor:
    """A copy in a new storage, on every device (never aliases); differentiable."""
    s, l = _C.contiguous(self._storage, self._layout)
    return record(_wrap(s, l, self._dtype, self._device), "copy", (self,))

clone = copy

def detach(self) -> Tensor:
    """Shares the storage, drops the op (and variable-ness)."""
    return _wrap(self._storage, self._layout, self._dtype, self._device)

def _view(self, layout, name, saved=None):
    out = _wrap(self._storage, layout, self._dtype, self._device)
    return record(out, name, (self,), saved)

def transpose(self, d0, d1):
    d0, d1 = i64_arg(d0, "transpose", "dim"), i64_arg(d1, "transpose", "dim")
    return self._view(self._layout.transpose(d0, d1), "transpose", (d0, d1))

def t(self):
    if self.ndim < 2:
        raise ShapeError(f"[t] expected at least 2 dims, got shape {self.shape}")
    return self.transpose(-2, -1)

@property
def T(self):
    return self.permute(*reversed(range(self.ndim)))

def permute(self, *dims):
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    dims = tuple(i64_arg(d, "permute", "dim") for d in dims)
    layout = self._layout.permute(list(dims))
    return self._view(layout, "permute", tuple(_C.normalize_dim(d, self.ndim, "permute") for d in dims))

def narrow(self, dim, start, length):
    dim = _dim(dim, self.ndim, "narrow")
    start, length = i64_arg(start, "narrow", "start"), i64_arg(length, "narrow", "length")
    return self._view(self._layout.narrow(dim, start, length), "narrow", (dim, start, length))

def squeeze(self, dim=None):
    if dim is None:
        t = self
        for d in reversed(range(self.ndim)):
            if self.shape[d] == 1:
                t = t.squeeze(d)
        return t
    dim = _dim(dim, self.ndim, "squeeze")
    return self._view(self._layout.squeeze(dim), "reshape", self.shape)

def unsqueeze(self, dim):
    return self._view(self._layout.unsqueeze(i64_arg(dim, "unsqueeze", "dim")), "reshape", self.shape)

def broadcast_as(self, *shape):
    shape = _shape_arg(shape, "broadcast_as")
    return self._view(self._layout.broadcast_as(list(shape)), "broadcast_as", self.shape)

def broadcast_left(self, *shape):
    return self.broadcast_as(_shape_arg(shape, "broadcast_as") + self.shape)

def reshape(self, *shape):
    shape = _C.resolve_reshape(list(_shape_arg(shape, "reshape")), self.numel())
    layout = self._layout.reshape(shape)
    if layout is not None:
        return self._view(layout, "reshape", self.shape)
    s, l = _C.contiguous(self._storage, self._layout)
    out = _wrap(s, l.reshape(shape), self._dtype, self._device)
    return record(out, "reshape", (self,), self.shape)

def view(self, *shape):
    """This tensor in a new shape, always as a view of the same storage (torch's rule).

    Args:
        *shape: the new shape (ints or one tuple); one dim may be -1.

    Returns:
        A view sharing this tensor's storage, differentiable.

    Raises:
        ShapeError: when the element counts differ, or the layout cannot be seen in that shape
            without a copy (``reshape`` copies there).
    """
    shape = _C.resolve_reshape(list(_shape_arg(shape, "view")), self.numel())
    layout = self._layout.reshape(shape)
    if layout is None:
        raise ShapeError(f"[view] a tensor of shape {self.shape} and strides {self._layout.stride} cannot be "
                         f"viewed as {tuple(shape)} without a copy; use reshape (copies when it must) or "
                         "contiguous() first")
    return self._view(layout, "reshape", self.shape)

def flatten(self, start_dim=0, end_dim=-1):
    if self.ndim == 0:
        return self.reshape(1)
    s = _dim(start_dim, self.ndim, "flatten")
    e = _dim(end_dim, self.ndim, "flatten")
    shape = self.shape
    n = 1
    for d in shape[s : e + 1]:
        n *= d
    return self.reshape(shape[:s] + (n,) + shape[e + 1 :])

def flatten_all(self):
    return self.reshape(-1)



# ----------------------------------------------------------------------------- backward rules
# ----- views and copies
@rule("copy", ())
def _copy_bwd(n, out, g):
    return (g,)


@rule("to_dtype", ())
def _to_dtype_bwd(n, out, g):
    return (g.to_dtype(n.saved),)


@rule("to_device", ())
def _to_device_bwd(n, out, g):
    return (g.to_device(n.saved),)


@rule("transpose", ())
def _transpose_bwd(n, out, g):
    return (g.transpose(*n.saved),)


@rule("permute", ())
def _permute_bwd(n, out, g):
    inv = [0] * len(n.saved)
    for i, d in enumerate(n.saved):
        inv[d] = i
    return (g.permute(inv),)


@rule("narrow", ())
def _narrow_bwd(n, out, g):
    dim, start, length = n.saved
    shape = n.inputs[0].shape
    if start == 0 and length == shape[dim]:
        return (g,)
    return (_scatter_view(g, shape, (slice(None),) * dim + (slice(start, start + length),)),)


@rule("reshape", ())
def _reshape_bwd(n, out, g):
    return (g.reshape(n.saved),)


@rule("broadcast_as", ())
def _broadcast_as_bwd(n, out, g):
    return (_sum_to(g, n.saved),)


METHODS = {  # bound onto Tensor by tensor_methods.py
    "to_dtype": to_dtype, "astype": astype, "to_device": to_device, "contiguous": contiguous, "copy": copy,
    "clone": clone, "detach": detach, "_view": _view, "transpose": transpose, "t": t, "T": T, "permute": permute,
    "narrow": narrow, "squeeze": squeeze, "unsqueeze": unsqueeze, "broadcast_as": broadcast_as,
    "broadcast_left": broadcast_left, "reshape": reshape, "view": view, "flatten": flatten,
    "flatten_all": flatten_all,
}
