"""GPT-2: Hugging Face's GPT2LMHeadModel on ember's fused layer_norm and sdpa, with its Conv1D weight
layout (in, out) and checkpoint names."""
from __future__ import annotations

from ..creation import arange, zeros
from ..errors import EmberValueError, ShapeError
from ..nn import ops
from ..nn.act_fns import gelu
from ..nn.activations import Dropout
from ..nn.layers import LayerNorm, Module
from ..variable import Var
from .base import CausalLM, make_embedding, make_linear, make_param
from .generation import StaticCache

__all__ = ["GPT2", "Conv1D"]

_ACTS = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu_fast": "tanh", "gelu": "none"}


class Conv1D(Module):
    """transformers' ``Conv1D``: ``x @ weight + bias`` with ``weight`` (in_features, out_features), the
    transpose of ``Linear``'s layout (GPT-2 checkpoints store it so).

    Args:
        n_in: input features.
        n_out: output features.
        dtype, device: of the parameters.
        init: draw N(0, std) weights (else zeros, to be loaded).
        std: the init's standard deviation.
    """

    def __init__(self, n_in, n_out, dtype, device, init=True, std=0.02):
        super().__init__()
        self.in_features, self.out_features = n_in, n_out
        self.weight = make_param((n_in, n_out), dtype, device, init, std)
        self.bias = Var(zeros(n_out, dtype=dtype, device=device))

    def forward(self, x):
        lead = x.shape[:-1]
        y = x.reshape(-1, self.in_features) @ self.weight + self.bias
        return y.reshape(*lead, self.out_features)

    def extra_repr(self):
        return f"nf={self.out_features}, nx={self.in_features}"


class GPT2Attention(Module):
    """Causal multi-head attention with one fused c_attn projection (q, k, v) and c_proj."""

    def __init__(self, cfg, layer_idx, dtype, device, init):
        super().__init__()
        self.embed, self.heads = cfg["n_embd"], cfg["n_head"]
        if self.embed % self.heads:
            raise ShapeError(f"[GPT2] n_embd {self.embed} is not a multiple of n_head {self.heads}")
        self.head_dim = self.embed // self.heads
        std = cfg.get("initializer_range", 0.02)
        self.c_attn = Conv1D(self.embed, 3 * self.embed, dtype, device, init, std)
        self.c_proj = Conv1D(self.embed, self.embed, dtype, device, init, std)
        scale = self.head_dim ** -0.5 if cfg.get("scale_attn_weights", True) else 1.0
        if cfg.get("scale_attn_by_inverse_layer_idx", False):
            scale /= float(layer_idx + 1)
        self.scale = scale
        self.attn_dropout = Dropout(cfg.get("attn_pdrop", 0.0))
        self.resid_dropout = Dropout(cfg.get("resid_pdrop", 0.0))

    def forward(self, x, layer, cache):
        b, t, c = x.shape
        qkv = self.c_attn(x).reshape(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if cache is not None:
            k, v = cache.update(layer, k, v)
        if self.training and self.attn_dropout.p > 0:
            # dropout on the attention probabilities needs them: the composite path
            y = self.attn_dropout(ops._attn_probs(q, k, self.scale, True, None)) @ v
        else:
            y = ops.sdpa(q, k, v, scale=self.scale, causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, c)))


class GPT2MLP(Module):
    """c_proj(act(c_fc(x))) with GPT-2's tanh-approximated GELU."""

    def __init__(self, cfg, dtype, device, init):
        super().__init__()
        inner = cfg.get("n_inner") or 4 * cfg["n_embd"]
        std = cfg.get("initializer_range", 0.02)
        act = cfg.get("activation_function", "gelu_new")
        if act not in _ACTS:
            raise EmberValueError(f"[GPT2] activation_function {act!r} is not supported ({sorted(_ACTS)})")
        self.approximate = _ACTS[act]
        self.c_fc = Conv1D(cfg["n_embd"], inner, dtype, device, init, std)
        self.c_proj = Conv1D(inner, cfg["n_embd"], dtype, device, init, std)
        self.dropout = Dropout(cfg.get("resid_pdrop", 0.0))

    def forward(self, x):
        return self.dropout(self.c_proj(gelu(self.c_fc(x), approximate=self.approximate)))


class GPT2Block(Module):
    """x + attn(ln_1(x)), then + mlp(ln_2(.))."""

    def __init__(self, cfg, layer_idx, dtype, device, init):
        super().__init__()
        eps = cfg.get("layer_norm_epsilon", 1e-5)
        self.ln_1 = LayerNorm(cfg["n_embd"], eps=eps, dtype=dtype, device=device)
        self.attn = GPT2Attention(cfg, layer_idx, dtype, device, init)
        self.ln_2 = LayerNorm(cfg["n_embd"], eps=eps, dtype=dtype, device=device)
        self.mlp = GPT2MLP(cfg, dtype, device, init)

    def forward(self, x, layer=0, cache=None):
        h = x + self.attn(self.ln_1(x), layer, cache)
        return h + self.mlp(self.ln_2(h))


class GPT2Model(Module):
    """wte, wpe, the blocks h and ln_f (transformers' ``transformer.`` prefix)."""

    def __init__(self, cfg, dtype, device, init):
        super().__init__()
        std = cfg.get("initializer_range", 0.02)
        self.wte = make_embedding(cfg["vocab_size"], cfg["n_embd"], dtype, device, init, std)
        self.wpe = make_embedding(cfg["n_positions"], cfg["n_embd"], dtype, device, init, 0.01 if init else 0.0)
        self.drop = Dropout(cfg.get("embd_pdrop", 0.0))
        self.h = [GPT2Block(cfg, i, dtype, device, init) for i in range(cfg["n_layer"])]
        self.ln_f = LayerNorm(cfg["n_embd"], eps=cfg.get("layer_norm_epsilon", 1e-5), dtype=dtype, device=device)


class GPT2(CausalLM):
    """GPT-2 (transformers' ``GPT2LMHeadModel``): learned positions, pre-norm blocks with Conv1D
    projections, the output projection tied to ``wte``. ``model(ids)`` gives logits (B, T, vocab);
    ``generate`` decodes with a KV cache; ``from_pretrained(dir)`` loads a Hugging Face checkpoint with
    its own names (``transformer.h.0.attn.c_attn.weight``, ...).

    Args:
        config: the checkpoint's config (a dict): ``vocab_size``, ``n_positions``, ``n_embd``,
            ``n_layer``, ``n_head``, optionally ``n_inner``, ``layer_norm_epsilon``,
            ``activation_function``, ``scale_attn_weights``, ``scale_attn_by_inverse_layer_idx``, the
            dropout probabilities (used in training mode).
        dtype: the parameters' dtype (default float32).
        device: where they live (default the default device).
    """

    _required = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head")

    def _build(self, cfg, dtype, device, init):
        self.transformer = GPT2Model(cfg, dtype, device, init)
        # transformers ties the output projection to wte unless told otherwise
        tie = cfg.get("tie_word_embeddings", True) is not False
        self.lm_head = make_linear(cfg["n_embd"], cfg["vocab_size"], False, dtype, device, init and not tie,
                                   cfg.get("initializer_range", 0.02),
                                   weight=self.transformer.wte.weight if tie else None)
        self.max_positions = int(cfg["n_positions"])
        self._kv_shape = (cfg["n_layer"], cfg["n_head"], cfg["n_embd"] // cfg["n_head"])

    @classmethod
    def _adapt_state(cls, state):
        # older checkpoints store the causal-mask buffers; they are not parameters
        for name in [n for n in state if n.endswith((".attn.bias", ".attn.masked_bias"))
                     and state[n].ndim != 1]:
            del state[name]

    @property
    def device(self):
        """The device of the parameters."""
        return self.transformer.wte.weight.device

    def _forward(self, ids, cache=None, last_only=False):
        t = ids.shape[1]
        start = 0 if cache is None else cache.pos
        pos = arange(start, start + t, dtype="int64", device=ids.device)
        x = self.transformer.drop(self.transformer.wte(ids) + self.transformer.wpe(pos))
        for i, block in enumerate(self.transformer.h):
            x = self._run_layer(block, x, i, cache)
        if cache is not None:
            cache.advance(t)
        if last_only:
            x = x[:, -1:, :]
        return self.lm_head(self.transformer.ln_f(x))

    def new_cache(self, batch, max_len):
        """A ``StaticCache`` for ``batch`` rows of up to ``max_len`` positions."""
        layers, heads, hd = self._kv_shape
        w = self.transformer.wte.weight
        return StaticCache(layers, batch, heads, hd, max_len, w.dtype, w.device)
