"""Reductions (sum, max, min, argmax, argmin, mean, logsumexp) and matmul, the one contraction."""
from __future__ import annotations

import numpy as np

from . import _C
from . import dtypes as _dt
from .args import bool_arg
from .backprop import RULES, USES, no_grad, record, rule, wanted
from .creation import tensor, zeros_like
from .errors import DTypeError, EmberTypeError
from .multi import where
from .tensor_type import REDUCE, Tensor, _dims, _wrap


def _reduce(self, name, dim, keepdim):
    dims = _dims(dim, self.ndim, name)
    keepdim = bool_arg(keepdim, name, "keepdim")
    op, dtype = REDUCE[name], self._dtype
    if name == "sum" and not self._dtype.is_float and self._dtype is not _dt.int64:
        # Integer sums are int64, as in torch: counting a uint8 mask ((pred == y).sum()) must not
        # wrap at 256. (candle keeps u8 here, and its accuracy counts wrap.) The kernel adds the
        # narrow values into int64 where they lie, without an int64 copy of the input.
        op, dtype = REDUCE["sum_i64"], _dt.int64
    lay, mult = self._layout, 1
    st = lay.stride
    if 0 in st and name != "argmax" and name != "argmin" and lay.numel() > 0:
        # A broadcast (stride-0) reduced dim repeats one value: reduce a single copy of it in place
        # (a sum then scales by the count), never the expanded view (2**31 elements of zeros(1)).
        for d in dims:
            if st[d] == 0 and lay.shape[d] > 1:
                mult *= lay.shape[d]
                lay = lay.narrow(d, 0, 1)
    s, l = _C.reduce(op, self._storage, lay, dims, keepdim)
    if mult != 1 and name == "sum":
        with no_grad():
            r = _wrap(s, l, dtype, self._device)
            r = r.affine(float(mult), 0.0) if dtype.is_float else r * mult  # ints: exact, wrapping as int64 does
        s, l = r._storage, r._layout
    if name in ("argmax", "argmin"):
        return _wrap(s, l, _dt.int64, self._device)
    return record(_wrap(s, l, dtype, self._device), name, (self,), (tuple(dims), keepdim))

def _sum(self, dim=None, keepdim=False): return self._reduce("sum", dim, keepdim)
def _max(self, dim=None, keepdim=False): return self._reduce("max", dim, keepdim)
def _min(self, dim=None, keepdim=False): return self._reduce("min", dim, keepdim)
def argmax(self, dim=None, keepdim=False): return self._reduce("argmax", dim, keepdim)
def argmin(self, dim=None, keepdim=False): return self._reduce("argmin", dim, keepdim)

def mean(self, dim=None, keepdim=False):
    dims = _dims(dim, self.ndim, "mean")
    n = 1
    for d in dims:
        n *= self.shape[d]
    if not self._dtype.is_float:
        raise DTypeError(f"[mean] expected a float dtype, got {self._dtype.name}")
    return self.sum(dims, keepdim).affine(1.0 / n if n else float("nan"), 0.0)

def logsumexp(self, dim=None, keepdim=False):
    dims = _dims(dim, self.ndim, "logsumexp")
    with no_grad():
        m = self.max(dims, keepdim=True)
        m = where(m.abs().lt(float("inf")), m, zeros_like(m))  # all -inf rows stay -inf, not nan
    out = (self - m).exp().sum(dims, keepdim=True).log() + m
    return out if keepdim else out.squeeze_dims(dims)

def squeeze_dims(self, dims):
    t = self
    for d in sorted(dims, reverse=True):
        t = t.squeeze(d)
    return t

def matmul(self, other):
    if not isinstance(other, Tensor):
        if not isinstance(other, (np.ndarray, list)):  # numpy's matmul would take it and return an array
            raise EmberTypeError(f"[matmul] unsupported operand type {type(other).__name__}")
        other = tensor(other, dtype=self._dtype, device=self._device)
    s, l = _C.matmul(self._storage, self._layout, other._storage, other._layout)
    return record(_wrap(s, l, self._dtype, self._device), "matmul", (self, other))

__matmul__ = matmul

def __rmatmul__(self, other):
    if not isinstance(other, (np.ndarray, list)):
        raise EmberTypeError(f"[matmul] unsupported operand type {type(other).__name__}")
    return tensor(other, dtype=self._dtype, device=self._device).matmul(self)


def _sum_to(g, shape):
    """Sums a broadcast gradient back to an operand's shape (numpy broadcasting rules)."""
    gs = g.shape
    if gs == shape:
        return g
    lead = len(gs) - len(shape)
    dims = list(range(lead)) + [lead + i for i, n in enumerate(shape) if n == 1 and gs[lead + i] != 1]
    if dims:
        g = g.sum(dims, keepdim=True)
    return g.reshape(shape) if g.shape != shape else g


# ----------------------------------------------------------------------------- backward rules
# ----- reductions
def _keep_shape(shape, dims):
    return tuple(1 if i in dims else s for i, s in enumerate(shape))


@rule("sum", ())
def _sum_bwd(n, out, g):
    dims, keepdim = n.saved
    shape = n.inputs[0].shape
    if not keepdim:
        g = g.reshape(_keep_shape(shape, dims))
    return (g.broadcast_as(shape) if g.shape != shape else g,)


def _extremum_bwd(n, out, g):
    """max/min: the gradient goes to the elements equal to the result, split evenly among ties."""
    x = n.inputs[0]
    dims, keepdim = n.saved
    if not keepdim:
        ks = _keep_shape(x.shape, dims)
        g, out = g.reshape(ks), out.reshape(ks)
    hit = x.eq(out).to_dtype(x._dtype)
    return (hit * (g / hit.sum(dims, keepdim=True)),)


RULES["max"] = RULES["min"] = _extremum_bwd
USES["max"] = USES["min"] = ((0,), True)


# ----- matmul
@rule("matmul", (0, 1))
def _matmul_bwd(n, out, g):
    a, b = n.inputs
    # 1-D operands become (1, k) / (k, 1) matrices; the dims matmul dropped come back in g
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(1) if b.ndim == 1 else b
    if b.ndim == 1:
        g = g.unsqueeze(-1)
    if a.ndim == 1:
        g = g.unsqueeze(-2)
    ga = gb = None
    if wanted(a):
        if _col_major(a2) and g.ndim == 2:  # a is W.t(): (b @ g^T)^T lands in W's own row-major order
            ga = b2.matmul(g.transpose(0, 1)).transpose(0, 1)
        else:
            ga = _sum_to(g.matmul(b2.transpose(-1, -2)), a2.shape)
        if a.ndim == 1:
            ga = ga.reshape(a.shape)
    if wanted(b):
        if _col_major(b2) and g.ndim == 2:  # Linear's x @ W.t(): W's gradient comes out contiguous, no copy
            gb = g.transpose(0, 1).matmul(a2).transpose(0, 1)
        else:
            gb = _sum_to(a2.transpose(-1, -2).matmul(g), b2.shape)
        if b.ndim == 1:
            gb = gb.reshape(b.shape)
    return ga, gb


def _col_major(t):
    """A 2-D dense transposed view (``W.t()`` of a row-major W): its gradient is best computed
    transposed, so that the transpose's backward hands W a contiguous gradient."""
    if t.ndim != 2:
        return False
    (r, c), (sr, sc) = t.shape, t._layout.stride
    return r > 1 and c > 1 and sr == 1 and sc == r


METHODS = {  # bound onto Tensor by tensor_methods.py
    "_reduce": _reduce, "sum": _sum, "max": _max, "min": _min, "argmax": argmax, "argmin": argmin, "mean": mean,
    "logsumexp": logsumexp, "squeeze_dims": squeeze_dims, "matmul": matmul, "__matmul__": __matmul__,
    "__rmatmul__": __rmatmul__,
}
