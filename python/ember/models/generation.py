"""What the language models share: a preallocated KV cache, next-token sampling and the generate loop."""
from __future__ import annotations

from ..args import float_arg, int_arg
from ..backprop import no_grad
from ..creation import full, tensor, zeros
from ..errors import EmberTypeError, EmberValueError, ShapeError
from ..multi import cat, where
from ..nn import ops
from ..sampling import multinomial
from ..tensor_type import Tensor

__all__ = ["StaticCache", "GenerationMixin", "sample_next"]


class StaticCache:
    """Keys and values of every layer, preallocated to ``max_len`` positions so a decode step writes
    one slot in place instead of copying the whole cache (``KVCache`` in ``em.nn`` grows by ``cat``).

    Args:
        layers: the number of layers.
        batch: the batch size.
        kv_heads: the key/value heads per layer.
        head_dim: the size of one head.
        max_len: the most positions it holds.
        dtype, device: of the buffers.
    """

    def __init__(self, layers, batch, kv_heads, head_dim, max_len, dtype, device):
        self.max_len = int_arg(max_len, "StaticCache", "max_len")
        shape = (batch, kv_heads, self.max_len, head_dim)
        self.k = [zeros(*shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [zeros(*shape, dtype=dtype, device=device) for _ in range(layers)]
        self.pos = 0  # the number of positions already written

    def update(self, layer, k, v):
        """Writes the new keys/values (B, Hkv, T, D) of ``layer`` after the cached ones and returns
        views of everything cached so far (B, Hkv, pos + T, D). The caller advances ``pos`` once per
        step (``advance``), after the last layer.

        Raises:
            ShapeError: the step runs past ``max_len``.
        """
        t = k.shape[2]
        if self.pos + t > self.max_len:
            raise ShapeError(f"[generate] the KV cache holds {self.max_len} positions; {self.pos + t} needed")
        self.k[layer].slice_set(k, 2, self.pos)
        self.v[layer].slice_set(v, 2, self.pos)
        return self.k[layer].narrow(2, 0, self.pos + t), self.v[layer].narrow(2, 0, self.pos + t)

    def advance(self, t):
        """Marks ``t`` more positions as written."""
        self.pos += t


def sample_next(logits: Tensor, temperature=0.0, top_k=None, top_p=None) -> Tensor:
    """The next token of each row of ``logits`` (B, V): the argmax when ``temperature`` is 0, else a
    draw from ``softmax(logits / temperature)`` restricted to the ``top_k`` largest and to the smallest
    set whose probability reaches ``top_p`` (transformers' filters; ``em.manual_seed`` makes it
    reproducible).

    Returns:
        Tensor: int64 (B, 1).

    Raises:
        EmberValueError: a negative temperature, ``top_k < 1`` or ``top_p`` outside (0, 1].
    """
    temperature = float_arg(temperature, "generate", "temperature")
    if temperature < 0:
        raise EmberValueError(f"[generate] temperature must be >= 0, got {temperature}")
    if temperature == 0.0:
        return logits.argmax(-1, keepdim=True)
    logits = logits.float() / temperature
    vocab = logits.shape[-1]
    if top_k is not None:
        top_k = int_arg(top_k, "generate", "top_k")
        if top_k < 1:
            raise EmberValueError(f"[generate] top_k must be >= 1, got {top_k}")
        if top_k < vocab:
            kth = logits.topk(top_k, -1)[0].narrow(-1, top_k - 1, 1)
            logits = where(logits < kth, float("-inf"), logits)
    probs = ops.softmax(logits, -1)
    if top_p is not None:
        top_p = float_arg(top_p, "generate", "top_p")
        if not 0.0 < top_p <= 1.0:
            raise EmberValueError(f"[generate] top_p must be in (0, 1], got {top_p}")
        if top_p < 1.0:
            sorted_p = probs.sort(-1, descending=True)[0]
            before = sorted_p.cumsum(-1) - sorted_p  # probability mass strictly above each entry
            # the smallest kept probability: entries whose mass above is below top_p stay (the first always)
            kept = where(before < top_p, sorted_p, 2.0).min(-1, keepdim=True)
            probs = where(probs < kept, 0.0, probs)
    return multinomial(probs, 1)


class GenerationMixin:
    """``generate`` for a causal language model that defines ``_forward(ids, cache, last_only)`` and
    ``new_cache(batch, max_len)``."""

    def generate(self, ids, max_new_tokens, temperature=0.0, top_k=None, top_p=None, eos_token_id=None):
        """Continues each row of ``ids`` by ``max_new_tokens`` tokens with a KV cache: one prefill step
        over the prompt, then one step per token. Greedy at ``temperature=0`` (the default), else
        sampled (see ``sample_next``), seeded by ``em.manual_seed``.

        Args:
            ids: (B, T) or (T,) int token ids (a Tensor, list or numpy array).
            max_new_tokens: how many tokens to add (>= 0).
            temperature, top_k, top_p: the sampling filters.
            eos_token_id: optional; a row that produced it keeps producing it (as transformers pads).

        Returns:
            Tensor: int64 (B, T + max_new_tokens) (or (T + max_new_tokens,) for 1-D ids): the prompt
            followed by the new tokens.

        Raises:
            ShapeError: empty prompt, or more positions than the model's context.
            EmberValueError, EmberTypeError: bad arguments.
        """
        if not isinstance(ids, Tensor):
            ids = tensor(ids, dtype="int64")
        if ids.dtype.is_float:
            raise EmberTypeError(f"[generate] expected integer token ids, got {ids.dtype.name}")
        squeeze = ids.ndim == 1
        if squeeze:
            ids = ids.unsqueeze(0)
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise ShapeError(f"[generate] expected ids of shape (B, T) with T >= 1, got {ids.shape}")
        max_new_tokens = int_arg(max_new_tokens, "generate", "max_new_tokens")
        if max_new_tokens < 0:
            raise EmberValueError(f"[generate] max_new_tokens must be >= 0, got {max_new_tokens}")
        ids = ids.to_device(self.device).to_dtype("int64")
        total = ids.shape[1] + max_new_tokens
        if total > self.max_positions:
            raise ShapeError(f"[generate] {total} positions exceed the model's context of {self.max_positions}")
        out = [ids]
        with no_grad():
            cache = self.new_cache(ids.shape[0], total)
            logits = self._forward(ids, cache, last_only=True)
            done = None
            for _ in range(max_new_tokens):
                nxt = sample_next(logits[:, -1, :], temperature, top_k, top_p)
                if eos_token_id is not None:
                    if done is not None:
                        nxt = where(done, full((nxt.shape[0], 1), eos_token_id, dtype="int64",
                                               device=nxt.device), nxt)
                    hit = nxt == eos_token_id
                    done = hit if done is None else (done | hit)
                out.append(nxt)
                if len(out) - 1 < max_new_tokens:
                    logits = self._forward(nxt, cache, last_only=True)
        res = cat(out, 1)
        return res[0] if squeeze else res
