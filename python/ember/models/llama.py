"""Llama (and its Mistral/Qwen2-style relatives without biases): Hugging Face's LlamaForCausalLM on
ember's fused rms_norm, rope and sdpa (GQA), with the checkpoint's own parameter names."""
from __future__ import annotations

import math

import numpy as np

from ..creation import tensor
from ..errors import EmberValueError, ShapeError
from ..nn import ops
from ..nn.layers import Module, RmsNorm
from .base import CausalLM, config_get, make_embedding, make_linear
from .generation import StaticCache

__all__ = ["Llama", "llama_inv_freq"]


def llama_inv_freq(cfg: dict, head_dim: int) -> np.ndarray:
    """The rotary inverse frequencies (head_dim / 2,) as transformers computes them (float32), with
    the ``rope_scaling`` / ``rope_parameters`` types ``default``, ``linear`` and ``llama3``.

    Raises:
        EmberValueError: another rope type (yarn, dynamic, longrope, ...).
    """
    params = dict(cfg.get("rope_scaling") or {})
    params.update(cfg.get("rope_parameters") or {})  # transformers >= 5 keeps rope_theta there too
    base = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    exps = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv = (1.0 / (np.float32(base) ** exps)).astype(np.float32)
    if kind == "default":
        return inv
    if kind == "linear":
        return (inv / np.float32(params["factor"])).astype(np.float32)
    if kind == "llama3":
        factor = float(params["factor"])
        low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
        old_len = float(params["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = (2 * math.pi / inv).astype(np.float32)
        scaled = np.where(wavelen > low_wavelen, inv / np.float32(factor), inv).astype(np.float32)
        smooth = ((old_len / wavelen - low) / (high - low)).astype(np.float32)
        smoothed = ((1 - smooth) * scaled / np.float32(factor) + smooth * scaled).astype(np.float32)
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, scaled).astype(np.float32)
    raise EmberValueError(f"[Llama] rope type {kind!r} is not supported (default, linear and llama3 are)")


class LlamaAttention(Module):
    """Grouped-query self-attention with rotary positions: q/k/v/o projections named as in transformers."""

    def __init__(self, cfg, dtype, device, init):
        super().__init__()
        self.hidden = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads") or self.heads
        self.head_dim = cfg.get("head_dim") or self.hidden // self.heads
        bias = bool(cfg.get("attention_bias", False))
        std = cfg.get("initializer_range", 0.02)
        hd = self.head_dim
        self.q_proj = make_linear(self.hidden, self.heads * hd, bias, dtype, device, init, std)
        self.k_proj = make_linear(self.hidden, self.kv_heads * hd, bias, dtype, device, init, std)
        self.v_proj = make_linear(self.hidden, self.kv_heads * hd, bias, dtype, device, init, std)
        self.o_proj = make_linear(self.heads * hd, self.hidden, bias, dtype, device, init, std)

    def forward(self, x, freqs, layer, cache):
        b, t, _ = x.shape
        hd = self.head_dim
        q = self.q_proj(x).reshape(b, t, self.heads, hd).transpose(1, 2)
        k = self.k_proj(x).reshape(b, t, self.kv_heads, hd).transpose(1, 2)
        v = self.v_proj(x).reshape(b, t, self.kv_heads, hd).transpose(1, 2)
        pos = 0 if cache is None else cache.pos
        q = ops.rope(q, hd, base=None, offset=pos, freqs=freqs)
        k = ops.rope(k, hd, base=None, offset=pos, freqs=freqs)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        y = ops.sdpa(q, k, v, causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, self.heads * hd))


class LlamaMLP(Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)), the SwiGLU feed-forward."""

    def __init__(self, cfg, dtype, device, init):
        super().__init__()
        h, inter = cfg["hidden_size"], cfg["intermediate_size"]
        bias = bool(cfg.get("mlp_bias", False))
        std = cfg.get("initializer_range", 0.02)
        act = cfg.get("hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise EmberValueError(f"[Llama] hidden_act {act!r} is not supported (silu is)")
        self.gate_proj = make_linear(h, inter, bias, dtype, device, init, std)
        self.up_proj = make_linear(h, inter, bias, dtype, device, init, std)
        self.down_proj = make_linear(inter, h, bias, dtype, device, init, std)

    def forward(self, x):
        return self.down_proj(ops.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(Module):
    """Pre-norm block: x + attn(rms(x)), then + mlp(rms(.))."""

    def __init__(self, cfg, dtype, device, init):
        super().__init__()
        eps = cfg.get("rms_norm_eps", 1e-6)
        self.self_attn = LlamaAttention(cfg, dtype, device, init)
        self.mlp = LlamaMLP(cfg, dtype, device, init)
        self.input_layernorm = RmsNorm(cfg["hidden_size"], eps=eps, dtype=dtype, device=device)
        self.post_attention_layernorm = RmsNorm(cfg["hidden_size"], eps=eps, dtype=dtype, device=device)

    def forward(self, x, freqs, layer=0, cache=None):
        h = x + self.self_attn(self.input_layernorm(x), freqs, layer, cache)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaModel(Module):
    """The decoder stack: embed_tokens, layers, norm (transformers' ``model.`` prefix)."""

    def __init__(self, cfg, dtype, device, init):
        super().__init__()
        std = cfg.get("initializer_range", 0.02)
        self.embed_tokens = make_embedding(cfg["vocab_size"], cfg["hidden_size"], dtype, device, init, std)
        self.layers = [LlamaDecoderLayer(cfg, dtype, device, init) for _ in range(cfg["num_hidden_layers"])]
        self.norm = RmsNorm(cfg["hidden_size"], eps=cfg.get("rms_norm_eps", 1e-6), dtype=dtype, device=device)


class Llama(CausalLM):
    """A Llama-family causal language model (transformers' ``LlamaForCausalLM``): ``model(ids)`` gives
    logits (B, T, vocab); ``generate`` decodes with a KV cache; ``from_pretrained(dir)`` loads a Hugging
    Face checkpoint with its own parameter names, so ``state_dict()`` saves one that transformers reads.

    Args:
        config: the checkpoint's config (a dict, as in config.json): ``vocab_size``, ``hidden_size``,
            ``intermediate_size``, ``num_hidden_layers``, ``num_attention_heads``, optionally
            ``num_key_value_heads`` (GQA), ``head_dim``, ``rms_norm_eps``, ``rope_theta`` and
            ``rope_scaling``/``rope_parameters`` (default, linear, llama3), ``tie_word_embeddings``,
            ``attention_bias``, ``mlp_bias``, ``max_position_embeddings``.
        dtype: the parameters' dtype (default float32).
        device: where they live (default the default device).
    """

    _required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")

    def _build(self, cfg, dtype, device, init):
        heads = cfg["num_attention_heads"]
        kv = cfg.get("num_key_value_heads") or heads
        if heads % kv:
            raise ShapeError(f"[Llama] num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        self.model = LlamaModel(cfg, dtype, device, init)
        if config_get(cfg, "tie_word_embeddings", False):
            self.lm_head = make_linear(cfg["hidden_size"], cfg["vocab_size"], False, dtype, device, False, 0.0,
                                       weight=self.model.embed_tokens.weight)
        else:
            self.lm_head = make_linear(cfg["hidden_size"], cfg["vocab_size"], False, dtype, device, init,
                                       cfg.get("initializer_range", 0.02))
        inv = llama_inv_freq(cfg, head_dim)
        # ember's rope takes the periods 1/inv_freq: theta = position / freqs[i]
        self._freqs_np = (1.0 / inv.astype(np.float64))
        self._freqs = {}
        self._kv_shape = (len(self.model.layers), kv, head_dim)
        self.max_positions = int(cfg.get("max_position_embeddings", 1 << 30))

    def _rope_freqs(self, x):
        key = (x.device, x.dtype.name == "float64")
        f = self._freqs.get(key)
        if f is None:
            f = tensor(self._freqs_np, dtype="float64" if key[1] else "float32", device=x.device)
            self._freqs[key] = f
        return f

    def _forward(self, ids, cache=None, last_only=False):
        x = self.model.embed_tokens(ids)
        freqs = self._rope_freqs(x)
        for i, layer in enumerate(self.model.layers):
            x = self._run_layer(layer, x, freqs, i, cache)
        if cache is not None:
            cache.advance(ids.shape[1])
        if last_only:
            x = x[:, -1:, :]
        return self.lm_head(self.model.norm(x))

    @property
    def device(self):
        """The device of the parameters."""
        return self.model.embed_tokens.weight.device

    def new_cache(self, batch, max_len):
        """A ``StaticCache`` for ``batch`` rows of up to ``max_len`` positions."""
        layers, kv, hd = self._kv_shape
        w = self.model.embed_tokens.weight
        return StaticCache(layers, batch, kv, hd, max_len, w.dtype, w.device)
