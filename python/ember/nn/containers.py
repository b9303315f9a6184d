"""Containers and shape layers: ModuleDict, ParameterList, ParameterDict, Flatten and Unflatten, as torch's."""
from __future__ import annotations

from ..args import dim_arg, int_arg
from ..errors import EmberTypeError, EmberValueError, IndexOutOfRange, ShapeError
from ..tensor_type import Tensor
from ..variable import Var
from . import ops
from .module import Module, Parameter, _check_name

__all__ = ["Flatten", "ModuleDict", "ParameterDict", "ParameterList", "Unflatten"]


def _pairs(values, op):
    """(key, value) pairs from a mapping or an iterable of pairs, in order."""
    if hasattr(values, "items"):
        return list(values.items())
    try:
        items = list(values)
    except TypeError:
        raise EmberTypeError(f"[{op}] expected a mapping or an iterable of (name, value) pairs, got "
                             f"{type(values).__name__}") from None
    for i, it in enumerate(items):
        if not isinstance(it, (tuple, list)) or len(it) != 2:
            raise EmberTypeError(f"[{op}] item {i} is not a (name, value) pair")
    return [tuple(it) for it in items]


def _as_param(value, op, name):
    """torch wraps plain tensors given to a parameter container into Parameters; a Var is kept as is."""
    if isinstance(value, Var):
        return value
    if isinstance(value, Tensor):
        return Parameter(value)
    raise EmberTypeError(f"[{op}] {name}: expected a tensor or Var, got {type(value).__name__}")


class ModuleDict(Module):
    """Submodules by name, as ``torch.nn.ModuleDict``: ``md["enc"]``, ``md["enc"] = layer``, ``in``,
    ``keys()``, ``items()``, ``values()``, ``update()``, ``pop()``; parameters are named
    ``<key>.<param>``, in insertion order.

    Args:
        modules: a mapping or an iterable of (name, Module) pairs (optional).

    Raises:
        EmberTypeError: a value that is not a Module, or a key that is not a str.
    """

    def __init__(self, modules=None):
        super().__init__()
        self._modules = {}
        if modules is not None:
            self.update(modules)

    def _children(self):
        yield from self._modules.items()

    def __getitem__(self, key):
        if key not in self._modules:
            raise EmberValueError(f"[ModuleDict] no module named {key!r}")
        return self._modules[key]

    def __setitem__(self, key, module):
        _check_name(self, key, "ModuleDict")
        if not isinstance(module, Module):
            raise EmberTypeError(f"[ModuleDict] {key!r}: expected a Module, got {type(module).__name__}")
        self._modules[key] = module

    def __delitem__(self, key):
        self.pop(key)

    def __contains__(self, key):
        return key in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        """The names, in insertion order."""
        return self._modules.keys()

    def items(self):
        """(name, module) pairs, in insertion order."""
        return self._modules.items()

    def values(self):
        """The modules, in insertion order."""
        return self._modules.values()

    def pop(self, key):
        """Removes and returns the module named key."""
        module = self[key]
        del self._modules[key]
        return module

    def clear(self):
        """Removes every module."""
        self._modules.clear()

    def update(self, modules):
        """Adds (or replaces) modules from a mapping or an iterable of (name, Module) pairs."""
        for k, v in _pairs(modules, "ModuleDict"):
            self[k] = v


class ParameterList(Module):
    """A list of parameters named "0", "1", ... as ``torch.nn.ParameterList``; tensors appended are
    made into Vars (their data copied), Vars are kept as they are.

    Args:
        values: an iterable of tensors or Vars (optional).
    """

    def __init__(self, values=None):
        super().__init__()
        self._params = []
        if values is not None:
            self.extend(values)

    def _own_parameters(self):
        for i, p in enumerate(self._params):
            yield str(i), p

    def __getitem__(self, i):
        return self._params[i]

    def __setitem__(self, i, value):
        if not isinstance(i, int) or not -len(self._params) <= i < len(self._params):
            raise IndexOutOfRange(f"[ParameterList] index {i!r} out of range for {len(self._params)} parameters")
        self._params[i] = _as_param(value, "ParameterList", f"item {i}")

    def __len__(self):
        return len(self._params)

    def __iter__(self):
        return iter(self._params)

    def append(self, value):
        """Adds one parameter at the end; returns self."""
        self._params.append(_as_param(value, "ParameterList", f"item {len(self._params)}"))
        return self

    def extend(self, values):
        """Adds parameters at the end; returns self."""
        if isinstance(values, Tensor):
            raise EmberTypeError("[ParameterList] extend expects an iterable of tensors, got one tensor")
        for v in values:
            self.append(v)
        return self

    def extra_repr(self):
        return "\n".join(f"({i}): Parameter containing: [{p.dtype.name} of size {'x'.join(map(str, p.shape))}]"
                         for i, p in enumerate(self._params))


class ParameterDict(Module):
    """Parameters by name, as ``torch.nn.ParameterDict``; tensors are made into Vars.

    Args:
        values: a mapping or an iterable of (name, tensor) pairs (optional).
    """

    def __init__(self, values=None):
        super().__init__()
        self._params = {}
        if values is not None:
            self.update(values)

    def _own_parameters(self):
        yield from self._params.items()

    def __getitem__(self, key):
        if key not in self._params:
            raise EmberValueError(f"[ParameterDict] no parameter named {key!r}")
        return self._params[key]

    def __setitem__(self, key, value):
        _check_name(self, key, "ParameterDict")
        self._params[key] = _as_param(value, "ParameterDict", repr(key))

    def __delitem__(self, key):
        self.pop(key)

    def __contains__(self, key):
        return key in self._params

    def __len__(self):
        return len(self._params)

    def __iter__(self):
        return iter(self._params)

    def keys(self):
        """The names, in insertion order."""
        return self._params.keys()

    def items(self):
        """(name, Var) pairs, in insertion order."""
        return self._params.items()

    def values(self):
        """The parameters, in insertion order."""
        return self._params.values()

    def pop(self, key):
        """Removes and returns the parameter named key."""
        p = self[key]
        del self._params[key]
        return p

    def update(self, values):
        """Adds (or replaces) parameters from a mapping or an iterable of (name, tensor) pairs."""
        for k, v in _pairs(values, "ParameterDict"):
            self[k] = v

    def extra_repr(self):
        return "\n".join(f"({k}): Parameter containing: [{p.dtype.name} of size {'x'.join(map(str, p.shape))}]"
                         for k, p in self._params.items())


class Flatten(Module):
    """Merges dims ``start_dim..end_dim`` into one, as ``torch.nn.Flatten`` (by default all but the batch dim).

    Args:
        start_dim: the first dim to merge (default 1).
        end_dim: the last dim to merge (default -1).
    """

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim = int_arg(start_dim, "Flatten", "start_dim")
        self.end_dim = int_arg(end_dim, "Flatten", "end_dim")

    def forward(self, x):
        """Returns x flattened (a view when the layout allows)."""
        ops._check_tensor(x, "Flatten")
        if x.ndim and dim_arg(self.start_dim, x.ndim, "Flatten") > dim_arg(self.end_dim, x.ndim, "Flatten"):
            raise EmberValueError(f"[Flatten] start_dim {self.start_dim} comes after end_dim {self.end_dim} "
                                  f"for an input of {x.ndim} dims")
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Splits dim ``dim`` into ``unflattened_size``, as ``torch.nn.Unflatten`` (one entry may be -1).

    Args:
        dim: the dim to split.
        unflattened_size: a tuple of sizes whose product is that dim's size.
    """

    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim = int_arg(dim, "Unflatten", "dim")
        if not isinstance(unflattened_size, (tuple, list)) or not unflattened_size:
            raise EmberTypeError(f"[Unflatten] unflattened_size must be a non-empty tuple of ints, got "
                                 f"{unflattened_size!r}")
        self.unflattened_size = tuple(int_arg(s, "Unflatten", "unflattened_size") for s in unflattened_size)

    def forward(self, x):
        """Returns x with its dim split (a view when the layout allows)."""
        ops._check_tensor(x, "Unflatten")
        d = dim_arg(self.dim, x.ndim, "Unflatten")
        if not x.ndim:
            raise ShapeError("[Unflatten] expected a tensor with at least one dim")
        sizes = list(self.unflattened_size)
        n = x.shape[d]
        known = 1
        for s in sizes:
            if s != -1:
                known *= s
        if sizes.count(-1) > 1 or any(s < -1 for s in sizes) or \
                (-1 in sizes and (known == 0 or n % known)) or (-1 not in sizes and known != n):
            raise ShapeError(f"[Unflatten] cannot split dim {self.dim} of size {n} into {self.unflattened_size}")
        if -1 in sizes:
            sizes[sizes.index(-1)] = n // known
        return x.reshape(*x.shape[:d], *sizes, *x.shape[d + 1:])

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
