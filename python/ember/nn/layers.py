"""nn layers: Module (parameters, state_dict, train/eval) and the pieces of a small transformer."""
from __future__ import annotations

import math

from ..args import float_arg, int_arg
from ..checkpoint import checkpoint
from ..creation import ones, rand, randn, tensor, zeros
from ..dtypes import to_device, to_dtype
from ..errors import DTypeError, EmberTypeError, EmberValueError, ShapeError
from ..tensor_type import Tensor
from ..variable import Var
from . import ops
from .module import Module, Parameter  # noqa: F401  (Module's home was here)


class ModuleList(Module):
    """A list of submodules, named by index like torch's ModuleList."""

    def __init__(self, modules=()):
        super().__init__()
        if modules is None:  # torch's ModuleList(None) is an empty list too
            modules = ()
        try:
            items = list(modules)
        except TypeError:
            raise EmberTypeError(f"[{type(self).__name__}] expected an iterable of Modules, got "
                             f"{type(modules).__name__}") from None
        self.items = []
        for m in items:
            self.append(m)

    def _children(self):
        for i, m in enumerate(self.items):
            yield str(i), m

    def __iter__(self):
        return iter(self.items)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def append(self, m):
        if not isinstance(m, Module):  # caught here, not at the first forward or parameters() call
            raise EmberTypeError(f"[{type(self).__name__}] item {len(self.items)} is a {type(m).__name__}, not a Module")
        self.items.append(m)
        return self


class Sequential(ModuleList):
    """Runs its modules one after the other, as ``torch.nn.Sequential(a, b, c)`` (a single list or
    tuple of modules is accepted too); submodules are named "0", "1", ...

    Raises:
        DTypeError: when an argument is not a Module.
    """

    def __init__(self, *modules):
        if len(modules) == 1 and not isinstance(modules[0], Module):
            modules = modules[0]  # Sequential([a, b]): the older list form
        super().__init__(modules)

    def forward(self, x):
        for m in self.items:
            x = m(x)
        return x


def _uniform(shape, bound, dtype, device):
    return Var(rand(*shape, lo=-bound, hi=bound, device=device).to_dtype(dtype))


class Linear(Module):
    """y = x @ weight.T + bias, weight (out_features, in_features); torch's default init
    (kaiming-uniform with a=sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)), for weight and bias)."""

    def __init__(self, in_features, out_features, bias=True, dtype=None, device=None):
        """Args:
            in_features: the size of each input's last dim.
            out_features: the size of each output's last dim.
            bias: add a learned bias.
            dtype: the parameters' dtype (default float32).
            device: where the parameters live (default the CPU).
        """
        super().__init__()
        in_features, out_features = int_arg(in_features, "Linear", "in_features"), int_arg(out_features, "Linear", "out_features")
        if in_features <= 0 or out_features <= 0:
            raise ShapeError(f"[Linear] features must be positive, got ({in_features}, {out_features})")
        dtype, device = to_dtype(dtype or "float32"), to_device(device)
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight = _uniform((out_features, in_features), bound, dtype, device)
        self.bias = _uniform((out_features,), bound, dtype, device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return self._finish(*self._product(x))

    def _product(self, x):
        """(x @ weight.T as a 2-D (rows, out_features) tensor, x's leading shape): forward without the bias."""
        ops._check_tensor(x, "Linear")
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ShapeError(f"[Linear] expected input (..., {self.in_features}), got {x.shape}")
        # One 2-D GEMM over all leading dims instead of a broadcast batched matmul.
        return x.reshape(-1, self.in_features) @ self.weight.t(), x.shape[:-1]

    def _residual(self, x, r):
        """r + self(x), r of the output's shape: with a bias, the bias and residual adds are one pass
        (ops.bias_residual) instead of two."""
        y, lead = self._product(x)
        shape = (*lead, self.out_features)
        b = self.bias
        if b is None or not isinstance(r, Tensor) or r.shape != shape or not r.dtype == b.dtype == y.dtype \
                or not r.device == b.device == y.device:
            return r + self._finish(y, lead)
        # r as it is (not a reshaped view): the walk then folds its gradient into the norm's backward that reads r
        return ops.bias_residual(y.reshape(*shape), b, r)

    def _finish(self, y, lead):
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """A lookup table (num_embeddings, dim) initialised N(0, 1) like torch; input: integer ids."""

    def __init__(self, num_embeddings, dim, dtype=None, device=None):
        """Args:
            num_embeddings: the number of rows (the vocabulary size).
            dim: the size of each row.
            dtype: the parameters' dtype (default float32).
            device: where the parameters live (default the CPU).
        """
        super().__init__()
        dtype, device = to_dtype(dtype or "float32"), to_device(device)
        self.num_embeddings, self.dim = int_arg(num_embeddings, "Embedding", "num_embeddings"), int_arg(dim, "Embedding", "dim")
        num_embeddings, dim = self.num_embeddings, self.dim
        self.weight = Var(randn(num_embeddings, dim, device=device).to_dtype(dtype))

    def forward(self, ids) -> Tensor:
        if not isinstance(ids, Tensor):
            ids = tensor(ids, device=self.weight.device)  # a list or array goes where the table is
        if ids.dtype.is_float:
            raise DTypeError(f"[Embedding] expected integer ids, got {ids.dtype.name}")
        out = self.weight.index_select(ids.reshape(-1), 0)
        return out.reshape(*ids.shape, self.dim)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.dim}"


class RmsNorm(Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last dim (weight starts at ones)."""

    def __init__(self, dim, eps=1e-5, dtype=None, device=None):
        """Args:
            dim: the size of the normalised (last) dim.
            eps: added to the variance or mean square.
            dtype: the parameters' dtype (default float32).
            device: where the parameters live (default the CPU).
        """
        super().__init__()
        self.dim, self.eps = int_arg(dim, "RmsNorm", "dim"), float_arg(eps, "RmsNorm", "eps")
        self.weight = Var(ones(self.dim, dtype=to_dtype(dtype or "float32"), device=device))

    def forward(self, x):
        return ops.rms_norm(x, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.dim}, eps={self.eps}"


class LayerNorm(Module):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dims, as ``torch.nn.LayerNorm``
    (weight starts at ones, bias at zeros); one fused kernel."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, dtype=None, device=None):
        """Args:
            normalized_shape: the size of the normalised last dim, or a tuple of the last dims' sizes.
            eps: added to the variance; must be positive (with 0 a constant row is 0 / 0).
            elementwise_affine: learn a weight (and a bias, unless ``bias`` is False).
            bias: learn a bias (with ``elementwise_affine``).
            dtype: the parameters' dtype (default float32).
            device: where the parameters live (default the CPU).

        Raises:
            EmberValueError: eps is not positive.
        """
        super().__init__()
        shape = normalized_shape if isinstance(normalized_shape, (tuple, list)) else (normalized_shape,)
        self.normalized_shape = tuple(_features(d, "LayerNorm", "normalized_shape") for d in shape)
        if not self.normalized_shape:
            raise ShapeError("[LayerNorm] normalized_shape must name at least one dim")
        self.dim = math.prod(self.normalized_shape)
        self.eps = ops._check_eps(eps, "layer_norm")
        self.elementwise_affine = bool(elementwise_affine)
        dtype = to_dtype(dtype or "float32")
        self.weight = Var(ones(*self.normalized_shape, dtype=dtype, device=device)) if elementwise_affine else None
        self.bias = Var(zeros(*self.normalized_shape, dtype=dtype, device=device)) \
            if elementwise_affine and bias else None

    def forward(self, x):
        n = len(self.normalized_shape)
        if n == 1:
            return ops.layer_norm(x, self.weight, self.bias, self.eps)
        ops._check_tensor(x, "LayerNorm")
        if x.shape[x.ndim - n:] != self.normalized_shape or x.ndim < n:
            raise ShapeError(f"[LayerNorm] expected input (..., {', '.join(map(str, self.normalized_shape))}), "
                             f"got {x.shape}")
        flat = lambda t: None if t is None else t.reshape(self.dim)  # noqa: E731
        y = ops.layer_norm(x.reshape(*x.shape[:x.ndim - n], self.dim), flat(self.weight), flat(self.bias), self.eps)
        return y.reshape(x.shape)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class CausalSelfAttention(Module):
    """Multi-head causal self-attention on ``ops.sdpa``: one fused qkv projection, one output one."""

    def __init__(self, dim, n_heads, bias=False, dtype=None, device=None):
        """Args:
            dim: the model width (input and output last dim).
            n_heads: the number of heads; must divide ``dim``.
            bias: add biases to the projections.
            dtype: the parameters' dtype (default float32).
            device: where the parameters live (default the CPU).
        """
        super().__init__()
        dim, n_heads = int_arg(dim, "CausalSelfAttention", "dim"), int_arg(n_heads, "CausalSelfAttention", "n_heads")
        if n_heads <= 0:  # dim % 0 would raise a bare ZeroDivisionError
            raise ShapeError(f"[CausalSelfAttention] n_heads must be positive, got {n_heads}")
        if dim % n_heads:
            raise ShapeError(f"[CausalSelfAttention] dim {dim} is not divisible by n_heads {n_heads}")
        self.dim, self.n_heads, self.head_dim = dim, n_heads, dim // n_heads
        self.qkv = Linear(dim, 3 * dim, bias=bias, dtype=dtype, device=device)
        self.proj = Linear(dim, dim, bias=bias, dtype=dtype, device=device)

    def forward(self, x):
        ops._check_tensor(x, "CausalSelfAttention")
        if x.ndim != 3 or x.shape[-1] != self.dim:
            raise ShapeError(f"[CausalSelfAttention] expected input (batch, seq, {self.dim}), got {x.shape}")
        # sdpa of the packed projection's (b, heads, t, head_dim) views, back to (b, t, dim) (in place on the CPU)
        return self.proj(ops.sdpa_qkv(self.qkv(x), self.n_heads, causal=True))

    def extra_repr(self):
        return f"dim={self.dim}, n_heads={self.n_heads}"


def _relu(x):
    return x.relu()  # a module-level function (not a lambda), so that an MLP pickles


_ACTS = {"gelu": ops.gelu, "silu": ops.silu, "relu": _relu}


def _features(v, op, what):
    """A positive feature count, the error named after the layer's own argument."""
    n = int_arg(v, op, what)
    if n <= 0:
        raise ShapeError(f"[{op}] {what} must be positive, got {n}")
    return n


class MLP(Module):
    """fc -> activation -> proj. ``activation``: "gelu" | "silu" | "relu" or any callable."""

    def __init__(self, dim, hidden, activation="gelu", bias=True, dtype=None, device=None):
        """Args:
            dim: the input and output width.
            hidden: the width of the hidden layer.
            activation: "gelu", "silu", "relu" or a callable of one tensor.
            bias: add biases to both layers.
            dtype: the parameters' dtype (default float32).
            device: where the parameters live (default the CPU).
        """
        super().__init__()
        dim, hidden = _features(dim, "MLP", "dim"), _features(hidden, "MLP", "hidden")
        self.fc = Linear(dim, hidden, bias=bias, dtype=dtype, device=device)
        self.proj = Linear(hidden, dim, bias=bias, dtype=dtype, device=device)
        if isinstance(activation, str) and activation not in _ACTS or not isinstance(activation, str) and not callable(activation):
            raise EmberValueError(f"[MLP] activation must be one of {sorted(_ACTS)} or a callable, got {activation!r}")
        self.act = _ACTS[activation] if isinstance(activation, str) else activation

    def forward(self, x):
        return self.proj(self._hidden(x))

    def _hidden(self, x):
        fc = self.fc
        if self.act is ops.gelu and type(fc) is Linear and fc.bias is not None:
            # gelu(x W^T + b): the bias rides in gelu's pass (ops.bias_gelu), forward and backward
            y, lead = fc._product(x)
            return ops.bias_gelu(y, fc.bias).reshape(*lead, fc.out_features)
        return self.act(fc(x))

    def _residual(self, x, r):
        """r + self(x), the residual add (and proj's bias) folded into the output projection (Linear._residual)."""
        h = self._hidden(x)
        return self.proj._residual(h, r) if type(self.proj) is Linear else r + self.proj(h)


def swiglu(gate, up):
    """silu(gate) * up: the default gated activation (composite, differentiable)."""
    return ops.silu(gate) * up


class GatedMLP(Module):
    """down(act(gate(x), up(x))): a SwiGLU-style MLP; ``activation(gate, up)`` takes two tensors,
    e.g. a user CustomOp2 applied with ``gate.apply_op2(up, op)``."""

    def __init__(self, dim, hidden, activation=swiglu, bias=False, dtype=None, device=None):
        """Args:
            dim: the input and output width.
            hidden: the width of the gated hidden layer.
            activation: a callable ``(gate, up) -> Tensor``; default ``swiglu``.
            bias: add biases to the three projections.
            dtype: the parameters' dtype (default float32).
            device: where the parameters live (default the CPU).
        """
        super().__init__()
        dim, hidden = _features(dim, "GatedMLP", "dim"), _features(hidden, "GatedMLP", "hidden")
        if not callable(activation):
            raise EmberValueError(f"[GatedMLP] activation must be a callable of (gate, up), got {activation!r}")
        self.gate = Linear(dim, hidden, bias=bias, dtype=dtype, device=device)
        self.up = Linear(dim, hidden, bias=bias, dtype=dtype, device=device)
        self.down = Linear(hidden, dim, bias=bias, dtype=dtype, device=device)
        self.act = activation

    def forward(self, x):
        return self.down(self.act(self.gate(x), self.up(x)))


class TransformerBlock(Module):
    """Pre-norm block: x + attn(norm1(x)), then + mlp(norm2(x)). ``mlp`` defaults to a GatedMLP."""

    def __init__(self, dim, n_heads, mlp=None, norm="rms", eps=1e-5, dtype=None, device=None, checkpoint=False):
        """Args:
            dim: the model width.
            n_heads: the number of attention heads.
            mlp: the feed-forward module (default a GatedMLP of width 4 * dim, rounded).
            norm: "rms" (RmsNorm) or "layer" (LayerNorm).
            eps: the norms' epsilon.
            dtype: the parameters' dtype (default float32).
            device: where the parameters live (default the CPU).
            checkpoint: run the block through ``em.checkpoint`` in training: its activations are
                recomputed in backward instead of kept (less memory, one more forward).
        """
        super().__init__()
        self.checkpoint = bool(checkpoint)
        norms = {"rms": RmsNorm, "layer": LayerNorm}
        if norm not in norms:  # a bare KeyError before
            raise EmberValueError(f"[TransformerBlock] norm must be 'rms' or 'layer', got {norm!r}")
        norm_cls = norms[norm]
        self.norm1 = norm_cls(dim, eps, dtype=dtype, device=device)
        self.attn = CausalSelfAttention(dim, n_heads, dtype=dtype, device=device)
        self.norm2 = norm_cls(dim, eps, dtype=dtype, device=device)
        self.mlp = mlp if mlp is not None else GatedMLP(dim, 4 * dim, dtype=dtype, device=device)

    def forward(self, x):
        if self.checkpoint:
            return checkpoint(self._block, x)
        return self._block(x)

    def _block(self, x):
        x = x + self.attn(self.norm1(x))
        mlp = self.mlp
        # the stock MLP adds its output bias and the residual in one pass (MLP._residual)
        return mlp._residual(self.norm2(x), x) if type(mlp) is MLP else x + mlp(self.norm2(x))
