"""torch's Transformer layers: TransformerEncoderLayer, TransformerDecoderLayer, their stacks and Transformer,
with torch's arguments and parameter names, on ember's MultiHeadAttention (fused sdpa) and fused layer_norm."""
from __future__ import annotations

import copy

from ..args import bool_arg, float_arg, int_arg
from ..creation import arange, full
from ..errors import EmberTypeError, EmberValueError, ShapeError
from ..multi import where
from ..tensor_type import Tensor
from . import init, ops
from .activations import Dropout
from .attention import MultiHeadAttention
from .layers import LayerNorm, Linear, ModuleList
from .module import Module

__all__ = ["Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
           "TransformerEncoderLayer"]


def _relu(x):
    return x.relu()


def _activation(activation, op):
    if activation == "relu":
        return _relu
    if activation == "gelu":
        return ops.gelu
    if isinstance(activation, str) or not callable(activation):
        raise EmberValueError(f"[{op}] activation must be 'relu', 'gelu' or a callable, got {activation!r}")
    return activation


class _Block(Module):
    """What encoder and decoder layers share: the arguments' checks, the modules in torch's order (self_attn,
    multihead_attn for a decoder, the feed-forward block, the norms, the dropouts) and the blocks."""

    def _setup(self, op, n_blocks, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
               batch_first, norm_first, bias, dtype, device):
        d_model, nhead = int_arg(d_model, op, "d_model"), int_arg(nhead, op, "nhead")
        dff = int_arg(dim_feedforward, op, "dim_feedforward")
        if min(d_model, nhead, dff) < 1:
            raise ShapeError(f"[{op}] d_model, nhead and dim_feedforward must be positive, got {d_model}, {nhead}, "
                             f"{dff}")
        p = float_arg(dropout, op, "dropout")
        self.batch_first = bool_arg(batch_first, op, "batch_first")
        self.norm_first = bool_arg(norm_first, op, "norm_first")
        bias = bool_arg(bias, op, "bias")
        act = _activation(activation, op)
        kw = dict(dtype=dtype, device=device)
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=p, bias=bias, batch_first=self.batch_first, **kw)
        if n_blocks == 3:  # a decoder's cross-attention
            self.multihead_attn = MultiHeadAttention(d_model, nhead, dropout=p, bias=bias,
                                                     batch_first=self.batch_first, **kw)
        self.linear1 = Linear(d_model, dff, bias=bias, **kw)
        self.dropout = Dropout(p)
        self.linear2 = Linear(dff, d_model, bias=bias, **kw)
        self.activation = act
        for i in range(1, n_blocks + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        for i in range(1, n_blocks + 1):
            setattr(self, f"dropout{i}", Dropout(p))

    def _sa_block(self, x, mask, kpm, is_causal):
        y = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=kpm, need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(y)

    def _ff_block(self, x, drop):
        return drop(self.linear2(self.dropout(self.activation(self.linear1(x)))))


def _check_input(x, op, what):
    if not isinstance(x, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor {what}, got {type(x).__name__}")
    if x.ndim not in (2, 3):
        raise ShapeError(f"[{op}] expected {what} of rank 3 (or 2 unbatched), got shape {x.shape}")


class TransformerEncoderLayer(_Block):
    """Self-attention then a feed-forward block, each with a residual connection and a LayerNorm, as
    ``torch.nn.TransformerEncoderLayer`` (the same arguments and parameter names, so a torch state_dict
    loads as it is). Masks as ``MultiHeadAttention`` takes them: bool True = masked out, float added.

    Args:
        d_model: the model width.
        nhead: the number of attention heads (divides d_model).
        dim_feedforward: the hidden width of the feed-forward block.
        dropout: the dropout probability (attention probabilities and the three dropout sites).
        activation: "relu", "gelu" or a callable.
        layer_norm_eps: the LayerNorms' epsilon.
        batch_first: inputs are (B, L, E) (True) or (L, B, E) (False, torch's default).
        norm_first: pre-norm (LayerNorm before each block) instead of post-norm.
        bias: biases in the projections and LayerNorms.
        device: where the parameters live.
        dtype: their dtype (default float32).
    """

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        self._setup("TransformerEncoderLayer", 2, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                    batch_first, norm_first, bias, dtype, device)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        """Runs the layer.

        Args:
            src: (B, L, E) with batch_first, else (L, B, E); or (L, E) unbatched.
            src_mask: (L, L) or (B * nhead, L, L) attention mask.
            src_key_padding_mask: (B, L); True (nonzero) = a padding key to ignore.
            is_causal: each position attends only to itself and earlier ones (no mask needed).

        Returns:
            A tensor of src's shape.
        """
        _check_input(src, "TransformerEncoderLayer", "src")
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x), self.dropout2)
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x, self.dropout2))


class TransformerDecoderLayer(_Block):
    """Self-attention, cross-attention over ``memory``, then a feed-forward block, each with a residual
    connection and a LayerNorm, as ``torch.nn.TransformerDecoderLayer`` (same arguments and names).

    Args:
        d_model: the model width.
        nhead: the number of attention heads.
        dim_feedforward: the hidden width of the feed-forward block.
        dropout: the dropout probability.
        activation: "relu", "gelu" or a callable.
        layer_norm_eps: the LayerNorms' epsilon.
        batch_first: inputs are (B, L, E) (True) or (L, B, E) (False).
        norm_first: pre-norm instead of post-norm.
        bias: biases in the projections and LayerNorms.
        device: where the parameters live.
        dtype: their dtype (default float32).
    """

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        self._setup("TransformerDecoderLayer", 3, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                    batch_first, norm_first, bias, dtype, device)

    def _mha_block(self, x, mem, mask, kpm, is_causal):
        y = self.multihead_attn(x, mem, mem, attn_mask=mask, key_padding_mask=kpm, need_weights=False,
                                is_causal=is_causal)[0]
        return self.dropout2(y)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        """Runs the layer.

        Args:
            tgt: the decoder input, (B, T, E) with batch_first (else (T, B, E)), or (T, E).
            memory: the encoder output, (B, S, E) with batch_first (else (S, B, E)), or (S, E).
            tgt_mask: (T, T) or (B * nhead, T, T) self-attention mask.
            memory_mask: (T, S) or (B * nhead, T, S) cross-attention mask.
            tgt_key_padding_mask: (B, T) padding of tgt.
            memory_key_padding_mask: (B, S) padding of memory.
            tgt_is_causal: causal self-attention (no mask needed).
            memory_is_causal: causal cross-attention.

        Returns:
            A tensor of tgt's shape.
        """
        op = "TransformerDecoderLayer"
        _check_input(tgt, op, "tgt")
        _check_input(memory, op, "memory")
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x), self.dropout3)
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff_block(x, self.dropout3))


def _clones(layer, n, op):
    if not isinstance(layer, Module):
        raise EmberTypeError(f"[{op}] expected a layer Module, got {type(layer).__name__}")
    n = int_arg(n, op, "num_layers")
    if n < 1:
        raise EmberValueError(f"[{op}] num_layers must be positive, got {n}")
    return ModuleList([copy.deepcopy(layer) for _ in range(n)])


class TransformerEncoder(Module):
    """``num_layers`` copies of an encoder layer (independent parameters, ``layers.0.`` ...), then an
    optional norm, as ``torch.nn.TransformerEncoder``.

    Args:
        encoder_layer: the layer to copy.
        num_layers: how many copies.
        norm: a module applied to the output (e.g. a LayerNorm), or None.
        enable_nested_tensor: torch's flag, accepted (ember has no nested tensors).
        mask_check: torch's flag, accepted.
    """

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers, "TransformerEncoder")
        self.num_layers = len(self.layers)
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        """Runs every layer with the same masks, then the norm.

        Args:
            src: the input, as the layers take it.
            mask: the attention mask for every layer.
            src_key_padding_mask: (B, L) padding mask.
            is_causal: causal self-attention in every layer.

        Returns:
            A tensor of src's shape.
        """
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    """``num_layers`` copies of a decoder layer, then an optional norm, as ``torch.nn.TransformerDecoder``.

    Args:
        decoder_layer: the layer to copy.
        num_layers: how many copies.
        norm: a module applied to the output, or None.
    """

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers, "TransformerDecoder")
        self.num_layers = len(self.layers)
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        """Runs every layer with the same masks and memory, then the norm.

        Returns:
            A tensor of tgt's shape.
        """
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=bool(tgt_is_causal),
                      memory_is_causal=memory_is_causal)
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """The encoder-decoder Transformer of "Attention Is All You Need", as ``torch.nn.Transformer``: an
    encoder stack and a decoder stack, each ending in a LayerNorm; matrices are xavier-uniform
    initialised as torch's.

    Args:
        d_model: the model width.
        nhead: the number of heads.
        num_encoder_layers: encoder layers.
        num_decoder_layers: decoder layers.
        dim_feedforward: the feed-forward width.
        dropout: the dropout probability.
        activation: "relu", "gelu" or a callable.
        custom_encoder: a module to use as the encoder instead.
        custom_decoder: a module to use as the decoder instead.
        layer_norm_eps: the LayerNorms' epsilon.
        batch_first: inputs are (B, L, E) (True) or (L, B, E) (False).
        norm_first: pre-norm layers.
        bias: biases in the projections and LayerNorms.
        device: where the parameters live.
        dtype: their dtype.
    """

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048,
                 dropout=0.1, activation="relu", custom_encoder=None, custom_decoder=None, layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                            batch_first, norm_first, bias, **kw)
            self.encoder = TransformerEncoder(layer, num_encoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                            batch_first, norm_first, bias, **kw)
            self.decoder = TransformerDecoder(layer, num_decoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self.d_model, self.nhead, self.batch_first = int(d_model), int(nhead), bool(batch_first)
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        """Encodes src, then decodes tgt against it.

        Args:
            src: the encoder input.
            tgt: the decoder input.
            src_mask: the encoder's attention mask.
            tgt_mask: the decoder's self-attention mask (e.g. ``generate_square_subsequent_mask``).
            memory_mask: the cross-attention mask.
            src_key_padding_mask: (B, S) padding of src.
            tgt_key_padding_mask: (B, T) padding of tgt.
            memory_key_padding_mask: (B, S) padding of the memory.
            src_is_causal: causal encoder self-attention.
            tgt_is_causal: causal decoder self-attention.
            memory_is_causal: causal cross-attention.

        Returns:
            The decoder's output, tgt's shape.

        Raises:
            ShapeError: src and tgt disagree on the batch or the width.
        """
        _check_input(src, "Transformer", "src")
        _check_input(tgt, "Transformer", "tgt")
        bdim = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[bdim] != tgt.shape[bdim]:
            raise ShapeError(f"[Transformer] the batch of src and tgt must be equal, got {src.shape} and {tgt.shape}")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ShapeError(f"[Transformer] the feature size of src and tgt must be d_model={self.d_model}, got "
                             f"{src.shape} and {tgt.shape}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz, device=None, dtype=None):
        """The (sz, sz) causal float mask: 0 on and below the diagonal, -inf above, as torch's."""
        sz = int_arg(sz, "generate_square_subsequent_mask", "sz")
        rows = arange(sz, device=device).reshape(sz, 1)
        keep = rows.ge(arange(sz, device=device).reshape(1, sz))
        dt = dtype or "float32"
        return where(keep, full((), 0.0, dtype=dt, device=device), full((), float("-inf"), dtype=dt, device=device))
