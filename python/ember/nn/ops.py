"""Fused ops (docs/fused-ops.md): FusedOps over the C++ fused kernels (_C.fused), each with its one composite form.

Each op's forward is one fused kernel. Its backward, during an ordinary ``backward()``, is one fused
kernel too; under ``backward(create_graph=True)`` the gradients are those of the op's ``composite``
(in Tensor ops) recomputed from the saved inputs, so second-order derivatives work; the public
``*_slow`` references call the same composite. Saved statistics (rstd, mean, logsumexp) live on the op
instance, which the graph keeps. ``sdpa``'s ``mask`` is an attribute of the op, not an input: it
never receives a gradient.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _C
from ..activation import Activation
from ..args import bool_arg, float_arg, i64_arg, int_arg
from ..backprop import is_grad_enabled, needs_grad, tracks
from ..creation import arange, full, tensor
from ..custom_op import CustomOp1, CustomOp2, CustomOp3
from ..errors import DeviceError, DTypeError, EmberTypeError, EmberValueError, ShapeError
from ..fused_op import FusedOp
from ..kernel_result import dense_like as _out
from ..multi import cat, stack, where
from ..softmax import _Softmax, log_softmax, log_softmax_slow, softmax, softmax_last_dim, softmax_slow  # noqa: F401  (re-exported)
from ..tensor_type import Tensor
from .rope_table import rope_i, rope_tables, rope_thd

_F = _C.fused

__all__ = [  # noqa: RUF022  (grouped: fused ops, then the composite references)
    "sigmoid", "silu", "gelu", "softmax", "softmax_last_dim", "log_softmax", "rms_norm", "layer_norm",
    "sdpa", "sdpa_qkv", "rope", "bias_residual", "rope_i", "rope_thd", "rope_tables", "softmax_slow", "log_softmax_slow", "rms_norm_slow", "layer_norm_slow", "sdpa_slow",
    "rope_slow",
]


def _sum_leading(t: Tensor) -> Tensor:
    """Sums every dim but the last (the weight/bias gradient of a norm)."""
    return t.sum(tuple(range(t.ndim - 1))) if t.ndim > 1 else t


def _check_tensor(x, op, what="input"):
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor {what}, got {type(x).__name__}")


# ----------------------------------------------------------------------------- activations
# Their backward and composite forms live once in ember.activation, shared with x.sigmoid() / x.gelu().
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
    return x.apply_op1(Activation("sigmoid"))


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
    return x.apply_op1(Activation("silu"))


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
    return x.apply_op1(Activation("gelu"))


class _BiasGelu(FusedOp, CustomOp2):
    """gelu(x + b) on the CPU: one pass forward; backward one pass giving dx and b's gradient (its column sums)."""

    name = "bias_gelu"

    def cpu_fwd(self, xs, xl, bs, bl):
        return _F.bias_gelu_fwd(xs, xl, bs, bl), xl.shape

    def bwd_kernel(self, x, b, y, g):
        # a constant bias gets no gradient: the kernel then skips its sums
        dx, db = _F.bias_gelu_bwd(x._storage, x._layout, b._storage, b._layout, g._storage, g._layout,
                                  needs_grad(b))
        return _out(dx, x.shape, x), None if db is None else _out(db, b.shape, b)

    def composite(self, x, b):
        return gelu(x + b)


def _check_biased(x, bias, op):
    """The checks bias_gelu and bias_residual share: a float tensor of at least 1 dim, an (N,) bias of its
    dtype on its device."""
    _check_tensor(x, op)
    if x.ndim == 0:
        raise ShapeError(f"[{op}] expected at least 1 dim, got a scalar")
    _check_param(x, bias, op, "bias")
    if not x.dtype.is_float:
        raise DTypeError(f"[{op}] expected a float input, got {x.dtype.name}")
    if x._device != bias._device:
        raise DeviceError(f"[{op}] bias is on {bias.device}, input on {x.device}")


def bias_gelu(x: Tensor, bias: Tensor) -> Tensor:
    """``gelu(x + bias)`` (the exact erf gelu), ``bias`` added along the last dim: ``nn.MLP``'s first
    layer and activation after its matmul.

    On the CPU it is one fused kernel each way: the forward writes gelu(x + bias) in one pass, and the
    backward gives x's gradient and the bias' (its sum over every other dim) in one pass. The sum is
    rounded to x's dtype before gelu, so the forward equals ``gelu(x + bias)`` exactly. On other
    devices it runs as those two ops.

    Args:
        x: a float tensor (..., N); any strides and offset.
        bias: the (N,) bias, the same dtype and device as ``x``.

    Returns:
        Tensor: same shape and dtype as ``x``; differentiable with respect to both.

    Raises:
        ShapeError: ``bias`` is not of shape (N,), or ``x`` is a scalar.
        DTypeError: the dtypes differ or are not float.
    """
    _check_biased(x, bias, "bias_gelu")
    if x._device.type != "cpu":  # the fused kernel is the CPU's; elsewhere the add and the fused gelu
        return gelu(x + bias)
    return x.apply_op2(bias, _BiasGelu())


class _BiasResidual(FusedOp, CustomOp3):
    """r + (y + b) on the CPU in one pass; backward: g for y and r, g's column sums for b."""

    name = "bias_residual"

    def cpu_fwd(self, ys, yl, bs, bl, rs, rl):
        return _F.bias_residual(ys, yl, bs, bl, rs, rl), yl.shape

    def bwd_kernel(self, y, b, r, out, g):
        return g, (_sum_leading(g) if needs_grad(b) else None), g

    def composite(self, y, b, r):
        return r + (y + b)


def bias_residual(y: Tensor, bias: Tensor, residual: Tensor) -> Tensor:
    """``residual + (y + bias)``, ``bias`` along the last dim: a block's residual connection after an output
    projection with a bias (``nn.MLP``'s second layer in ``nn.TransformerBlock``).

    On the CPU it is one pass instead of two adds; the sum is rounded as those adds round it, so the
    result equals ``residual + (y + bias)`` exactly. On other devices it runs as those two adds.

    Args:
        y: a float tensor (..., N), e.g. a linear layer's product; any strides and offset.
        bias: the (N,) bias, y's dtype and device.
        residual: a tensor of y's shape, dtype and device; any strides and offset.

    Returns:
        Tensor: y's shape and dtype; differentiable with respect to all three.

    Raises:
        ShapeError: the shapes differ, ``bias`` is not (N,), or ``y`` is a scalar.
        DTypeError: the dtypes differ or are not float.
        DeviceError: the operands are on different devices.
    """
    _check_biased(y, bias, "bias_residual")
    _check_tensor(residual, "bias_residual", "residual")
    if residual.shape != y.shape:
        raise ShapeError(f"[bias_residual] the residual's shape {residual.shape} differs from the input's {y.shape}")
    if residual.dtype != y.dtype:
        raise DTypeError(f"[bias_residual] residual has dtype {residual.dtype.name}, expected {y.dtype.name}")
    if residual._device != y._device:
        raise DeviceError(f"[bias_residual] residual is on {residual.device}, input on {y.device}")
    if y._device.type != "cpu":  # the fused kernel is the CPU's; elsewhere the two adds
        return residual + (y + bias)
    return y.apply_op3(bias, residual, _BiasResidual())

# ----------------------------------------------------------------------------- rms_norm
def _check_param(x, p, op, what):
    n = x.shape[-1] if x.ndim else None
    _check_tensor(p, op, what)
    if p.shape != (n,):
        raise ShapeError(f"[{op}] expected {what} of shape ({n},), got {p.shape}")
    if p.dtype != x.dtype:
        raise DTypeError(f"[{op}] {what} has dtype {p.dtype.name}, expected {x.dtype.name}")


class _FoldsDx:
    """A norm whose fused backward can return dx plus the gradient x already holds (a residual's).
    backprop's walk sets dx_add to that gradient; the kernel call takes it (``_dx_add``), which sets dx_add
    back to None to say it was summed. The composite backward leaves it set, and the walk then adds as usual."""

    folds_dx = True
    dx_add = None

    def _dx_add(self):
        """The (storage, layout) of the gradient to sum into dx, or (None, None); taken once."""
        add, self.dx_add = self.dx_add, None
        return (None, None) if add is None else (add._storage, add._layout)


class _RmsNormBase(_FoldsDx, FusedOp):
    """rms_norm's declaration: the composite form (also ``rms_norm_slow``) and what the forward saves."""

    name = "rms_norm"
    saved = "rstd"

    def __init__(self, eps):
        self.eps = float_arg(eps, self.name, "eps")
        self.rstd = None

    def composite(self, x, w=None):
        y = x / ((x * x).mean(-1, keepdim=True) + self.eps).sqrt()
        return y if w is None else y * w


class _RmsNorm(_RmsNormBase, CustomOp2):
    def cpu_fwd(self, xs, xl, ws, wl):
        y, self.rstd = _F.rms_norm_fwd(xs, xl, ws, wl, self.eps)
        return y, xl.shape

    def bwd_kernel(self, x, w, y, g):
        # a constant weight (a frozen norm) gets no gradient: the kernel then skips dw's sums
        dx, dw = _F.rms_norm_bwd(x._storage, x._layout, w._storage, w._layout, self.rstd, g._storage,
                                 g._layout, needs_grad(w), *self._dx_add())
        return _out(dx, x.shape, x), None if dw is None else _out(dw, w.shape, w)


class _RmsNormNoWeight(_RmsNormBase, CustomOp1):
    """rms_norm without a weight: the kernels take a null weight, so no ones tensor is built."""

    def cpu_fwd(self, xs, xl):
        y, self.rstd = _F.rms_norm_fwd(xs, xl, None, None, self.eps)
        return y, xl.shape

    def bwd_kernel(self, x, y, g):
        dx, _ = _F.rms_norm_bwd(x._storage, x._layout, None, None, self.rstd, g._storage, g._layout, True,
                                *self._dx_add())
        return _out(dx, x.shape, x)


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """``x / sqrt(mean(x**2, -1) + eps) * weight``, over the last dim, as one fused kernel.

    Args:
        x: a float tensor (..., D); any strides and offset.
        weight: the (D,) scale, the same dtype as ``x``, or None for no scale (the kernels then read
            no weight at all; no ones tensor is built).
        eps: added to the mean square.

    Returns:
        Tensor: same shape and dtype; differentiable with respect to ``x`` and ``weight`` (when given).

    Raises:
        ShapeError: ``weight`` is not of shape (D,).
        DTypeError: the dtypes differ or are not float.
    """
    _check_tensor(x, "rms_norm")
    if x.ndim == 0:
        raise ShapeError("[rms_norm] expected at least 1 dim, got a scalar")
    if weight is None:
        return x.apply_op1(_RmsNormNoWeight(eps))
    _check_param(x, weight, "rms_norm", "weight")
    return x.apply_op2(weight, _RmsNorm(eps))


# ----------------------------------------------------------------------------- layer_norm
class _LayerNormBase(_FoldsDx, FusedOp):
    """layer_norm's declaration. A missing weight or bias is no input (the kernels take null pointers, no
    ones/zeros tensor is built, and it gets no gradient): the op's inputs are x followed by the given
    parameters, ``has_w`` / ``has_b`` say which."""

    name = "layer_norm"
    saved = "rstd"

    def __init__(self, eps, has_w=True, has_b=True):
        self.eps = float_arg(eps, self.name, "eps")
        self.has_w, self.has_b = has_w, has_b
        self.mean = self.rstd = None

    def _fwd(self, xs, xl, *rest):
        ws, wl, bs, bl = None, None, None, None
        if self.has_w:
            ws, wl = rest[0], rest[1]
        if self.has_b:
            bs, bl = rest[-2], rest[-1]
        y, self.mean, self.rstd = _F.layer_norm_fwd(xs, xl, ws, wl, bs, bl, self.eps)
        return y, xl.shape

    def composite(self, x, *params):
        xc = x - x.mean(-1, keepdim=True)
        y = xc / ((xc * xc).mean(-1, keepdim=True) + self.eps).sqrt()
        if self.has_w:
            y = y * params[0]
        return y + params[-1] if self.has_b else y

    def _grads(self, x, w, g, want_w, want_b):
        """(dx, dw or None, db or None) from the fused kernel: dw only when want_w, db only when want_b
        (the kernel skips the parameters' sums when neither is wanted, e.g. a frozen norm)."""
        dx, dw, db = _F.layer_norm_bwd(x._storage, x._layout, None if w is None else w._storage,
                                       None if w is None else w._layout, self.mean, self.rstd,
                                       g._storage, g._layout, want_w or want_b, *self._dx_add())
        dx = _out(dx, x.shape, x)
        dw = None if dw is None or not want_w else _out(dw, w.shape, w)
        if not (self.has_b and want_b):
            db = None
        else:  # the kernel sums g for db only beside dw
            db = _out(db, (x.shape[-1],), x) if db is not None else _sum_leading(g)
        return dx, dw, db


class _LayerNorm(_LayerNormBase, CustomOp3):
    def cpu_fwd(self, xs, xl, ws, wl, bs, bl):
        return self._fwd(xs, xl, ws, wl, bs, bl)

    def bwd_kernel(self, x, w, b, y, g):
        return self._grads(x, w, g, needs_grad(w), needs_grad(b))


class _LayerNormX(_LayerNormBase, CustomOp1):
    def cpu_fwd(self, xs, xl):
        return self._fwd(xs, xl)

    def bwd_kernel(self, x, y, g):
        return self._grads(x, None, g, False, False)[0]


class _LayerNormXP(_LayerNormBase, CustomOp2):
    def cpu_fwd(self, xs, xl, ps, pl):
        return self._fwd(xs, xl, ps, pl)

    def bwd_kernel(self, x, p, y, g):
        want = needs_grad(p)
        dx, dw, db = self._grads(x, p if self.has_w else None, g, want and self.has_w, want and self.has_b)
        return dx, (dw if self.has_w else db)


def _check_eps(eps, op):
    """A positive, finite epsilon: with 0 a constant row normalises to 0 / 0 = NaN everywhere."""
    e = float_arg(eps, op, "eps")
    if not 0.0 < e < math.inf:
        raise EmberValueError(f"[{op}] eps must be positive and finite, got {e} (with eps = 0 a constant row "
                              "divides 0 by 0)")
    return e


def layer_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dim, as one fused kernel.

    Args:
        x: a float tensor (..., D); any strides and offset.
        weight: the (D,) scale, or None for no scale.
        bias: the (D,) shift, or None for no shift. A missing parameter is never built as a tensor:
            the kernels take a null pointer, and it gets no gradient.
        eps: added to the variance (the biased one, as torch); positive.

    Returns:
        Tensor: same shape and dtype; differentiable with respect to ``x`` and each of ``weight`` and
        ``bias`` that is given.

    Raises:
        ShapeError: ``weight`` or ``bias`` is not of shape (D,).
        DTypeError: the dtypes differ or are not float.
        EmberValueError: ``eps`` is not positive.
    """
    _check_tensor(x, "layer_norm")
    eps = _check_eps(eps, "layer_norm")
    if x.ndim == 0:
        raise ShapeError("[layer_norm] expected at least 1 dim, got a scalar")
    if weight is not None:
        _check_param(x, weight, "layer_norm", "weight")
    if bias is not None:
        _check_param(x, bias, "layer_norm", "bias")
    if weight is not None and bias is not None:
        return x.apply_op3(weight, bias, _LayerNorm(eps))
    if weight is None and bias is None:
        return x.apply_op1(_LayerNormX(eps, False, False))
    return x.apply_op2(weight if bias is None else bias, _LayerNormXP(eps, weight is not None, bias is not None))


# ----------------------------------------------------------------------------- sdpa
def _attn_scores(q, k, scale, causal, mask, softcap=None):
    """Masked, scaled (and soft-capped) scores (composite) for the differentiable backward and the reference."""
    s = (q @ k.transpose(-2, -1)) * scale
    if softcap is not None:  # Gemma 2: after the scale, before the mask
        s = (s / softcap).tanh() * softcap
    if causal:  # aligned bottom-right (a KV-cache step): query i sees keys j <= i + Lk - Lq
        lq, lk = q.shape[-2], k.shape[-2]
        rows = arange(lq, device=q.device).reshape(lq, 1) + (lk - lq)
        keep = rows.ge(arange(lk, device=q.device).reshape(1, lk))
        s = where(keep, s, full((), float("-inf"), dtype=s.dtype, device=s.device))
    if mask is not None:
        if mask.dtype.is_float:
            s = s + mask.to_dtype(s.dtype)
        else:
            s = where(mask, s, full((), float("-inf"), dtype=s.dtype, device=s.device))
    return s


def _attn_probs(q, k, scale, causal, mask, softcap=None):
    """softmax of _attn_scores (composite, differentiable in every input). A row whose keys are all
    masked gives zeros, as in the fused kernel, not the NaN of a softmax over -inf."""
    if not math.isfinite(scale):
        # torch splits the scale between q and k, (q * sqrt(scale)) @ (k * sqrt(scale))^T: with an infinite
        # or NaN scale that decides which scores are NaN and which +-inf, so do the same on every device
        r = math.sqrt(abs(scale))
        q, k, scale = q * (-r if scale < 0 else r), k * r, 1.0
        s = _attn_scores(q, k, scale, causal, mask, softcap)
    else:
        s = _attn_scores(q, k, scale, causal, mask, softcap)
        # causal alone leaves every query at least key 0 unless there are more queries than keys
        if (mask is None and (not causal or q.shape[-2] <= k.shape[-2])) or s.shape[-1] == 0:
            return softmax_last_dim(s)
    if s.shape[-1] == 0:
        return softmax_last_dim(s)
    # a row is dead when all its scores are -inf (0, as the fused kernel); a NaN max keeps it live (NaN)
    live = s.max(-1, keepdim=True).detach().ne(full((), float("-inf"), dtype=s.dtype, device=s.device))
    zero = full((), 0.0, dtype=s.dtype, device=s.device)
    return where(live, softmax_last_dim(where(live, s, zero)), zero)


def _repeat_kv(t: Tensor, q: Tensor) -> Tensor:
    """Grouped-query attention for the composites: key/value head j serves query heads j*g .. j*g+g-1."""
    if q.ndim != 4 or t.ndim != 4 or t.shape[1] == q.shape[1] or t.shape[1] == 0:
        return t
    group = q.shape[1] // t.shape[1]
    ids = arange(t.shape[1], device=t.device).reshape(t.shape[1], 1).broadcast_as((t.shape[1], group)).flatten()
    return t.index_select(ids, 1)


class _Sdpa(FusedOp, CustomOp3):
    """sdpa's declaration; ``mask`` is an attribute, not an input (a mask that needs a gradient runs the
    composite directly, see ``sdpa``)."""

    name = "sdpa"
    saved = "lse"

    def __init__(self, scale, causal, mask, softcap=None):
        self.scale, self.causal, self.mask, self.softcap = scale, causal, mask, softcap
        self.lse = None

    def _mask_args(self):
        m = self.mask
        return (None, None) if m is None else (m._storage, m._layout)

    def cpu_fwd(self, qs, ql, ks, kl, vs, vl):
        out, self.lse = _F.sdpa_fwd(qs, ql, ks, kl, vs, vl, *self._mask_args(), self.scale, self.causal,
                                    self.softcap or 0.0)
        return out, tuple(ql.shape[:-1]) + (vl.shape[-1],)

    def bwd_kernel(self, q, k, v, out, g):
        dq, dk, dv = _F.sdpa_bwd(q._storage, q._layout, k._storage, k._layout, v._storage, v._layout,
                                 out._storage, out._layout, self.lse, g._storage, g._layout,
                                 *self._mask_args(), self.scale, self.causal, self.softcap or 0.0)
        return _out(dq, q.shape, q), _out(dk, k.shape, k), _out(dv, v.shape, v)

    def composite(self, q, k, v):
        return _attn_probs(q, _repeat_kv(k, q), self.scale, self.causal, self.mask, self.softcap) @ _repeat_kv(v, q)


class _SdpaQkv(FusedOp, CustomOp1):
    """Self-attention of a packed projection (B, L, 3 * E) (q, k, v side by side, ``heads`` heads each) to
    (B, L, E), heads side by side: the kernels read q, k, v as strided views of it and write the output
    and the packed gradient in place, instead of copies to and from (B, H, L, D) tensors. CPU only
    (the kernels' destinations are; other devices run ``sdpa`` on the views)."""

    name = "sdpa"
    saved = "lse"

    def __init__(self, heads, causal, like):
        self.heads, self.causal, self.device, self.code = heads, causal, like._device, like._dtype.code
        self.scale = 1.0 / math.sqrt(max(like.shape[2] // 3 // heads, 1))  # sdpa's default, 1 / sqrt(head dim)
        self.lse = None

    def _heads(self, layout, i, n):
        """Part i (of n side by side) of a (B, L, n * E) layout as (B, H, L, E / H)."""
        b, t, w = layout.shape
        s0, s1, s2 = layout.stride
        d = w // n // self.heads
        return _C.Layout([b, self.heads, t, d], [s0, d * s2, s1, s2], layout.start_offset + i * (w // n) * s2)

    def _alloc(self, shape):
        n = math.prod(shape)
        return _C.alloc(self.device.kind, self.device.index, self.code, n, False), _C.Layout.contiguous(list(shape))

    def cpu_fwd(self, s, l):
        b, t, e3 = l.shape
        out, lo = self._alloc((b, t, e3 // 3))
        _, self.lse = _F.sdpa_fwd(s, self._heads(l, 0, 3), s, self._heads(l, 1, 3), s, self._heads(l, 2, 3), None,
                                  None, self.scale, self.causal, 0.0, out, self._heads(lo, 0, 1))
        return out, (b, t, e3 // 3)

    def bwd_kernel(self, x, out, g):
        l = x._layout
        ds, dl = self._alloc(x.shape)  # every element is written: q, k and v parts
        q, k, v = (self._heads(l, i, 3) for i in range(3))
        dq, dk, dv = (self._heads(dl, i, 3) for i in range(3))
        _F.sdpa_bwd(x._storage, q, x._storage, k, x._storage, v, out._storage, self._heads(out._layout, 0, 1),
                    self.lse, g._storage, self._heads(g._layout, 0, 1), None, None, self.scale, self.causal, 0.0,
                    ds, dq, ds, dk, ds, dv)
        return _out(ds, x.shape, x)

    def composite(self, qkv):
        b, t, e3 = qkv.shape
        d = e3 // 3 // self.heads
        y = qkv.reshape(b, t, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        o = _attn_probs(y[0], y[1], self.scale, self.causal, None) @ y[2]
        return o.transpose(1, 2).reshape(b, t, e3 // 3)


def sdpa_qkv(qkv: Tensor, heads: int, causal: bool = True) -> Tensor:
    """Self-attention of ``qkv``, a packed (B, L, 3 * E) projection, q, k, v side by side with ``heads``
    heads each (torch's and nn.CausalSelfAttention's layout), to (B, L, E) with the heads side by side:
    the same values as ``sdpa(q, k, v, causal=causal)`` on the (B, H, L, D) views, transposed back. On
    the CPU the kernels read the views and write the output and gradient in place; elsewhere it runs
    ``sdpa`` on the views."""
    _check_tensor(qkv, "sdpa", "query")
    if qkv.ndim != 3 or qkv.shape[2] % (3 * heads):
        raise ShapeError(f"[sdpa] expected a packed projection (B, L, 3 * E) with E divisible by {heads} heads, "
                         f"got {qkv.shape}")
    b, t, e3 = qkv.shape
    if qkv.device.type != "cpu" or not qkv.dtype.is_float:
        y = qkv.reshape(b, t, 3, heads, e3 // 3 // heads).permute(2, 0, 3, 1, 4)
        return sdpa(y[0], y[1], y[2], causal=causal).transpose(1, 2).reshape(b, t, e3 // 3)
    return qkv.apply_op1(_SdpaQkv(heads, bool(causal), qkv))


def _softcap_arg(softcap):
    """None (no capping) or a positive, finite float."""
    if softcap is None:
        return None
    if isinstance(softcap, bool):  # softcap=True is a mistake, not 1.0
        raise EmberTypeError("[sdpa] softcap must be a positive number or None, got bool")
    c = float_arg(softcap, "sdpa", "softcap")
    if not 0.0 < c < math.inf:
        raise EmberValueError(f"[sdpa] softcap must be positive and finite (None for no capping), got {c}")
    return c


def sdpa(q: Tensor, k: Tensor, v: Tensor, scale=None, causal: bool = False, mask: Tensor | None = None, *,
         softcap: float | None = None) -> Tensor:
    """Attention over (B, H, L, D) (or (B, L, D)) tensors, flash-style: the L x L matrix is never
    built. ``k`` and ``v`` may have fewer heads than ``q`` when that number divides H (grouped-query
    attention: key/value head j serves query heads j*H/Hkv ..). ``mask`` (broadcastable to
    (B, H, Lq, Lk)) is additive when float, a keep-mask when bool/uint8 (0 = masked out). A float mask
    that needs a gradient (a learned bias, as in T5 or ALiBi variants) gets one: then, as in torch, the
    attention runs as the composite (the L x L scores are built, the softmax is still fused). Fully
    masked rows give 0. NaN propagates as in torch: a NaN in a query, a key or the mask makes the rows
    it reaches NaN (output and gradients); an infinite or NaN ``scale`` is split between q and k as
    torch does (the composite), so the same scores become NaN or infinite. ``softcap`` is Gemma 2's
    logit soft-capping, fused into the same kernels (forward and backward).

    Args:
        q: queries (B, H, Lq, D).
        k: keys (B, Hkv, Lk, D).
        v: values (B, Hkv, Lk, Dv).
        scale: the factor on ``q @ k^T``; default ``1 / sqrt(D)``.
        causal: mask out keys after each query, aligned bottom-right as in a KV-cache step: query i of
            Lq sees keys 0 .. i + Lk - Lq (0 .. i when Lq == Lk; with Lq > Lk the first Lq - Lk queries
            see none and give 0).
        mask: None, an additive float mask or a bool/uint8 keep-mask, broadcastable to (B, H, Lq, Lk): a
            tensor, or a numpy array or list (put on the query's device, a float one in its dtype).
        softcap: None (off) or a positive finite ``c`` (keyword only): each scaled score ``s`` becomes
            ``c * tanh(s / c)`` after the scale and before the mask, causal cut and softmax, in the order
            of Hugging Face's Gemma 2 (``attn_logit_softcapping``, 50.0 there); flash-attn calls it
            ``softcap`` too.

    Returns:
        Tensor: (B, H, Lq, Dv), differentiable with respect to ``q``, ``k``, ``v`` (and a float mask).

    Raises:
        ShapeError: the shapes do not fit together.
        DTypeError: the dtypes differ or are not float.
        EmberTypeError: ``causal`` is not a bool; ``softcap`` is not a number.
        EmberValueError: ``softcap`` is not positive and finite.
    """
    for t, nm in ((q, "query"), (k, "key"), (v, "value")):
        _check_tensor(t, "sdpa", nm)
    if mask is not None:
        if isinstance(mask, (np.ndarray, list)):  # an array mask goes to the query's device (a float one in its dtype)
            a = np.asarray(mask)
            mask = tensor(a, dtype=q.dtype if a.dtype.kind == "f" else None, device=q.device)
        _check_tensor(mask, "sdpa", "mask")
        if mask.device != q.device:
            raise DeviceError(f"[sdpa] mask is on {mask.device}, query on {q.device}")
    if q.ndim not in (3, 4):
        raise ShapeError(f"[sdpa] expected query of shape (B, H, L, D) or (B, L, D), got {q.shape}")
    scale = 1.0 / math.sqrt(max(q.shape[-1], 1)) if scale is None else float_arg(scale, "sdpa", "scale")  # head dim 0: no 1/0
    causal = bool_arg(causal, "sdpa", "causal")  # causal="no" is a mistake, not True
    softcap = _softcap_arg(softcap)
    if not math.isfinite(scale):  # torch's NaN/inf pattern (see _attn_probs), not the fused kernels' rounding
        _F.sdpa_check(q._storage, q._layout, k._storage, k._layout, v._storage, v._layout,
                      *((None, None) if mask is None else (mask._storage, mask._layout)))  # the same errors
        return _Sdpa(scale, causal, mask, softcap).composite(q, k, v)
    if mask is not None and is_grad_enabled() and tracks(mask):
        # The fused kernels never hold dS = dL/dscores for the whole L x L, and that is the mask's gradient.
        _F.sdpa_check(q._storage, q._layout, k._storage, k._layout, v._storage, v._layout,
                      mask._storage, mask._layout)  # the fused path's errors, word for word
        return _Sdpa(scale, causal, mask, softcap).composite(q, k, v)
    return q.apply_op3(k, v, _Sdpa(scale, causal, mask, softcap))


# ----------------------------------------------------------------------------- rope
class _Rope(FusedOp, CustomOp1):
    """Fused rotary embedding. rope is linear in x, so its backward is the same kernel rotating by -theta
    (its adjoint), itself recorded under create_graph: higher derivatives need no composite. The
    composite form is ``rope_slow``'s, the tests' reference."""

    name = "rope"

    def __init__(self, dims, traditional, base, scale, offset, offsets, freqs, inverse=False):
        self.dims, self.traditional, self.base, self.scale = dims, traditional, base, scale
        self.offset, self.offsets, self.freqs, self.inverse = offset, offsets, freqs, inverse

    def _run(self, s, l, inverse):
        o, f = self.offsets, self.freqs
        return _F.rope(s, l, self.dims, self.traditional, self.base, self.scale, self.offset,
                       None if o is None else o._storage, None if o is None else o._layout,
                       None if f is None else f._storage, None if f is None else f._layout, inverse)

    def cpu_fwd(self, storage, layout):
        return self._run(storage, layout, self.inverse), layout.shape

    def bwd(self, x, y, g):
        if not is_grad_enabled():
            return _out(self._run(g._storage, g._layout, not self.inverse), x.shape, x)
        return g.apply_op1(_Rope(self.dims, self.traditional, self.base, self.scale, self.offset, self.offsets,
                                 self.freqs, not self.inverse))

    def composite(self, x):
        """The rotation in Tensor ops, the angles in float32 (float64 for a float64 ``x``); differentiable
        with respect to ``x`` and ``freqs``."""
        dims, half, L = self.dims, self.dims // 2, x.shape[-2]
        if dims <= 0 or dims % 2 or dims > x.shape[-1]:
            raise EmberValueError(f"[rope] dims must be even and in [2, {x.shape[-1]}], got {dims}")
        cdt = "float64" if x.dtype.name == "float64" else "float32"
        if self.freqs is None:
            inv = (arange(half, device=x.device).to_dtype(cdt) * (-2.0 * math.log(self.base) / dims)).exp()
        else:
            inv = self.freqs.to_dtype(cdt).recip()
        pos = arange(L, device=x.device).to_dtype(cdt) + float(self.offset)
        theta = (pos.reshape(L, 1) * self.scale) * inv.reshape(1, half)  # (L, half)
        if self.offsets is not None:
            po = self.offsets.to_dtype(cdt).reshape(self.offsets.numel(), *([1] * (x.ndim - 1)))  # (B|1, 1.., 1)
            theta = theta + (po * self.scale) * inv.reshape(1, half)
        c, s = theta.cos().to_dtype(x.dtype), theta.sin().to_dtype(x.dtype)
        if self.inverse:
            s = -s
        rot = x.narrow(-1, 0, dims)
        if self.traditional:
            pairs = rot.reshape(*x.shape[:-1], half, 2)
            a, b = pairs.narrow(-1, 0, 1).squeeze(-1), pairs.narrow(-1, 1, 1).squeeze(-1)
            out = stack([a * c - b * s, a * s + b * c], -1).reshape(*x.shape[:-1], dims)
        else:
            a, b = rot.narrow(-1, 0, half), rot.narrow(-1, half, half)
            out = cat([a * c - b * s, a * s + b * c], -1)
        if dims == x.shape[-1]:
            return out
        return cat([out, x.narrow(-1, dims, x.shape[-1] - dims)], -1)


def _rope_args(x, dims, traditional, base, scale, offset, freqs):
    """Checked and converted rope arguments: (dims, traditional, base, scale, int offset, offsets tensor
    or None, freqs or None)."""
    _check_tensor(x, "rope")
    if x.ndim < 2:
        raise ShapeError(f"[rope] expected an input of shape (..., L, D), got {x.shape}")
    dims = int_arg(dims, "rope", "dims")
    traditional = bool_arg(traditional, "rope", "traditional")
    base = 10000.0 if base is None else float_arg(base, "rope", "base")
    scale = float_arg(scale, "rope", "scale")
    offsets = None
    if isinstance(offset, Tensor):
        if offset.dtype.is_float:
            raise DTypeError(f"[rope] offset must be an int or an int tensor, got {offset.dtype.name}")
        if offset.device != x.device:
            raise DeviceError(f"[rope] offset is on {offset.device}, input on {x.device}")
        offsets = offset if offset.dtype.name == "int64" else offset.to_dtype("int64")
        offset = 0
    else:
        offset = i64_arg(offset, "rope", "offset")
    if freqs is not None:
        _check_tensor(freqs, "rope", "freqs")
        if not freqs.dtype.is_float:
            raise DTypeError(f"[rope] freqs must be a float tensor, got {freqs.dtype.name}")
        if freqs.device != x.device:
            raise DeviceError(f"[rope] freqs is on {freqs.device}, input on {x.device}")
    return dims, traditional, base, scale, offset, offsets, freqs


def rope(x: Tensor, dims: int, traditional: bool = False, base: float | None = 10000.0, scale: float = 1.0,
         offset=0, freqs: Tensor | None = None) -> Tensor:
    """Rotary position embedding (RoPE), MLX's ``mx.fast.rope``: one fused kernel forward and one
    backward (the rotation by -theta).

    The row of ``x`` at position ``t = offset + l`` (``l`` its index along dim -2) has its feature pairs
    ``i < dims / 2`` rotated by ``theta = t * scale * base ** (-2 i / dims)`` (``t * scale / freqs[i]``
    with ``freqs``): ``(a, b) -> (a cos - b sin, a sin + b cos)``. The pairs are ``(2i, 2i + 1)`` when
    ``traditional`` (GPT-J, the original paper), else ``(i, i + dims / 2)`` (GPT-NeoX / Llama's
    ``rotate_half``); features from ``dims`` on pass through. The angles are computed in double on the
    CPU (float on Metal).

    Args:
        x: a float tensor (..., L, D), any strides and offset (f32, f16, bf16, f64).
        dims: the number of features rotated (even, at most D). A Tensor here means candle's
            ``rope(x, cos, sin)``: ``dims`` is the (L, n) / (B, L, n) cosine table and ``traditional`` the
            sine table (see ``rope_tables``).
        traditional: the interleaved pair layout.
        base: the frequencies' base; ignored (may be None) when ``freqs`` is given.
        scale: multiplies the positions.
        offset: the position of row 0: an int (the KV-cache length), or an int tensor of shape () or
            (B,) with one position per batch (dim 0 of ``x``, which then has at least 3 dims).
        freqs: optional (dims / 2,) float frequencies (``theta = t * scale / freqs[i]``). It gets a
            gradient when it tracks one: then, as for ``sdpa``'s float mask, the rotation runs as the
            composite ``rope_slow``.

    Returns:
        Tensor: same shape and dtype as ``x``; differentiable with respect to ``x`` (and ``freqs``).

    Raises:
        EmberValueError: ``dims`` odd, not positive or above D; ``base`` not positive.
        ShapeError: ``x`` with fewer than 2 dims; ``offset`` or ``freqs`` of the wrong shape.
        DTypeError: ``x`` not float; a float ``offset`` tensor; ``freqs`` not float.
        DeviceError: ``offset`` or ``freqs`` on another device.
    """
    if isinstance(dims, Tensor):  # candle's rope(x, cos, sin): the caller's angle tables
        if not isinstance(traditional, Tensor):
            raise EmberTypeError("[rope] with a cos table as the second argument, pass the sin table third: "
                                 "rope(x, cos, sin)")
        return rope_tables(x, dims, traditional)
    dims, traditional, base, scale, offset, offsets, freqs = _rope_args(x, dims, traditional, base, scale, offset,
                                                                        freqs)
    if freqs is not None and is_grad_enabled() and tracks(freqs):
        return rope_slow(x, dims, traditional, base, scale, offset if offsets is None else offsets, freqs)
    if freqs is not None:
        fdt = "float64" if x.dtype.name == "float64" else "float32"
        freqs = freqs.detach() if freqs.dtype.name == fdt else freqs.detach().to_dtype(fdt)
    return x.apply_op1(_Rope(dims, traditional, base, scale, offset, offsets, freqs))


def rope_slow(x, dims, traditional=False, base=10000.0, scale=1.0, offset=0, freqs=None):
    """Composite reference for tests (and the path where ``freqs`` needs a gradient): ``rope`` in
    Tensor ops, the angles in float32 (float64 for a float64 ``x``).

    Args:
        x, dims, traditional, base, scale, offset, freqs: as ``rope``.

    Returns:
        Tensor: ``rope(x, ...)``, differentiable with respect to ``x`` and ``freqs`` through the Tensor ops.

    Raises:
        EmberValueError, ShapeError, DTypeError, DeviceError: as ``rope``.
    """
    dims, traditional, base, scale, offset, offsets, freqs = _rope_args(x, dims, traditional, base, scale, offset,
                                                                        freqs)
    return _Rope(dims, traditional, base, scale, offset, offsets, freqs).composite(x)


# ----------------------------------------------------------------------------- composite references
def rms_norm_slow(x: Tensor, weight: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Composite reference for tests: ``rms_norm(x, weight, eps)`` in Tensor ops (rms_norm's composite
    form, which its create_graph backward differentiates)."""
    return _RmsNormBase(eps).composite(x, weight)


def layer_norm_slow(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Composite reference for tests: ``layer_norm(x, weight, bias, eps)`` in Tensor ops (layer_norm's
    composite form, which its create_graph backward differentiates)."""
    op = _LayerNormBase(eps, weight is not None, bias is not None)
    return op.composite(x, *(p for p in (weight, bias) if p is not None))


def sdpa_slow(q, k, v, scale=None, causal=False, mask=None, softcap=None):
    """Composite reference for tests: ``sdpa(q, k, v, scale, causal, mask, softcap=softcap)`` with the
    whole L x L score matrix built in Tensor ops (sdpa's composite form, which its create_graph backward
    differentiates)."""
    scale = 1.0 / math.sqrt(max(q.shape[-1], 1)) if scale is None else float_arg(scale, "sdpa", "scale")
    return _Sdpa(scale, bool_arg(causal, "sdpa", "causal"), mask, _softcap_arg(softcap)).composite(q, k, v)
