"""The base of em.models' language models: construction from a config, from_pretrained, logits."""
from __future__ import annotations

from ..checkpoint import checkpoint as _checkpoint
from ..creation import randn, tensor, zeros
from ..dtypes import get_default_device, to_device, to_dtype
from ..errors import EmberTypeError, EmberValueError, ShapeError
from ..nn.layers import Embedding, Linear, Module
from ..tensor_type import Tensor
from ..variable import Var
from .checkpoint import read_config, read_state
from .generation import GenerationMixin

__all__ = ["CausalLM", "config_get", "make_embedding", "make_linear", "make_param"]


def config_get(cfg: dict, key, default):
    """``cfg[key]``, or ``default`` when it is absent or null."""
    v = cfg.get(key)
    return default if v is None else v


def make_param(shape, dtype, device, init, std):
    """A parameter: N(0, std) like transformers' ``_init_weights`` when ``init``, else zeros (about to
    be overwritten by a checkpoint, so no random numbers are drawn for nothing)."""
    if init:
        return Var((randn(*shape, device=device) * std).to_dtype(dtype))
    return Var(zeros(*shape, dtype=dtype, device=device))


def make_linear(n_in, n_out, bias, dtype, device, init, std, weight=None) -> Linear:
    """An ``em.nn.Linear`` (weight (out, in)) initialised as transformers does (normal weights, zero
    bias), or sharing ``weight`` (tied embeddings)."""
    lin = Linear.__new__(Linear)
    Module.__init__(lin)
    lin.in_features, lin.out_features = n_in, n_out
    lin.weight = weight if weight is not None else make_param((n_out, n_in), dtype, device, init, std)
    lin.bias = Var(zeros(n_out, dtype=dtype, device=device)) if bias else None
    return lin


def make_embedding(num, dim, dtype, device, init, std) -> Embedding:
    """An ``em.nn.Embedding`` initialised N(0, std) as transformers does."""
    emb = Embedding.__new__(Embedding)
    Module.__init__(emb)
    emb.num_embeddings, emb.dim = num, dim
    emb.weight = make_param((num, dim), dtype, device, init, std)
    return emb


class CausalLM(Module, GenerationMixin):
    """A causal language model built from a Hugging Face config: ``model(ids)`` -> logits
    (B, T, vocab), ``generate``, ``from_pretrained``. Subclasses define ``_build``, ``_forward`` and
    ``new_cache``."""

    _required: tuple = ()

    def __init__(self, config: dict, dtype=None, device=None, checkpoint=False, _init=True):
        """Args:
            config: the checkpoint's config, as a dict.
            dtype: the parameters' dtype (default float32).
            device: where they live (default: the default device).
            checkpoint: in training, run each layer through ``em.checkpoint`` (its activations are
                recomputed in backward instead of kept); also settable later as ``model.checkpoint``.
        """
        super().__init__()
        self.checkpoint = bool(checkpoint)
        if not isinstance(config, dict):
            raise EmberTypeError(f"[{type(self).__name__}] expected the config as a dict, got {type(config).__name__}")
        missing = [k for k in self._required if config.get(k) is None]
        if missing:
            raise EmberValueError(f"[{type(self).__name__}] the config lacks {missing}")
        self.config = dict(config)
        dtype = to_dtype(dtype or "float32")
        device = to_device(device) if device is not None else get_default_device()
        self._build(self.config, dtype, device, _init)
        self.eval()

    @classmethod
    def from_pretrained(cls, path, dtype=None, device=None):
        """Loads a Hugging Face checkpoint directory (``config.json`` and ``model.safetensors`` or a
        sharded ``model.safetensors.index.json``), in inference mode (``.train()`` to fine-tune).

        Args:
            path: the directory.
            dtype: the parameters' dtype; default: the dtype the checkpoint stores its weights in.
            device: where the model lives (default: the default device).

        Returns:
            The model, with the checkpoint's parameter names.

        Raises:
            EmberIOError: a missing or unreadable file.
            EmberValueError: an unsupported configuration, missing or unexpected weights.
            ShapeError: a weight of the wrong shape.
        """
        op = f"{cls.__name__}.from_pretrained"
        cfg = read_config(path, op)
        state = read_state(path, op, device=device)
        cls._adapt_state(state)
        if dtype is None:
            floats = [t.dtype for t in state.values() if t.dtype.is_float]
            dtype = floats[0] if floats else "float32"
        model = cls(cfg, dtype=dtype, device=device, _init=False)
        model.load_state_dict(state, strict=True)
        return model

    def _run_layer(self, layer, x, *args):
        """One decoder layer, through ``em.checkpoint`` when asked for and no cache is filled."""
        if self.checkpoint and self.training and args[-1] is None:
            return _checkpoint(layer, x, *args)
        return layer(x, *args)

    @classmethod
    def _adapt_state(cls, state):
        """Drops or renames checkpoint entries that are not parameters (a subclass hook)."""

    def load_state_dict(self, state, strict=True):
        """As ``Module.load_state_dict``; a tied output projection may be absent from ``state`` (as in
        transformers' checkpoints) or present and equal."""
        state = dict(state)
        tied = self._tied_names()
        for alias, source in tied.items():
            if alias in state and source not in state:
                state[source] = state[alias]
            state.pop(alias, None)
        return super().load_state_dict(state, strict)

    def _tied_names(self):
        """{name of a tied alias: name of the parameter it shares} (none by default)."""
        names = {}
        params = {}
        for mname, m in self.named_modules():
            for pname, value in vars(m).items():
                if isinstance(value, Var):
                    full_name = f"{mname}.{pname}" if mname else pname
                    if id(value) in params:
                        names[full_name] = params[id(value)]
                    else:
                        params[id(value)] = full_name
        return names

    def forward(self, ids) -> Tensor:
        """Logits (B, T, vocab) for int token ids (B, T) (a Tensor, list or numpy array; (T,) gives
        (T, vocab))."""
        if not isinstance(ids, Tensor):
            ids = tensor(ids, dtype="int64")
        if ids.dtype.is_float:
            raise EmberTypeError(f"[{type(self).__name__}] expected integer token ids, got {ids.dtype.name}")
        squeeze = ids.ndim == 1
        if squeeze:
            ids = ids.unsqueeze(0)
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise ShapeError(f"[{type(self).__name__}] expected ids of shape (B, T), got {ids.shape}")
        if ids.shape[1] > self.max_positions:
            raise ShapeError(f"[{type(self).__name__}] {ids.shape[1]} positions exceed the model's context of "
                             f"{self.max_positions}")
        logits = self._forward(ids.to_device(self.device))
        return logits[0] if squeeze else logits
