"""The backward rules: one short function per recorded op, written with ordinary Tensor ops so that
second order works. Each takes (node, out, grad) and returns one gradient (or None) per input.

Each registers itself in backprop.RULES through @rule; tensor_methods.py imports this module.
"""
from __future__ import annotations

import math

from . import _C
from . import backprop as _bp
from .backprop import _READS_NOTHING, RULES, USES, record, rule, wanted  # noqa: F401  (the table, re-exported)
from .creation import zeros
from .indexing import _index_add_zeros, _scatter_add_zeros
from .multi import where
from .reduce import _sum_to
from .tensor_type import _wrap


def _zeros(shape, like):
    return zeros(shape, dtype=like._dtype, device=like._device)


def _mask(cond, g):
    """g where cond holds, else 0 (differentiable in g, exact for inf/nan elsewhere)."""
    return where(cond, g, 0.0)


_FUSED = getattr(_C, "fused", None)


def _fused_bwd(kind, a, g):
    """act'(.) * g in one fused CPU kernel (``a`` is the input, or the result for sigmoid) when no
    graph is being built; None otherwise, and the rule falls back to its differentiable form."""
    if _bp._mode.enabled or _FUSED is None or a._device.type != "cpu" or g._device.type != "cpu":
        return None
    s = getattr(_FUSED, kind + "_bwd")(a._storage, a._layout, g._storage, g._layout)
    return _wrap(s, _C.Layout.contiguous(list(a.shape)), a._dtype, a._device)


def _scatter_view(g, shape, idx):
    """Zeros of ``shape`` with g written into the region ``zeros[idx]`` (the adjoint of basic
    indexing); recorded as ``index_scatter`` so that second order goes back through indexing."""
    z = _zeros(shape, g)
    view = z[idx]
    _C.copy_into(g._storage, g._layout, z._storage, view._layout, "index")
    return record(z, "index_scatter", (g,), idx)


# --------------------------------------------------------------------- views and copies
@rule("copy", ())
def _copy(n, out, g):
    return (g,)


@rule("to_dtype", ())
def _to_dtype(n, out, g):
    return (g.to_dtype(n.saved),)


@rule("to_device", ())
def _to_device(n, out, g):
    return (g.to_device(n.saved),)


@rule("transpose", ())
def _transpose(n, out, g):
    return (g.transpose(*n.saved),)


@rule("permute", ())
def _permute(n, out, g):
    inv = [0] * len(n.saved)
    for i, d in enumerate(n.saved):
        inv[d] = i
    return (g.permute(inv),)


@rule("narrow", ())
def _narrow(n, out, g):
    dim, start, length = n.saved
    shape = n.inputs[0].shape
    if start == 0 and length == shape[dim]:
        return (g,)
    return (_scatter_view(g, shape, (slice(None),) * dim + (slice(start, start + length),)),)


@rule("reshape", ())
def _reshape(n, out, g):
    return (g.reshape(n.saved),)


@rule("broadcast_as", ())
def _broadcast_as(n, out, g):
    return (_sum_to(g, n.saved),)


@rule("index", ())
def _index(n, out, g):
    return (_scatter_view(g, n.inputs[0].shape, n.saved),)


@rule("index_scatter", ())
def _index_scatter(n, out, g):
    return (g[n.saved],)


# --------------------------------------------------------------------- unary
@rule("exp", (), out=True)
def _exp(n, out, g):
    return (g * out,)


@rule("log", (0,))
def _log(n, out, g):
    return (g / n.inputs[0],)


@rule("sin", (0,))
def _sin(n, out, g):
    return (g * n.inputs[0].cos(),)


@rule("cos", (0,))
def _cos(n, out, g):
    return (g * n.inputs[0].sin().neg(),)


@rule("tanh", (), out=True)
def _tanh(n, out, g):
    return (g * out.sqr().affine(-1.0, 1.0),)


@rule("sqrt", (), out=True)
def _sqrt(n, out, g):
    return (g / out.affine(2.0, 0.0),)


@rule("sqr", (0,))
def _sqr(n, out, g):
    return (g * n.inputs[0].affine(2.0, 0.0),)


@rule("abs", (0,))
def _abs(n, out, g):
    return (g * n.inputs[0].sign(),)  # sign(0) = 0: abs'(0) = 0, like torch


@rule("neg", ())
def _neg(n, out, g):
    return (g.neg(),)


@rule("recip", (), out=True)
def _recip(n, out, g):
    return (g * out.sqr().neg(),)


@rule("relu", (0,))
def _relu(n, out, g):
    return (_mask(n.inputs[0].gt(0.0), g),)  # relu'(0) = 0, like torch


_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


@rule("gelu", (0,))
def _gelu(n, out, g):
    x = n.inputs[0]  # exact gelu: x * Phi(x); derivative Phi(x) + x * phi(x)
    fast = _fused_bwd("gelu", x, g)
    if fast is not None:
        return (fast,)
    cdf = x.affine(_INV_SQRT2, 0.0).erf().affine(0.5, 0.5)
    pdf = x.sqr().affine(-0.5, 0.0).exp().affine(_INV_SQRT_2PI, 0.0)
    return (g * (cdf + x * pdf),)


@rule("silu", (0,))
def _silu(n, out, g):
    x = n.inputs[0]
    fast = _fused_bwd("silu", x, g)
    if fast is not None:
        return (fast,)
    s = x.sigmoid()  # silu' = s * (1 + x * (1 - s))
    return (g * (s * (x * s.affine(-1.0, 1.0)).affine(1.0, 1.0)),)


@rule("erf", (0,))
def _erf(n, out, g):
    return (g * n.inputs[0].sqr().affine(-1.0, 0.0).exp().affine(_TWO_OVER_SQRT_PI, 0.0),)


@rule("sigmoid", (), out=True)
def _sigmoid(n, out, g):
    fast = _fused_bwd("sigmoid", out, g)
    if fast is not None:
        return (fast,)
    return (g * (out * out.affine(-1.0, 1.0)),)


@rule("affine", ())
def _affine(n, out, g):
    return (g.affine(n.saved[0], 0.0),)


@rule("powf", (0,))
def _powf(n, out, g):
    e = n.saved
    if e == 0.0:
        return (g.affine(0.0, 0.0),)
    if e == 1.0:
        return (g,)
    return (g * n.inputs[0].powf(e - 1.0).affine(e, 0.0),)


@rule("clamp", (0,))
def _clamp(n, out, g):
    lo, hi = n.saved
    x = n.inputs[0]
    return (_mask(x.ge(lo) * x.le(hi), g),)  # inclusive bounds pass the gradient, like torch


@rule("log1p", (0,))
def _log1p(n, out, g):
    return (g / n.inputs[0].affine(1.0, 1.0),)


@rule("expm1", (), out=True)
def _expm1(n, out, g):
    return (g * out.affine(1.0, 1.0),)


@rule("rsqrt", (), out=True)
def _rsqrt(n, out, g):
    return (g * (out * out.sqr()).affine(-0.5, 0.0),)  # d/dx x^(-1/2) = -x^(-3/2) / 2


@rule("log2", (0,))
def _log2(n, out, g):
    return (g / n.inputs[0].affine(math.log(2.0), 0.0),)


@rule("log10", (0,))
def _log10(n, out, g):
    return (g / n.inputs[0].affine(math.log(10.0), 0.0),)


@rule("tan", (), out=True)
def _tan(n, out, g):
    return (g * out.sqr().affine(1.0, 1.0),)


@rule("sinh", (0,))
def _sinh(n, out, g):
    return (g * n.inputs[0].cosh(),)


@rule("cosh", (0,))
def _cosh(n, out, g):
    return (g * n.inputs[0].sinh(),)


@rule("asin", (0,))
def _asin(n, out, g):
    return (g * n.inputs[0].sqr().affine(-1.0, 1.0).rsqrt(),)


@rule("acos", (0,))
def _acos(n, out, g):
    return (g * n.inputs[0].sqr().affine(-1.0, 1.0).rsqrt().neg(),)


@rule("atan", (0,))
def _atan(n, out, g):
    return (g / n.inputs[0].sqr().affine(1.0, 1.0),)


# --------------------------------------------------------------------- binary (numpy broadcasting)
@rule("add", ())
def _add(n, out, g):
    a, b = n.inputs
    return (_sum_to(g, a.shape) if wanted(a) else None, _sum_to(g, b.shape) if wanted(b) else None)


@rule("sub", ())
def _sub(n, out, g):
    a, b = n.inputs
    return (_sum_to(g, a.shape) if wanted(a) else None, _sum_to(g.neg(), b.shape) if wanted(b) else None)


@rule("mul", (0, 1))
def _mul(n, out, g):
    a, b = n.inputs
    return (_sum_to(g * b, a.shape) if wanted(a) else None, _sum_to(g * a, b.shape) if wanted(b) else None)


@rule("div", (0, 1))
def _div(n, out, g):
    a, b = n.inputs
    ga = _sum_to(g / b, a.shape) if wanted(a) else None
    gb = _sum_to((g * a / b.sqr()).neg(), b.shape) if wanted(b) else None
    return ga, gb


@rule("remainder", (0, 1))
def _remainder(n, out, g):
    # a % b = a - b * floor(a / b): d/da = 1, d/db = -floor(a / b) (floor's own gradient is zero)
    a, b = n.inputs
    ga = _sum_to(g, a.shape) if wanted(a) else None
    gb = _sum_to(g * (a // b).neg(), b.shape) if wanted(b) else None
    return ga, gb


def _minmax_weights(a, b, first_wins):
    """Weight of a's side: 1 where a wins, 0.5 on ties (the gradient is shared evenly), else 0."""
    win = a.gt(b) if first_wins else a.lt(b)
    dt = a._dtype
    return win.to_dtype(dt) + a.eq(b).to_dtype(dt).affine(0.5, 0.0)


def _minmax(n, g, first_wins):
    a, b = n.inputs
    ga = g * _minmax_weights(a, b, first_wins)
    gb = g - ga
    return (_sum_to(ga, a.shape) if wanted(a) else None, _sum_to(gb, b.shape) if wanted(b) else None)


@rule("maximum", (0, 1))
def _maximum(n, out, g):
    return _minmax(n, g, True)


@rule("minimum", (0, 1))
def _minimum(n, out, g):
    return _minmax(n, g, False)


@rule("pow", (0, 1), out=True)
def _pow(n, out, g):
    a, b = n.inputs
    ga = gb = None
    if wanted(a):  # b * a^(b-1), zero where b == 0 (torch's convention)
        ga = _sum_to(where(b.eq(0.0), 0.0, g * b * (a ** (b - 1.0))), a.shape)
    if wanted(b):  # a^b * log(a), zero where a == 0 and b >= 0 (torch's convention)
        gb = _sum_to(where(a.eq(0.0) * b.ge(0.0), 0.0, g * out * a.log()), b.shape)
    return ga, gb


# --------------------------------------------------------------------- reductions
def _keep_shape(shape, dims):
    return tuple(1 if i in dims else s for i, s in enumerate(shape))


@rule("sum", ())
def _sum(n, out, g):
    dims, keepdim = n.saved
    shape = n.inputs[0].shape
    if not keepdim:
        g = g.reshape(_keep_shape(shape, dims))
    return (g.broadcast_as(shape) if g.shape != shape else g,)


def _extremum(n, out, g):
    """max/min: the gradient goes to the elements equal to the result, split evenly among ties."""
    x = n.inputs[0]
    dims, keepdim = n.saved
    if not keepdim:
        ks = _keep_shape(x.shape, dims)
        g, out = g.reshape(ks), out.reshape(ks)
    hit = x.eq(out).to_dtype(x._dtype)
    return (hit * (g / hit.sum(dims, keepdim=True)),)


RULES["max"] = RULES["min"] = _extremum
USES["max"] = USES["min"] = ((0,), True)


# --------------------------------------------------------------------- matmul
@rule("matmul", (0, 1))
def _matmul(n, out, g):
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
        ga = _sum_to(g.matmul(b2.transpose(-1, -2)), a2.shape)
        if a.ndim == 1:
            ga = ga.reshape(a.shape)
    if wanted(b):
        gb = _sum_to(a2.transpose(-1, -2).matmul(g), b2.shape)
        if b.ndim == 1:
            gb = gb.reshape(b.shape)
    return ga, gb


# --------------------------------------------------------------------- selection and indexing
@rule("where", (2,))
def _where(n, out, g):
    a, b, cond = n.inputs
    ga = _sum_to(where(cond, g, 0.0), a.shape) if wanted(a) else None
    gb = _sum_to(where(cond, 0.0, g), b.shape) if wanted(b) else None
    return ga, gb, None


@rule("index_select", (1,))
def _index_select(n, out, g):
    x, ids = n.inputs
    if not _bp.is_grad_enabled():  # first order: add straight into fresh zeros (an embedding table's
        return (_index_add_zeros(x.shape, ids, g, n.saved), None)  # size is not copied once more)
    return (_zeros(x.shape, g).index_add(ids, g, n.saved), None)


@rule("gather", (1,))
def _gather(n, out, g):
    x, ids = n.inputs
    if not _bp.is_grad_enabled():
        return (_scatter_add_zeros(x.shape, ids, g, n.saved), None)
    return (_zeros(x.shape, g).scatter_add(ids, g, n.saved), None)


@rule("index_add", (1,))
def _index_add(n, out, g):
    x, ids, src = n.inputs
    return (g if wanted(x) else None, None, g.index_select(ids, n.saved) if wanted(src) else None)


@rule("scatter_add", (1,))
def _scatter_add(n, out, g):
    x, ids, src = n.inputs
    # the core requires src.shape == ids.shape, so gathering back gives src's shape
    return (g if wanted(x) else None, None, g.gather(ids, n.saved) if wanted(src) else None)


@rule("cat", ())
def _cat(n, out, g):
    dim, sizes = n.saved
    res, off = [], 0
    for t, k in zip(n.inputs, sizes):
        res.append(g.narrow(dim, off, k) if wanted(t) else None)
        off += k
    return tuple(res)
