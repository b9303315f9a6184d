"""MultiHeadAttention (torch's nn.MultiheadAttention, batch_first) on the fused ``sdpa``, with torch's
masks and parameter names, and KVCache, the key/value cache for incremental decoding."""
from __future__ import annotations

import math

import numpy as np

from ..args import bool_arg, float_arg, int_arg
from ..creation import arange, full, rand, tensor, zeros
from ..dtypes import to_device, to_dtype
from ..errors import DeviceError, DTypeError, EmberTypeError, EmberValueError, ShapeError
from ..multi import cat, where
from ..tensor_type import Tensor
from ..variable import Var
from . import ops
from .functional import dropout
from .layers import Linear, Module

__all__ = ["KVCache", "MultiHeadAttention", "RoPE"]


class KVCache:
    """The projected keys and values a ``MultiHeadAttention`` has seen, for generation one step at a
    time: pass the same cache to each call and the layer appends the new keys/values, then attends
    over all of them (with ``is_causal``, query i of a call sees every cached key and the new keys up
    to its own position).

    ``k`` and ``v`` are (B, num_heads, S, head_dim) tensors, or None before the first call.

    Args:
        max_len: optional cap on the cached length; appending past it raises.
    """

    def __init__(self, max_len=None):
        self.k = self.v = None
        self.max_len = None if max_len is None else int_arg(max_len, "KVCache", "max_len")

    def __len__(self):
        return 0 if self.k is None else self.k.shape[2]

    @property
    def seq_len(self):
        """The number of cached positions."""
        return len(self)

    def reset(self):
        """Drops every cached key and value."""
        self.k = self.v = None

    def append(self, k, v):
        """Appends keys and values along the sequence dim and returns the whole cache.

        Args:
            k: (B, H, S_new, D) keys.
            v: (B, H, S_new, Dv) values.

        Returns:
            tuple: (all keys, all values), each (B, H, S_old + S_new, D).

        Raises:
            ShapeError: the new keys do not match the cached batch, heads or head dim, or exceed max_len.
        """
        if self.k is not None:
            if k.shape[:2] != self.k.shape[:2] or k.shape[3] != self.k.shape[3] or v.shape[3] != self.v.shape[3]:
                raise ShapeError(f"[KVCache] new keys {k.shape} / values {v.shape} do not match the cached "
                                 f"{self.k.shape} / {self.v.shape}")
            k, v = cat([self.k, k], 2), cat([self.v, v], 2)
        if self.max_len is not None and k.shape[2] > self.max_len:
            raise ShapeError(f"[KVCache] {k.shape[2]} positions exceed max_len {self.max_len}")
        self.k, self.v = k, v
        return k, v


def _xavier(shape, dtype, device):
    bound = math.sqrt(6.0 / (shape[0] + shape[1]))
    return Var(rand(*shape, lo=-bound, hi=bound, device=device).to_dtype(dtype))


def _as_mask(m, op, what, device, dtype):
    if m is None:
        return None
    if not isinstance(m, Tensor):  # a float array in the query's dtype, converted on the host
        a = np.asarray(m)
        m = tensor(a, dtype=dtype if a.dtype.kind == "f" else None, device=device)
    if m.device != device:
        raise DeviceError(f"[{op}] {what} is on {m.device}, query on {device}")
    if m.dtype.name not in ("bool", "uint8", "float32", "float16", "bfloat16", "float64"):
        raise DTypeError(f"[{op}] {what} must be bool, uint8 or float, got {m.dtype.name}")
    return m


class MultiHeadAttention(Module):
    """Multi-head attention, torch's ``nn.MultiheadAttention`` with ``batch_first=True`` by default, on
    the fused ``sdpa`` (the L x S attention matrix is only built when ``need_weights`` or dropout asks
    for it). Parameters carry torch's names: ``in_proj_weight`` (3E, E) and ``in_proj_bias`` (3E), or
    ``q_proj_weight`` / ``k_proj_weight`` / ``v_proj_weight`` when kdim / vdim differ from E, and
    ``out_proj.weight`` / ``out_proj.bias``, so a torch state_dict loads as it is.

    Differences from torch: a query row whose keys are all masked gives 0 (torch gives NaN);
    ``need_weights`` defaults to False; ``is_causal`` needs no ``attn_mask`` (it is the mask).

    Args:
        embed_dim: E, the query and output width.
        num_heads: divides E.
        dropout: the attention-probability dropout while training.
        bias: add biases to the input and output projections.
        kdim: the key width (default E).
        vdim: the value width (default E).
        batch_first: inputs are (B, L, E) (True) or (L, B, E) (False).
        dtype: the parameters' dtype (default float32).
        device: where the parameters live (default the CPU).

    Raises:
        ShapeError: num_heads does not divide embed_dim, or a non-positive width.
        EmberValueError: dropout outside [0, 1).
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, kdim=None, vdim=None, batch_first=True,
                 dtype=None, device=None):
        super().__init__()
        op = "MultiHeadAttention"
        e, h = int_arg(embed_dim, op, "embed_dim"), int_arg(num_heads, op, "num_heads")
        kd = e if kdim is None else int_arg(kdim, op, "kdim")
        vd = e if vdim is None else int_arg(vdim, op, "vdim")
        if min(e, h, kd, vd) < 1 or e % h:
            raise ShapeError(f"[{op}] embed_dim {e} must be divisible by num_heads {h}, and every width positive")
        self.dropout = float_arg(dropout, op, "dropout")
        if not 0.0 <= self.dropout < 1.0:
            raise EmberValueError(f"[{op}] dropout must be in [0, 1), got {self.dropout}")
        self.embed_dim, self.num_heads, self.head_dim, self.kdim, self.vdim = e, h, e // h, kd, vd
        self.batch_first = bool_arg(batch_first, op, "batch_first")
        dtype, device = to_dtype(dtype or "float32"), to_device(device)
        self._same_dims = kd == e and vd == e
        if self._same_dims:
            self.in_proj_weight = _xavier((3 * e, e), dtype, device)
        else:
            self.q_proj_weight = _xavier((e, e), dtype, device)
            self.k_proj_weight = _xavier((e, kd), dtype, device)
            self.v_proj_weight = _xavier((e, vd), dtype, device)
        self.in_proj_bias = Var(zeros(3 * e, dtype=dtype, device=device)) if bias else None
        self.out_proj = Linear(e, e, bias=bias, dtype=dtype, device=device)
        if bias:
            self.out_proj.bias.set(zeros(e, dtype=dtype, device=device))

    # ------------------------------------------------------------------ projections
    def _weights(self, i):
        e = self.embed_dim
        if self._same_dims:
            w = self.in_proj_weight.narrow(0, i * e, e)
        else:
            w = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)[i]
        b = None if self.in_proj_bias is None else self.in_proj_bias.narrow(0, i * e, e)
        return w, b

    def _project(self, x, i):
        """x (B, L, width) -> (B, H, L, head_dim)."""
        w, b = self._weights(i)
        bsz, n, width = x.shape
        y = x.reshape(-1, width) @ w.t()
        if b is not None:
            y = y + b
        return y.reshape(bsz, n, self.num_heads, self.head_dim).transpose(1, 2)

    def _project_qkv(self, x, packed=False):
        """Self-attention with the packed weight: one GEMM for q, k and v; with ``packed`` the (B, L, 3E)
        projection itself."""
        bsz, n, e = x.shape
        y = x.reshape(-1, e) @ self.in_proj_weight.t()
        if self.in_proj_bias is not None:
            y = y + self.in_proj_bias
        if packed:
            return y.reshape(bsz, n, 3 * e)
        y = y.reshape(bsz, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return y[0], y[1], y[2]

    # ------------------------------------------------------------------ masks
    def _mask(self, attn_mask, key_padding_mask, is_causal, bsz, lq, lk, past, dtype, device):
        """(sdpa mask or None, sdpa causal flag): torch's bool masks (True = masked out) become keep
        masks, float masks stay additive; a causal mask after cached keys is bottom-right aligned."""
        op = "MultiHeadAttention"
        h = self.num_heads
        keep = additive = None
        am = _as_mask(attn_mask, op, "attn_mask", device, dtype)
        if am is not None:
            if am.shape == (lq, lk):
                am = am.reshape(1, 1, lq, lk)
            elif am.shape == (bsz * h, lq, lk):
                am = am.reshape(bsz, h, lq, lk)
            else:
                raise ShapeError(f"[{op}] attn_mask must be ({lq}, {lk}) or ({bsz * h}, {lq}, {lk}), got {am.shape}")
            if am.dtype.is_float:
                additive = am.to_dtype(dtype)
            else:
                keep = am.eq(0)
        kpm = _as_mask(key_padding_mask, op, "key_padding_mask", device, dtype)
        if kpm is not None:
            if kpm.shape != (bsz, lk):
                raise ShapeError(f"[{op}] key_padding_mask must be ({bsz}, {lk}), got {kpm.shape}")
            kpm = kpm.reshape(bsz, 1, 1, lk)
            if kpm.dtype.is_float:
                additive = kpm.to_dtype(dtype) if additive is None else additive + kpm.to_dtype(dtype)
            else:
                keep = kpm.eq(0) if keep is None else keep * kpm.eq(0)
        causal = False
        if is_causal:
            if keep is None and additive is None and lk == past + lq:
                # the fused kernel's own causal mask, aligned bottom-right (query i sees the cache and the
                # new keys up to its own): nothing is built, and a single query takes the decode path
                causal = True
            elif lq > 1 or past == 0:
                rows = arange(lq, device=device).reshape(lq, 1) + past
                cm = rows.ge(arange(lk, device=device).reshape(1, lk)).reshape(1, 1, lq, lk)
                keep = cm if keep is None else keep * cm
        if additive is None:
            return keep, causal
        if keep is not None:
            ninf = full((), float("-inf"), dtype=dtype, device=device)
            additive = additive + where(keep, full((), 0.0, dtype=dtype, device=device), ninf)
        return additive, causal

    # ------------------------------------------------------------------ forward
    def forward(self, query, key=None, value=None, key_padding_mask=None, need_weights=False, attn_mask=None,
                average_attn_weights=True, is_causal=False, cache=None):
        """Attends from ``query`` to ``key`` / ``value``.

        Args:
            query: (B, L, E), or (L, E) unbatched ((L, B, E) when not batch_first).
            key: (B, S, kdim); default ``query`` (self-attention).
            value: (B, S, vdim); default ``key``.
            key_padding_mask: (B, S); bool/uint8 True (nonzero) = ignore that key, or float (added).
            need_weights: also return the attention probabilities (builds the L x S matrix).
            attn_mask: (L, S) or (B * num_heads, L, S); bool/uint8 True = not allowed, or float (added).
            average_attn_weights: average the returned weights over heads.
            is_causal: query i attends to keys up to its own position (after any cached keys).
            cache: a ``KVCache``: this call's projected keys/values are appended to it and the query
                attends over everything cached; masks then cover all S_cached + S keys.

        Returns:
            tuple: (output (B, L, E), weights (B, L, S) or (B, num_heads, L, S) when ``need_weights``,
            else None).

        Raises:
            ShapeError: input widths or mask shapes that do not fit.
            DTypeError: inputs whose dtype differs from the parameters', or a bad mask dtype.
        """
        op = "MultiHeadAttention"
        ops._check_tensor(query, op, "query")
        key = query if key is None else key
        value = key if value is None else value
        self_attn = key is query and value is query  # one packed GEMM projects all three
        for t, nm in ((key, "key"), (value, "value")):
            ops._check_tensor(t, op, nm)
        pdtype = self.out_proj.weight.dtype
        for t, nm in ((query, "query"), (key, "key"), (value, "value")):
            if t.dtype is not pdtype:
                raise DTypeError(f"[{op}] {nm} has dtype {t.dtype.name}, the parameters {pdtype.name}")
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        if query.ndim != 3 or key.ndim != 3 or value.ndim != 3:
            raise ShapeError(f"[{op}] expected query, key and value of rank 3 (or 2 unbatched), got {query.shape}, "
                             f"{key.shape}, {value.shape}")
        bsz, lq, e = query.shape
        if e != self.embed_dim or key.shape[2] != self.kdim or value.shape[2] != self.vdim:
            raise ShapeError(f"[{op}] expected widths (E={self.embed_dim}, kdim={self.kdim}, vdim={self.vdim}), got "
                             f"{query.shape}, {key.shape}, {value.shape}")
        if key.shape[:2] != value.shape[:2] or key.shape[0] != bsz:
            raise ShapeError(f"[{op}] key {key.shape} and value {value.shape} must share (B, S) with batch {bsz}")
        if cache is not None and not isinstance(cache, KVCache):
            raise EmberTypeError(f"[{op}] cache must be a KVCache or None, got {type(cache).__name__}")
        drop = self.dropout if self.training else 0.0
        if (self._same_dims and self_attn and cache is None and attn_mask is None and key_padding_mask is None
                and not need_weights and drop == 0.0 and query.device.type == "cpu"):
            # the fused kernels read q, k, v from the packed projection and write (B, L, E) in place
            y = ops.sdpa_qkv(self._project_qkv(query, packed=True), self.num_heads,
                             bool_arg(is_causal, op, "is_causal"))
            out = self.out_proj(y)
            if unbatched:
                return out.squeeze(0), None
            return (out if self.batch_first else out.transpose(0, 1)), None
        if self._same_dims and self_attn:
            q, k, v = self._project_qkv(query)
        else:
            q, k, v = self._project(query, 0), self._project(key, 1), self._project(value, 2)
        past = 0
        if cache is not None:
            past = len(cache)
            k, v = cache.append(k, v)
        lk = k.shape[2]
        mask, causal = self._mask(attn_mask, key_padding_mask, bool_arg(is_causal, op, "is_causal"), bsz, lq, lk,
                                  past, q.dtype, q.device)
        drop = self.dropout if self.training else 0.0
        weights = None
        if need_weights or drop > 0.0:
            scale = 1.0 / math.sqrt(self.head_dim)
            p = ops._attn_probs(q, k, scale, causal, mask)
            if need_weights:
                weights = p.mean(1) if bool_arg(average_attn_weights, op, "average_attn_weights") else p
            if drop > 0.0:
                p = dropout(p, drop, True)
            y = p @ v
        else:
            y = ops.sdpa(q, k, v, causal=causal, mask=mask)
        out = self.out_proj(y.transpose(1, 2).reshape(bsz, lq, self.embed_dim))
        if unbatched:
            out = out.squeeze(0)
            weights = None if weights is None else weights.squeeze(0)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def extra_repr(self):
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kdim={self.kdim}, vdim={self.vdim}"


class RoPE(Module):
    """Rotary position embedding as a layer (MLX's ``nn.RoPE``), over ``em.nn.ops.rope``'s fused kernels.
    It has no parameters.

    Args:
        dims: the number of features rotated (even, at most the input's last dim).
        traditional: the interleaved pair layout ``(2i, 2i + 1)`` instead of ``(i, i + dims / 2)``.
        base: the frequencies' base.
        scale: multiplies the positions.

    Raises:
        EmberValueError: when called with ``dims`` odd, not positive or above the input's last dim.
    """

    def __init__(self, dims, traditional=False, base=10000.0, scale=1.0):
        super().__init__()
        self.dims = int_arg(dims, "RoPE", "dims")
        self.traditional = bool_arg(traditional, "RoPE", "traditional")
        self.base = float_arg(base, "RoPE", "base")
        self.scale = float_arg(scale, "RoPE", "scale")

    def forward(self, x, offset=0):
        """Rotates ``x`` (..., L, D) for positions ``offset .. offset + L - 1``.

        Args:
            x: a float tensor (..., L, D).
            offset: the first position: an int (a KV cache's length) or an int tensor of shape () or (B,).

        Returns:
            Tensor: ``em.nn.ops.rope(x, dims, traditional, base, scale, offset)``.

        Raises:
            EmberValueError, ShapeError, DTypeError: as ``em.nn.ops.rope``.
        """
        return ops.rope(x, self.dims, self.traditional, self.base, self.scale, offset)

    def extra_repr(self):
        return f"dims={self.dims}, traditional={self.traditional}, base={self.base}, scale={self.scale}"
