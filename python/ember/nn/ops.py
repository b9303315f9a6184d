"""Fused ops (docs/fused-ops.md): CustomOps over the C++ fused kernels (_C.fused), plus composite references.

Each op's forward is one fused kernel. Its backward, during an ordinary ``backward()``, is one fused
kernel too; under ``backward(create_graph=True)`` the same gradients are written with Tensor ops
instead, so second-order derivatives work. Saved statistics (rstd, mean, logsumexp) live on the op
instance, which the graph keeps. ``sdpa``'s ``mask`` is an attribute of the op, not an input: it
never receives a gradient.
"""
from __future__ import annotations

import math

from .. import _C
from ..args import float_arg
from ..backprop import is_grad_enabled, tracks
from ..custom_op import CustomOp1, CustomOp2, CustomOp3
from ..errors import DeviceError, DTypeError, EmberTypeError, ShapeError
from ..tensor import UNARY, Tensor, _contig, _dim, _wrap, arange, full, where

_F = _C.fused

__all__ = [  # noqa: RUF022  (grouped: fused ops, then the composite references)
    "sigmoid", "silu", "gelu", "softmax", "softmax_last_dim", "log_softmax", "rms_norm", "layer_norm",
    "sdpa", "softmax_slow", "log_softmax_slow", "rms_norm_slow", "layer_norm_slow", "sdpa_slow",
]


def _out(storage, shape, like: Tensor) -> Tensor:
    """A plain (unrecorded) tensor over a new dense storage, typed and placed like ``like``."""
    shape = tuple(shape)
    return _wrap(storage, _contig(shape), like._dtype, like._device, None, shape)


def _sum_leading(t: Tensor) -> Tensor:
    """Sums every dim but the last (the weight/bias gradient of a norm)."""
    return t.sum(tuple(range(t.ndim - 1))) if t.ndim > 1 else t


def _check_tensor(x, op, what="input"):
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor {what}, got {type(x).__name__}")


# ----------------------------------------------------------------------------- activations
class _Act(CustomOp1):
    """sigmoid / silu / gelu: the forward is the built-in unary kernel, the backward a fused one."""

    kind = ""

    def cpu_fwd(self, storage, layout):
        return _C.unary(UNARY[self.kind], storage, layout, 0.0, 0.0), layout.shape

    # One call path for every device: _C.fused and _C.unary take a storage of any device, so the
    # forward (and the fused backward) is the same call everywhere.
    metal_fwd = cuda_fwd = cpu_fwd

    def bwd(self, x, res, g):
        if not is_grad_enabled():
            a = res if self.kind == "sigmoid" else x  # sigmoid' is written in terms of its output
            st = getattr(_F, self.kind + "_bwd")(a._storage, a._layout, g._storage, g._layout)
            return _out(st, x.shape, x)
        return g * self._dfdx(x, res)


class _Sigmoid(_Act):
    name = kind = "sigmoid"

    @staticmethod
    def _dfdx(x, y):
        return y * (1.0 - y)


class _Silu(_Act):
    name = kind = "silu"

    @staticmethod
    def _dfdx(x, y):
        s = sigmoid(x)
        return s * (1.0 + x * (1.0 - s))


class _Gelu(_Act):
    name = kind = "gelu"

    @staticmethod
    def _dfdx(x, y):
        cdf = (x * (1.0 / math.sqrt(2.0))).erf() * 0.5 + 0.5
        pdf = (x * x * -0.5).exp() * (1.0 / math.sqrt(2.0 * math.pi))
        return cdf + x * pdf


def sigmoid(x: Tensor) -> Tensor:
    """The logistic function ``1 / (1 + exp(-x))``, fused forward and backward.

    Args:
        x: a float tensor (f32, f16, bf16, f64; any strides and offset).

    Returns:
        Tensor: same shape and dtype; differentiable (the backward is one fused kernel too).

    Raises:
        DTypeError: ``x`` is not a float tensor.
    """
    _check_tensor(x, "sigmoid")
    return x.apply_op1(_Sigmoid())


def silu(x: Tensor) -> Tensor:
    """``x * sigmoid(x)`` (swish), fused forward and backward.

    Args:
        x: a float tensor (f32, f16, bf16, f64; any strides and offset).

    Returns:
        Tensor: same shape and dtype; differentiable (the backward is one fused kernel too).

    Raises:
        DTypeError: ``x`` is not a float tensor.
    """
    _check_tensor(x, "silu")
    return x.apply_op1(_Silu())


def gelu(x: Tensor) -> Tensor:
    """The exact (erf) gelu ``x * Phi(x)``, torch's default, fused forward and backward.

    Args:
        x: a float tensor (f32, f16, bf16, f64; any strides and offset).

    Returns:
        Tensor: same shape and dtype; differentiable (the backward is one fused kernel too).

    Raises:
        DTypeError: ``x`` is not a float tensor.
    """
    _check_tensor(x, "gelu")
    return x.apply_op1(_Gelu())


# ----------------------------------------------------------------------------- softmax
class _Softmax(CustomOp1):
    name = "softmax_last_dim"
    log = False

    def cpu_fwd(self, storage, layout):
        return _F.softmax_fwd(storage, layout, self.log), layout.shape

    metal_fwd = cuda_fwd = cpu_fwd

    def bwd(self, x, y, g):
        if not is_grad_enabled():
            st = _F.softmax_bwd(y._storage, y._layout, g._storage, g._layout, self.log)
            return _out(st, x.shape, x)
        if self.log:
            return g - y.exp() * g.sum(-1, keepdim=True)
        return y * (g - (g * y).sum(-1, keepdim=True))


class _LogSoftmax(_Softmax):
    name = "log_softmax_last_dim"
    log = True


def _last_dim_apply(x, dim, op_cls, name):
    """Runs a last-dim kernel over ``dim`` through a transposed view (no copy)."""
    _check_tensor(x, name)
    if x.ndim == 0:
        raise ShapeError(f"[{name}] expected at least 1 dim, got a scalar")
    d = _dim(dim, x.ndim, name)
    if d == x.ndim - 1:
        return x.apply_op1(op_cls())
    return x.transpose(d, -1).apply_op1(op_cls()).transpose(d, -1)


def softmax_last_dim(x: Tensor) -> Tensor:
    """``softmax(x, -1)``, candle's name: the softmax over the last dim, one fused kernel.

    Args:
        x: a float tensor.

    Returns:
        Tensor: same shape and dtype; differentiable.
    """
    return _last_dim_apply(x, -1, _Softmax, "softmax")


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """``exp(x) / sum(exp(x))`` over ``dim``, as one fused kernel (f16/bf16 accumulate in f32).

    Args:
        x: a float tensor (f32, f16, bf16, f64; any strides and offset).
        dim: the dim to normalise over (negative counts from the end).

    Returns:
        Tensor: same shape and dtype; differentiable (the backward is one fused kernel; under
        ``create_graph=True`` a composite, so second derivatives work).

    Raises:
        DTypeError: ``x`` is not a float tensor.
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _last_dim_apply(x, dim, _Softmax, "softmax")


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """``x - logsumexp(x)`` over ``dim``, as one fused kernel.

    Args:
        x: a float tensor (f32, f16, bf16, f64; any strides and offset).
        dim: the dim to normalise over (negative counts from the end).

    Returns:
        Tensor: same shape and dtype; differentiable (the backward is one fused kernel; under
        ``create_graph=True`` a composite, so second derivatives work).

    Raises:
        DTypeError: ``x`` is not a float tensor.
        IndexOutOfRange: ``dim`` is out of range.
    """
    return _last_dim_apply(x, dim, _LogSoftmax, "log_softmax")


# ----------------------------------------------------------------------------- rms_norm
def _check_param(x, p, op, what):
    n = x.shape[-1] if x.ndim else None
    _check_tensor(p, op, what)
    if p.shape != (n,):
        raise ShapeError(f"[{op}] expected {what} of shape ({n},), got {p.shape}")
    if p.dtype != x.dtype:
        raise DTypeError(f"[{op}] {what} has dtype {p.dtype.name}, expected {x.dtype.name}")


class _RmsNorm(CustomOp2):
    name = "rms_norm"

    def __init__(self, eps):
        self.eps = float_arg(eps, self.name, "eps")
        self.rstd = None

    def cpu_fwd(self, xs, xl, ws, wl):
        y, self.rstd = _F.rms_norm_fwd(xs, xl, ws, wl, self.eps)
        return y, xl.shape

    metal_fwd = cuda_fwd = cpu_fwd

    def bwd(self, x, w, y, g):
        if not is_grad_enabled() and self.rstd is not None:
            dx, dw = _F.rms_norm_bwd(x._storage, x._layout, w._storage, w._layout, self.rstd, g._storage,
                                     g._layout)
            return _out(dx, x.shape, x), _out(dw, w.shape, w)
        # Differentiable form: dx = r * (g*w - xhat * mean(g*w*xhat)), dw = sum(g * xhat).
        r = ((x * x).mean(-1, keepdim=True) + self.eps).sqrt().recip()
        xh = x * r
        gw = g * w
        return r * (gw - xh * (gw * xh).mean(-1, keepdim=True)), _sum_leading(g * xh)


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-5) -> Tensor:
    """``x / sqrt(mean(x**2, -1) + eps) * weight``, over the last dim, as one fused kernel.

    Args:
        x: a float tensor (..., D); any strides and offset.
        weight: the (D,) scale, the same dtype as ``x``.
        eps: added to the mean square.

    Returns:
        Tensor: same shape and dtype; differentiable with respect to ``x`` and ``weight``.

    Raises:
        ShapeError: ``weight`` is not of shape (D,).
        DTypeError: the dtypes differ or are not float.
    """
    _check_tensor(x, "rms_norm")
    if x.ndim == 0:
        raise ShapeError("[rms_norm] expected at least 1 dim, got a scalar")
    _check_param(x, weight, "rms_norm", "weight")
    return x.apply_op2(weight, _RmsNorm(eps))


# ----------------------------------------------------------------------------- layer_norm
class _LayerNorm(CustomOp3):
    name = "layer_norm"

    def __init__(self, eps):
        self.eps = float_arg(eps, self.name, "eps")
        self.mean = self.rstd = None

    def cpu_fwd(self, xs, xl, ws, wl, bs, bl):
        y, self.mean, self.rstd = _F.layer_norm_fwd(xs, xl, ws, wl, bs, bl, self.eps)
        return y, xl.shape

    metal_fwd = cuda_fwd = cpu_fwd

    def bwd(self, x, w, b, y, g):
        if not is_grad_enabled() and self.rstd is not None:
            dx, dw, db = _F.layer_norm_bwd(x._storage, x._layout, w._storage, w._layout, self.mean, self.rstd,
                                           g._storage, g._layout)
            return _out(dx, x.shape, x), _out(dw, w.shape, w), _out(db, b.shape, b)
        xc = x - x.mean(-1, keepdim=True)
        r = ((xc * xc).mean(-1, keepdim=True) + self.eps).sqrt().recip()
        xh = xc * r
        gw = g * w
        dx = r * (gw - gw.mean(-1, keepdim=True) - xh * (gw * xh).mean(-1, keepdim=True))
        return dx, _sum_leading(g * xh), _sum_leading(g)


def layer_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float = 1e-5) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dim, as one fused kernel.

    Args:
        x: a float tensor (..., D); any strides and offset.
        weight: the (D,) scale, or None for ones.
        bias: the (D,) shift, or None for zeros.
        eps: added to the variance (the biased one, as torch).

    Returns:
        Tensor: same shape and dtype; differentiable with respect to ``x``, ``weight`` and ``bias``.

    Raises:
        ShapeError: ``weight`` or ``bias`` is not of shape (D,).
        DTypeError: the dtypes differ or are not float.
    """
    _check_tensor(x, "layer_norm")
    if x.ndim == 0:
        raise ShapeError("[layer_norm] expected at least 1 dim, got a scalar")
    n = x.shape[-1]
    if weight is None:
        weight = full((n,), 1.0, dtype=x.dtype, device=x.device)
    if bias is None:
        bias = full((n,), 0.0, dtype=x.dtype, device=x.device)
    _check_param(x, weight, "layer_norm", "weight")
    _check_param(x, bias, "layer_norm", "bias")
    return x.apply_op3(weight, bias, _LayerNorm(eps))


# ----------------------------------------------------------------------------- sdpa
def _attn_scores(q, k, scale, causal, mask):
    """Masked, scaled scores (composite) for the differentiable backward and the reference."""
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:  # top-left aligned like torch: query i sees keys j <= i
        lq, lk = q.shape[-2], k.shape[-2]
        keep = arange(lq, device=q.device).reshape(lq, 1).ge(arange(lk, device=q.device).reshape(1, lk))
        s = where(keep, s, full((), float("-inf"), dtype=s.dtype, device=s.device))
    if mask is not None:
        if mask.dtype.is_float:
            s = s + mask.to_dtype(s.dtype)
        else:
            s = where(mask, s, full((), float("-inf"), dtype=s.dtype, device=s.device))
    return s


def _attn_probs(q, k, scale, causal, mask):
    """softmax of _attn_scores (composite, differentiable in every input). A row whose keys are all
    masked gives zeros, as in the fused kernel, not the NaN of a softmax over -inf."""
    s = _attn_scores(q, k, scale, causal, mask)
    if mask is None or s.shape[-1] == 0:  # causal alone leaves every query at least key 0
        return softmax_last_dim(s)
    live = s.max(-1, keepdim=True).detach().gt(full((), float("-inf"), dtype=s.dtype, device=s.device))
    zero = full((), 0.0, dtype=s.dtype, device=s.device)
    return where(live, softmax_last_dim(where(live, s, zero)), zero)


def _repeat_kv(t: Tensor, q: Tensor) -> Tensor:
    """Grouped-query attention for the composites: key/value head j serves query heads j*g .. j*g+g-1."""
    if q.ndim != 4 or t.ndim != 4 or t.shape[1] == q.shape[1] or t.shape[1] == 0:
        return t
    group = q.shape[1] // t.shape[1]
    ids = arange(t.shape[1], device=t.device).reshape(t.shape[1], 1).broadcast_as((t.shape[1], group)).flatten()
    return t.index_select(ids, 1)


def _sum_groups(g: Tensor, like: Tensor) -> Tensor:
    """The gradient of _repeat_kv: each key/value head gets the sum over the query heads it serves."""
    if g.shape[1] == like.shape[1]:
        return g
    B, H, L, D = g.shape
    return g.reshape(B, like.shape[1], H // like.shape[1], L, D).sum(2)


class _Sdpa(CustomOp3):
    name = "sdpa"

    def __init__(self, scale, causal, mask):
        self.scale, self.causal, self.mask = scale, causal, mask
        self.lse = None

    def _mask_args(self):
        m = self.mask
        return (None, None) if m is None else (m._storage, m._layout)

    def cpu_fwd(self, qs, ql, ks, kl, vs, vl):
        out, self.lse = _F.sdpa_fwd(qs, ql, ks, kl, vs, vl, *self._mask_args(), self.scale, self.causal)
        return out, tuple(ql.shape[:-1]) + (vl.shape[-1],)

    metal_fwd = cuda_fwd = cpu_fwd

    def bwd(self, q, k, v, out, g):
        if not is_grad_enabled() and self.lse is not None:
            dq, dk, dv = _F.sdpa_bwd(q._storage, q._layout, k._storage, k._layout, v._storage, v._layout,
                                     out._storage, out._layout, self.lse, g._storage, g._layout,
                                     *self._mask_args(), self.scale, self.causal)
            return _out(dq, q.shape, q), _out(dk, k.shape, k), _out(dv, v.shape, v)
        kr, vr = _repeat_kv(k, q), _repeat_kv(v, q)
        p = _attn_probs(q, kr, self.scale, self.causal, self.mask)
        dv = p.transpose(-2, -1) @ g
        dp = g @ vr.transpose(-2, -1)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        dk = (ds.transpose(-2, -1) @ q) * self.scale
        return (ds @ kr) * self.scale, _sum_groups(dk, k), _sum_groups(dv, v)


def sdpa(q: Tensor, k: Tensor, v: Tensor, scale=None, causal: bool = False, mask: Tensor | None = None) -> Tensor:
    """Attention over (B, H, L, D) (or (B, L, D)) tensors, flash-style: the L x L matrix is never
    built. ``k`` and ``v`` may have fewer heads than ``q`` when that number divides H (grouped-query
    attention: key/value head j serves query heads j*H/Hkv ..). ``mask`` (broadcastable to
    (B, H, Lq, Lk)) is additive when float, a keep-mask when bool/uint8 (0 = masked out). A float mask
    that needs a gradient (a learned bias, as in T5 or ALiBi variants) gets one: then, as in torch, the
    attention runs as the composite (the L x L scores are built, the softmax is still fused). Fully
    masked rows give 0.

    Args:
        q: queries (B, H, Lq, D).
        k: keys (B, Hkv, Lk, D).
        v: values (B, Hkv, Lk, Dv).
        scale: the factor on ``q @ k^T``; default ``1 / sqrt(D)``.
        causal: mask out keys after each query (query i sees keys 0..i).
        mask: None, an additive float mask or a bool/uint8 keep-mask, broadcastable to (B, H, Lq, Lk).

    Returns:
        Tensor: (B, H, Lq, Dv), differentiable with respect to ``q``, ``k``, ``v`` (and a float mask).

    Raises:
        ShapeError: the shapes do not fit together.
        DTypeError: the dtypes differ or are not float.
    """
    for t, nm in ((q, "query"), (k, "key"), (v, "value")):
        _check_tensor(t, "sdpa", nm)
    if mask is not None:
        _check_tensor(mask, "sdpa", "mask")
        if mask.device != q.device:
            raise DeviceError(f"[sdpa] mask is on {mask.device}, query on {q.device}")
    if q.ndim not in (3, 4):
        raise ShapeError(f"[sdpa] expected query of shape (B, H, L, D) or (B, L, D), got {q.shape}")
    scale = 1.0 / math.sqrt(max(q.shape[-1], 1)) if scale is None else float_arg(scale, "sdpa", "scale")  # head dim 0: no 1/0
    causal = bool(causal)
    if mask is not None and is_grad_enabled() and tracks(mask):
        # The fused kernels never hold dS = dL/dscores for the whole L x L, and that is the mask's gradient.
        _F.sdpa_check(q._storage, q._layout, k._storage, k._layout, v._storage, v._layout,
                      mask._storage, mask._layout)  # the fused path's errors, word for word
        return _attn_probs(q, _repeat_kv(k, q), scale, causal, mask) @ _repeat_kv(v, q)
    return q.apply_op3(k, v, _Sdpa(scale, causal, mask))


# ----------------------------------------------------------------------------- composite references
def softmax_slow(x: Tensor, dim: int = -1) -> Tensor:
    """Composite reference for tests: ``exp(x - max) / sum(exp(x - max))`` over ``dim``, in Tensor ops."""
    m = x.max(dim, keepdim=True).detach()
    e = (x - m).exp()
    return e / e.sum(dim, keepdim=True)


def log_softmax_slow(x: Tensor, dim: int = -1) -> Tensor:
    """Composite reference for tests: ``x - logsumexp(x)`` over ``dim``, in Tensor ops."""
    return x - x.logsumexp(dim, keepdim=True)


def rms_norm_slow(x: Tensor, weight: Tensor, eps: float = 1e-5) -> Tensor:
    """Composite reference for tests: ``rms_norm(x, weight, eps)`` in Tensor ops."""
    return x / ((x * x).mean(-1, keepdim=True) + eps).sqrt() * weight


def layer_norm_slow(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """Composite reference for tests: ``layer_norm(x, weight, bias, eps)`` in Tensor ops."""
    xc = x - x.mean(-1, keepdim=True)
    return xc / ((xc * xc).mean(-1, keepdim=True) + eps).sqrt() * weight + bias


def sdpa_slow(q, k, v, scale=None, causal=False, mask=None):
    """Composite reference for tests: ``sdpa(q, k, v, scale, causal, mask)`` with the whole L x L
    score matrix built in Tensor ops."""
    scale = 1.0 / math.sqrt(max(q.shape[-1], 1)) if scale is None else float(scale)
    return softmax_slow(_attn_scores(q, _repeat_kv(k, q), scale, causal, mask), -1) @ _repeat_kv(v, q)
