"""nn.Module: parameters, buffers, submodules, state_dict, moving and casting in place, and nn.Parameter."""
from __future__ import annotations

from .. import dtypes as _dt
from ..backprop import no_grad
from ..creation import tensor
from ..errors import DeviceError, DTypeError, EmberTypeError, EmberValueError, GradientsInStore, ShapeError
from ..tensor_type import Tensor
from ..variable import Var

__all__ = ["Module", "Parameter"]


class _ParameterMeta(type):
    # Every Var is a parameter, so isinstance(v, nn.Parameter) is true for a layer's own Vars too.
    def __instancecheck__(cls, obj):
        return isinstance(obj, Var)


class Parameter(metaclass=_ParameterMeta):
    """torch's ``nn.Parameter``: ``nn.Parameter(t)`` returns an ``em.Var`` holding a copy of t's data
    (ember's parameters are Vars); ``requires_grad=False`` gives a frozen one (see
    ``Var.requires_grad_``). ``isinstance(v, nn.Parameter)`` holds for every Var."""

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = tensor([], dtype=_dt.float32)
        if not isinstance(data, Tensor):
            data = tensor(data)
        v = Var(data.detach())
        return v if requires_grad else v.requires_grad_(False)


def _check_name(owner, name, what):
    if not isinstance(name, str):
        raise EmberTypeError(f"[{what}] the name must be a str, got {type(name).__name__}")
    if not name or "." in name:
        raise EmberValueError(f"[{what}] the name must be non-empty and hold no '.', got {name!r}")


def _to_args(args, kwargs, op):
    """Module.to's (device, dtype) from torch's forms: to(device), to(dtype), to(tensor),
    to(device, dtype) and the keywords."""
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)  # torch's flag; ember's copies are ordered anyway
    if kwargs:
        raise EmberTypeError(f"[{op}] unexpected arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, Tensor):
            dv, dt = a._device, a._dtype
        elif isinstance(a, _dt.Device) or (isinstance(a, str) and a.split(":")[0] in _dt.Device._KINDS):
            dv, dt = a, None
        else:
            try:
                dv, dt = None, _dt.to_dtype(a)
            except Exception:
                raise EmberValueError(f"[{op}] expected a device, a dtype or a tensor, got {a!r}") from None
        if dv is not None:
            if device is not None:
                raise EmberValueError(f"[{op}] got the device twice")
            device = dv
        if dt is not None:
            if dtype is not None:
                raise EmberValueError(f"[{op}] got the dtype twice")
            dtype = dt
    if device is not None:
        device = _dt.to_device(device)
    if dtype is not None:
        dtype = _dt.to_dtype(dtype)
        if not dtype.is_float:  # torch: "nn.Module.to only accepts floating point dtypes"
            raise DTypeError(f"[{op}] a module casts to floating-point dtypes only, got {dtype.name}")
    return device, dtype


def _convert_in_place(t, device, dtype):
    """Gives t (a parameter or buffer) new storage on device / in dtype, keeping the object, so an
    optimizer or a caller holding it sees the moved tensor. Only float tensors change dtype."""
    dt = dtype if dtype is not None and t._dtype.is_float else t._dtype
    dv = device if device is not None else t._device
    if dt is t._dtype and dv == t._device:
        return
    with no_grad():
        new = t.detach().to_device(dv).to_dtype(dt).contiguous()
        if new._storage.same_buffer(t._storage):  # never alias the old storage
            new = new.copy()
    t._storage, t._layout, t._dtype, t._device = new._storage, new._layout, new._dtype, new._device
    t._shape = None


class Module:
    """Base class of layers. Attributes that are ``Var``s are parameters; attributes that are
    modules (or lists/tuples of modules) are submodules, named like torch (``blocks.0.attn.qkv.weight``);
    tensors named by ``register_buffer`` (or a class's ``_buffer_names``) are buffers."""

    training = True  # class default, so subclasses work even without calling Module.__init__
    _buffer_names = ()
    _non_persistent = frozenset()

    def __init__(self):
        self.training = True

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"[{type(self).__name__}] forward is not implemented")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------------ registration
    def register_parameter(self, name, param):
        """Adds a parameter (or None, a parameter slot left empty, like a layer without bias).

        Args:
            name: the attribute name (no '.').
            param: an ``em.Var`` (``nn.Parameter``) or None.

        Raises:
            EmberTypeError: param is neither a Var nor None.
            EmberValueError: a bad name, or one a buffer or submodule already has.
        """
        _check_name(self, name, "register_parameter")
        if param is not None and not isinstance(param, Var):
            raise EmberTypeError(f"[register_parameter] {name!r}: expected an em.Var (nn.Parameter) or None, got "
                                 f"{type(param).__name__}")
        if name in self._buffer_names or isinstance(getattr(self, name, None), Module):
            raise EmberValueError(f"[register_parameter] {name!r} is already a buffer or a submodule")
        setattr(self, name, param)

    def register_buffer(self, name, value, persistent=True):
        """Adds a buffer: state that is not learned (running statistics, masks, tables).

        Args:
            name: the attribute name (no '.').
            value: a tensor, or None (a slot left empty).
            persistent: whether ``state_dict()`` holds it (non-persistent buffers still move with ``.to``).

        Raises:
            EmberTypeError: value is neither a tensor nor None.
            EmberValueError: a bad name, or one a parameter or submodule already has.
        """
        _check_name(self, name, "register_buffer")
        if value is not None and not isinstance(value, Tensor):
            raise EmberTypeError(f"[register_buffer] {name!r}: expected a tensor or None, got {type(value).__name__}")
        if isinstance(value, Var):
            value = value.detach()  # a buffer is not learned: no gradient reaches it
        current = vars(self).get(name)
        if name not in self._buffer_names and isinstance(current, (Var, Module)):
            raise EmberValueError(f"[register_buffer] {name!r} is already a parameter or a submodule")
        if name not in self._buffer_names:
            self._buffer_names = tuple(self._buffer_names) + (name,)
        np_ = set(self._non_persistent)
        (np_.discard if persistent else np_.add)(name)
        self._non_persistent = frozenset(np_)
        setattr(self, name, value)

    def add_module(self, name, module):
        """Adds a submodule under ``name`` (torch's ``add_module`` / ``register_module``).

        Raises:
            EmberTypeError: module is neither a Module nor None.
        """
        _check_name(self, name, "add_module")
        if module is not None and not isinstance(module, Module):
            raise EmberTypeError(f"[add_module] {name!r}: expected a Module, got {type(module).__name__}")
        setattr(self, name, module)

    register_module = add_module

    # ------------------------------------------------------------------ traversal
    def _children(self):
        """(name, child) for direct submodules, in attribute order; list entries are named by index."""
        for name, value in vars(self).items():
            if isinstance(value, Module):
                yield name, value
            elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Module) for v in value):
                for i, v in enumerate(value):
                    yield f"{name}.{i}", v

    def _own_parameters(self):
        """(name, Var) for this module's own parameters (not its submodules')."""
        for name, value in vars(self).items():
            if isinstance(value, Var) and name not in self._buffer_names:
                yield name, value

    def named_modules(self, prefix=""):
        """(name, module) for this module and every submodule, pre-order, each module once."""
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
        """This module and every submodule, as a list."""
        return [m for _, m in self.named_modules()]

    def named_children(self):
        """(name, module) for the direct submodules."""
        return list(self._children())

    def children(self):
        """The direct submodules, as a list."""
        return [m for _, m in self._children()]

    def get_submodule(self, target):
        """The submodule at a dotted path (``"blocks.0.attn"``); ``""`` is the module itself.

        Raises:
            EmberValueError: no such submodule.
        """
        if target == "":
            return self
        mods = dict(self.named_modules())
        if target not in mods:
            raise EmberValueError(f"[get_submodule] {type(self).__name__} has no submodule {target!r}")
        return mods[target]

    def named_parameters(self, prefix="", recurse=True):
        """(name, Var) pairs with torch's dotted names; a parameter shared by two layers appears once.
        Frozen parameters (``requires_grad_(False)``) are listed too, as torch lists them."""
        seen = set()
        out = []
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mname, m in mods:
            for pname, value in m._own_parameters():
                if id(value) not in seen:
                    seen.add(id(value))
                    out.append((f"{mname}.{pname}" if mname else pname, value))
        return out

    def parameters(self, recurse=True):
        """The parameters (Vars), as a list, in ``named_parameters`` order."""
        return [p for _, p in self.named_parameters(recurse=recurse)]

    def named_buffers(self, prefix="", recurse=True):
        """(name, tensor) pairs of the state that is not learned (BatchNorm's running statistics and
        what ``register_buffer`` added), dotted like parameters; None entries are left out."""
        out = []
        seen = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mname, m in mods:
            for bname in m._buffer_names:
                value = getattr(m, bname, None)
                if isinstance(value, Tensor) and id(value) not in seen:
                    seen.add(id(value))
                    out.append((f"{mname}.{bname}" if mname else bname, value))
        return out

    def buffers(self, recurse=True):
        """The buffers, as a list, in ``named_buffers`` order."""
        return [b for _, b in self.named_buffers(recurse=recurse)]

    def _persistent_buffers(self):
        out = []
        for mname, m in self.named_modules():
            for bname in m._buffer_names:
                value = getattr(m, bname, None)
                if isinstance(value, Tensor) and bname not in m._non_persistent:
                    out.append((f"{mname}.{bname}" if mname else bname, value))
        return out

    def num_parameters(self) -> int:
        """The number of parameter elements."""
        return sum(p.numel() for p in self.parameters())

    def apply(self, fn):
        """Calls ``fn(module)`` on every submodule, then on this module (torch's order), e.g. for a
        custom initialisation; returns self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------------ moving and casting
    def to(self, *args, **kwargs):
        """Moves and/or casts every parameter and buffer in place, as ``torch.nn.Module.to``:
        ``to(device)``, ``to(dtype)``, ``to(tensor)`` (its device and dtype), ``to(device, dtype)`` or
        the keywords ``device=``, ``dtype=``. The Vars stay the same objects (an optimizer made before
        still holds them); only floating-point tensors change dtype. Returns self.

        Raises:
            EmberValueError: an argument that is neither a device, a dtype nor a tensor.
            DTypeError: a dtype that is not floating-point.
            DeviceError: a device this build lacks.
        """
        device, dtype = _to_args(args, dict(kwargs), "Module.to")
        for t in self._tensors():
            _convert_in_place(t, device, dtype)
        return self

    def _tensors(self):
        seen, out = set(), []
        for _, t in self.named_parameters() + self.named_buffers():
            if id(t) not in seen:
                seen.add(id(t))
                out.append(t)
        return out

    def half(self):
        """Casts the floating-point parameters and buffers to float16, in place; returns self."""
        return self.to(dtype=_dt.float16)

    def float(self):
        """Casts the floating-point parameters and buffers to float32, in place; returns self."""
        return self.to(dtype=_dt.float32)

    def bfloat16(self):
        """Casts the floating-point parameters and buffers to bfloat16, in place; returns self."""
        return self.to(dtype=_dt.bfloat16)

    def double(self):
        """Casts the floating-point parameters and buffers to float64, in place; returns self."""
        return self.to(dtype=_dt.float64)

    def cpu(self):
        """Moves every parameter and buffer to the CPU, in place; returns self."""
        return self.to(device=_dt.cpu)

    def cuda(self, device=None):
        """Moves every parameter and buffer to a CUDA device, in place, as ``torch.nn.Module.cuda``;
        ``device`` is an index, a CUDA device or None (cuda:0). Returns self.

        Raises:
            DeviceError: the device is not a CUDA device, or not available.
        """
        if device is None:
            device = 0
        d = _dt.Device("cuda", device) if type(device) is int else _dt.to_device(device)
        if d.type != "cuda":
            raise DeviceError(f"[Module.cuda] expected a CUDA device, got {d}")
        return self.to(device=d)

    def requires_grad_(self, requires_grad=True):
        """Freezes (False) or unfreezes (True) every parameter, in place: a frozen parameter is no
        longer a variable, so no gradient is computed for it and optimizers skip it; unfreezing makes
        it a variable again with the same storage. Returns self."""
        flag = bool(requires_grad)
        for p in self.parameters():
            p.requires_grad_(flag)
        return self

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """{name: tensor} sharing the parameters' storage (detached), ready for save_safetensors;
        the persistent buffers too."""
        state, seen = {}, set()
        for mname, m in self.named_modules():  # torch's order: each module's parameters, then its buffers
            for pname, p in m._own_parameters():
                if id(p) not in seen:  # a shared parameter is stored once
                    seen.add(id(p))
                    state[f"{mname}.{pname}" if mname else pname] = p.detach()
            for bname in m._buffer_names:
                b = getattr(m, bname, None)
                if isinstance(b, Tensor) and bname not in m._non_persistent:
                    state[f"{mname}.{bname}" if mname else bname] = b.detach()
        return state

    def load_state_dict(self, state: dict, strict: bool = True):
        """Writes values into the existing parameters and buffers (in place). Returns (missing,
        unexpected) keys; with ``strict`` either being non-empty raises an EmberError."""
        if not hasattr(state, "keys") or not hasattr(state, "__getitem__"):
            raise EmberTypeError(f"[load_state_dict] expected a mapping of names to tensors, got {type(state).__name__}")
        params = dict(self.named_parameters())
        buffers = dict(self._persistent_buffers())
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
        """Sets training mode (dropout active, batch statistics) on every submodule; returns self."""
        for _, m in self.named_modules():
            m.training = bool(mode)
        return self

    def eval(self):
        """Sets evaluation mode on every submodule; returns self."""
        return self.train(False)

    def __repr__(self):
        kids = "".join(f"\n  ({n}): " + repr(c).replace("\n", "\n  ") for n, c in self._children())
        extra = self.extra_repr()
        if kids and extra:
            extra = "\n  " + extra.replace("\n", "\n  ")
        return f"{type(self).__name__}({extra}{kids}{chr(10) if kids else ''})"

    def extra_repr(self) -> str:
        """The layer's own arguments, printed inside its repr (torch's wording)."""
        return ""
