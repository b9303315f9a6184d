"""nn layers: Module (parameters, state_dict, train/eval) and the pieces of a small transformer."""
from __future__ import annotations

import math

from ..args import float_arg, int_arg
from ..dtypes import to_device, to_dtype
from ..errors import DTypeError, EmberTypeError, EmberValueError, GradientsInStore, ShapeError
from ..tensor import Tensor, Var, ones, rand, randn, tensor, zeros
from . import ops


class Module:
    """Base class of layers. Attributes that are ``Var``s are parameters; attributes that are
    modules (or lists/tuples of modules) are submodules, named like torch (``blocks.0.attn.qkv.weight``)."""

    training = True  # class default, so subclasses work even without calling Module.__init__

    def __init__(self):
        self.training = True

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"[{type(self).__name__}] forward is not implemented")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------------ traversal
    def _children(self):
        """(name, child) for direct submodules, in attribute order; list entries are named by index."""
        for name, value in vars(self).items():
            if isinstance(value, Module):
                yield name, value
            elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Module) for v in value):
                for i, v in enumerate(value):
                    yield f"{name}.{i}", v

    def named_modules(self, prefix=""):
        seen = set()
        stack = [(prefix, self)]
        while stack:  # iterative pre-order: deep models never hit the recursion limit
            name, m = stack.pop()
            if id(m) in seen:
                continue
            seen.add(id(m))
            yield name, m
            kids = [(f"{name}.{n}" if name else n, c) for n, c in m._children()]
            stack.extend(reversed(kids))

    def modules(self):
        return [m for _, m in self.named_modules()]

    def children(self):
        return [m for _, m in self._children()]

    def named_parameters(self, prefix=""):
        """(name, Var) pairs with torch's dotted names; a parameter shared by two layers appears once."""
        seen = set()
        out = []
        for mname, m in self.named_modules(prefix):
            for pname, value in vars(m).items():
                if isinstance(value, Var) and id(value) not in seen:
                    seen.add(id(value))
                    out.append((f"{mname}.{pname}" if mname else pname, value))
        return out

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def named_buffers(self, prefix=""):
        """(name, tensor) pairs of the state that is not learned (BatchNorm's running statistics), the
        names a module lists in ``_buffer_names``, dotted like parameters; None entries are left out."""
        out = []
        for mname, m in self.named_modules(prefix):
            for bname in getattr(m, "_buffer_names", ()):
                value = getattr(m, bname, None)
                if isinstance(value, Tensor):
                    out.append((f"{mname}.{bname}" if mname else bname, value))
        return out

    def buffers(self):
        return [b for _, b in self.named_buffers()]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """{name: tensor} sharing the parameters' storage (detached), ready for save_safetensors."""
        state = {name: p.detach() for name, p in self.named_parameters()}
        state.update((name, b.detach()) for name, b in self.named_buffers())
        return state

    def load_state_dict(self, state: dict, strict: bool = True):
        """Writes values into the existing parameters (in place). Returns (missing, unexpected) keys;
        with ``strict`` either being non-empty raises an EmberError."""
        if not hasattr(state, "keys") or not hasattr(state, "__getitem__"):
            raise EmberTypeError(f"[load_state_dict] expected a mapping of names to tensors, got {type(state).__name__}")
        params = dict(self.named_parameters())
        buffers = dict(self.named_buffers())
        missing = [k for k in list(params) + list(buffers) if k not in state]
        unexpected = [k for k in state if k not in params and k not in buffers]
        if strict and (missing or unexpected):
            raise EmberValueError(f"[load_state_dict] missing keys {missing}, unexpected keys {unexpected}")
        for name, p in params.items():
            if name not in state:
                continue
            value = state[name]
            if not isinstance(value, Tensor):
                value = tensor(value)
            if value.shape != p.shape:
                raise ShapeError(f"[load_state_dict] {name}: expected shape {p.shape}, got {value.shape}")
            p.set(value.detach().to_dtype(p.dtype).to_device(p.device))
        for name, b in buffers.items():
            if name not in state:
                continue
            value = state[name]
            if not isinstance(value, Tensor):
                value = tensor(value)
            if value.shape != b.shape:
                raise ShapeError(f"[load_state_dict] {name}: expected shape {b.shape}, got {value.shape}")
            value = value.detach().to_dtype(b.dtype).to_device(b.device)
            if b.ndim:
                b.slice_set(value, 0, 0)  # in place, so functional batch_norm callers holding it see it
            else:  # a 0-d buffer (a batch count) cannot be sliced: its owner gets a new tensor
                mname, _, bname = name.rpartition(".")
                owner = dict(self.named_modules()).get(mname, self)
                setattr(owner, bname, value.copy())
        return missing, unexpected

    def zero_grad(self, set_to_none=True):
        """torch's gradient reset; ember accumulates no gradients on parameters.

        Args:
            set_to_none: ignored.

        Raises:
            GradientsInStore: always, saying where gradients are (``g = loss.backward()``).
        """
        raise GradientsInStore(f"[{type(self).__name__}.zero_grad] ember accumulates no gradients on parameters, "
                               "so there is nothing to zero: g = loss.backward() returns them (g[p]), then "
                               "opt.step(g), or opt.backward_step(loss) for both")

    def train(self, mode: bool = True):
        for _, m in self.named_modules():
            m.training = bool(mode)
        return self

    def eval(self):
        return self.train(False)

    def __repr__(self):
        kids = "".join(f"\n  ({n}): " + repr(c).replace("\n", "\n  ") for n, c in self._children())
        return f"{type(self).__name__}({self.extra_repr()}{kids}{chr(10) if kids else ''})"

    def extra_repr(self) -> str:
        return ""


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
        ops._check_tensor(x, "Linear")
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ShapeError(f"[Linear] expected input (..., {self.in_features}), got {x.shape}")
        lead = x.shape[:-1]
        # One 2-D GEMM over all leading dims instead of a broadcast batched matmul.
        y = x.reshape(-1, self.in_features) @ self.weight.t()
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
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dim (ones / zeros at start)."""

    def __init__(self, dim, eps=1e-5, dtype=None, device=None):
        """Args:
            dim: the size of the normalised (last) dim.
            eps: added to the variance or mean square.
            dtype: the parameters' dtype (default float32).
            device: where the parameters live (default the CPU).
        """
        super().__init__()
        self.dim, self.eps = int_arg(dim, "LayerNorm", "dim"), float_arg(eps, "LayerNorm", "eps")
        dtype = to_dtype(dtype or "float32")
        self.weight = Var(ones(self.dim, dtype=dtype, device=device))
        self.bias = Var(zeros(self.dim, dtype=dtype, device=device))

    def forward(self, x):
        return ops.layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.dim}, eps={self.eps}"


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
        b, t, _ = x.shape
        qkv = self.qkv(x).reshape(b, t, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # each (b, heads, t, head_dim), strided views
        y = ops.sdpa(q, k, v, causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, self.dim))

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
        return self.proj(self.act(self.fc(x)))


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
            from ..checkpoint import checkpoint

            return checkpoint(self._block, x)
        return self._block(x)

    def _block(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))
