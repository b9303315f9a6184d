"""Fused ops (SPEC §5). Placeholder: composite implementations until the fused CustomOps land."""
from __future__ import annotations

import math

from ..tensor import Tensor


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def silu(x: Tensor) -> Tensor:
    return x.silu()


def gelu(x: Tensor) -> Tensor:
    return x.gelu()


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Composite reference: exp(x - max) / sum."""
    m = x.max(dim, keepdim=True).detach()
    e = (x - m).exp()
    return e / e.sum(dim, keepdim=True)


def softmax_last_dim(x: Tensor) -> Tensor:
    return softmax(x, -1)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    return x - x.logsumexp(dim, keepdim=True)


def rms_norm_slow(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return x / ((x * x).mean(-1, keepdim=True) + eps).sqrt() * weight


def layer_norm_slow(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    mu = x.mean(-1, keepdim=True)
    xc = x - mu
    var = (xc * xc).mean(-1, keepdim=True)
    return xc / (var + eps).sqrt() * weight + bias


rms_norm = rms_norm_slow
layer_norm = layer_norm_slow


def sdpa(q: Tensor, k: Tensor, v: Tensor, scale=None, causal=False, mask=None) -> Tensor:
    from ..tensor import full, where

    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        lq, lk = q.shape[-2], k.shape[-2]
        from ..tensor import arange

        keep = arange(lq).reshape(lq, 1).ge(arange(lk).reshape(1, lk))
        s = where(keep, s, full((), float("-inf"), dtype=s.dtype))
    if mask is not None:
        if mask.dtype.is_float:
            s = s + mask
        else:
            s = where(mask, s, full((), float("-inf"), dtype=s.dtype))
    return softmax(s, -1) @ v
