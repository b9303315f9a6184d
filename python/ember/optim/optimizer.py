"""The Optimizer base class: param groups, the step loop over a GradStore, state_dict / load_state_dict."""
from __future__ import annotations

from .. import _C
from ..args import float_arg
from ..backprop import no_grad
from ..errors import DTypeError, EmberTypeError, EmberValueError, GradientsInStore, ShapeError
from ..tensor_type import Tensor

__all__ = ["Optimizer"]


class Optimizer:
    """Holds the tensors to update, in torch-style param groups, and their per-parameter state.

    ``params`` is an iterable of tensors (``model.parameters()``), of (name, tensor) pairs
    (``model.named_parameters()``), or of dicts ``{"params": [...], "lr": ..., ...}`` whose options
    override the defaults for that group (torch's list-of-dicts form). ``step(grads)`` applies one
    update from the GradStore that ``loss.backward()`` returns; ``backward_step(loss)`` does both.
    Parameters without a gradient in the store, and parameters that are not variables at the time of
    the step (a module frozen with ``requires_grad_(False)``), are left untouched, as torch leaves a
    parameter whose ``grad`` is None. Every update is written into the parameter's storage, so views
    of it and modules holding it see the new values.

    Args:
        params: the parameters, as above.
        defaults: the default value of every option a group may set.
    """

    name = "optimizer"

    def __init__(self, params, defaults):
        if isinstance(params, (str, bytes, dict, Tensor)) or not hasattr(params, "__iter__"):
            raise EmberTypeError(f"[{self.name}] params must be an iterable of parameters or of param groups, "
                                 f"got {type(params).__name__}")
        self.defaults = dict(defaults)
        self.param_groups = []
        self.state = {}  # id(param) -> that parameter's state (tensors and numbers)
        items = list(params)
        if not items:
            raise EmberValueError(f"[{self.name}] got an empty parameter list")
        for g in (items if isinstance(items[0], dict) else [{"params": items}]):
            self.add_param_group(g)

    def add_param_group(self, param_group: dict) -> None:
        """Adds a group of parameters with its own options (torch's ``add_param_group``).

        Args:
            param_group: ``{"params": [...], option: value, ...}``; options it leaves out take the
                optimizer's defaults.

        Raises:
            EmberTypeError: not a dict, or a parameter that is not a float leaf tensor.
            EmberValueError: an unknown option, an invalid value, or a parameter already in a group.
        """
        if not isinstance(param_group, dict):
            raise EmberTypeError(f"[{self.name}] a param group must be a dict, got {type(param_group).__name__}")
        g = dict(param_group)
        if "params" not in g:
            raise EmberValueError(f"[{self.name}] a param group needs a 'params' entry")
        ps = g["params"]
        if isinstance(ps, Tensor) or not hasattr(ps, "__iter__"):
            ps = [ps]  # torch accepts a single tensor as a group's params
        ps = [p[1] if isinstance(p, tuple) and len(p) == 2 else p for p in ps]  # named_parameters()
        seen = {id(p) for grp in self.param_groups for p in grp["params"]}
        for p in ps:
            self._check_param(p)
            if id(p) in seen:
                raise EmberValueError(f"[{self.name}] a parameter appears in more than one group")
            seen.add(id(p))
        unknown = set(g) - set(self.defaults) - {"params"}
        if unknown:
            raise EmberValueError(f"[{self.name}] unknown options {sorted(unknown)}")
        for k, v in self.defaults.items():
            g.setdefault(k, v)
        g["params"] = ps
        self._check(g)
        self.param_groups.append(g)

    def _check_param(self, p):
        if not isinstance(p, Tensor):
            raise EmberTypeError(f"[{self.name}] parameters must be em.Var, got {type(p).__name__}")
        if not p.dtype.is_float:
            raise DTypeError(f"[{self.name}] parameters must be float, got {p.dtype.name}")
        if p._op is not None:  # torch: "can't optimize a non-leaf Tensor"
            raise EmberValueError(f"[{self.name}] can't optimize the result of an op ({p._op.name}); pass the "
                                  "em.Var it was computed from")

    @property
    def params(self):
        """Every parameter, in group order."""
        return [p for g in self.param_groups for p in g["params"]]

    @property
    def lr(self):
        """The learning rate of the first group; setting it sets every group's."""
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value):
        lr = float_arg(value, self.name, "lr")
        if not lr >= 0:
            raise EmberValueError(f"[{self.name}] invalid learning rate {lr}")
        for g in self.param_groups:
            g["lr"] = lr

    def _check(self, group):
        """Converts a group's options to floats/bools and validates them; ``not x >= 0`` refuses NaN too."""
        group["lr"] = float_arg(group["lr"], self.name, "lr")
        if not group["lr"] >= 0:
            raise EmberValueError(f"[{self.name}] invalid learning rate {group['lr']}")

    def _floats(self, group, *keys):
        for k in keys:
            group[k] = float_arg(group[k], self.name, k)
            if not group[k] >= 0:
                raise EmberValueError(f"[{self.name}] invalid {k} {group[k]}")

    def zero_grad(self, set_to_none=True):
        """torch's gradient reset, which ember does not need: nothing accumulates between backward
        calls. Each ``g = loss.backward()`` is a new GradStore that holds that loss's gradients only, and
        ``opt.step(g)`` takes it; so there is nothing to zero, and a silent no-op would hide that
        ``step()`` needs the store.

        Args:
            set_to_none: ignored.

        Raises:
            GradientsInStore: always, saying to pass ``loss.backward()``'s store to ``step``.
        """
        raise GradientsInStore(f"[{self.name}.zero_grad] ember accumulates no gradients, so there is nothing to "
                               "zero: each g = loss.backward() is a new GradStore; then opt.step(g), or "
                               "opt.backward_step(loss) for both")

    def step(self, grads=None) -> None:
        """Applies one update to every variable that has a gradient in ``grads``.

        Args:
            grads: the GradStore from ``loss.backward()``. Parameters without a gradient in it, or that
                are not variables now (frozen), are left untouched.

        Raises:
            GradientsInStore: without ``grads``: ember keeps no gradients on the parameters.
            ShapeError: a gradient's shape differs from its parameter's.
        """
        if grads is None:
            raise GradientsInStore(f"[{self.name}.step] step needs the gradients: ember keeps none on the "
                                   "parameters; g = loss.backward(); opt.step(g), or opt.backward_step(loss)")
        if not callable(getattr(grads, "get", None)):
            raise EmberTypeError(f"[{self.name}] step expects the GradStore from backward(), got "
                                 f"{type(grads).__name__}")
        # The fused float32/float64 steps of contiguous parameters are gathered here, by device, and run as
        # one multi-tensor call per device at the end (torch's foreach step): one pass, threaded across
        # tensors, instead of a call per parameter. When a later parameter raises, the steps gathered before
        # it still run, so every parameter's value matches its state (its step count) as before batching.
        with no_grad():  # updates are never part of a graph
            self._batch = batches = {}
            try:
                self._step_all(grads)
            finally:
                self._batch = None
                for steps in batches.values():
                    _C.fused.optim_step_multi(steps)

    _batch = None  # during step: the pending fused steps by device (see step), passed to _update's kernels

    def _step_all(self, grads):
        """The per-parameter loop of step (its checks and _update calls)."""
        for group in self.param_groups:
            for p in group["params"]:
                if not p.is_variable:
                    continue
                g = grads.get(p)
                if g is None:
                    continue
                if not isinstance(g, Tensor):
                    raise EmberTypeError(f"[{self.name}] gradient of a parameter is a {type(g).__name__}, "
                                         "not a Tensor")
                if g.shape != p.shape:
                    raise ShapeError(f"[{self.name}] gradient shape {g.shape} does not match parameter {p.shape}")
                g = g.detach()
                if g.dtype is not p.dtype:
                    g = g.to_dtype(p.dtype)
                if g.device != p.device:
                    g = g.to_device(p.device)
                st = self.state.get(id(p), {})
                new = self._update(p.detach(), g, st, group)
                if new is not None:  # the composed path's result; the fused kernels write p in place
                    p.set(new)
                if st:  # as torch: no entry for a parameter whose rule keeps no state (plain SGD)
                    self.state[id(p)] = st

    def state_dict(self) -> dict:
        """The optimizer's state, in torch's layout.

        Returns:
            ``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}`` with parameters
            numbered in group order; state tensors are copies (later steps don't change them). It holds
            only tensors and plain values, so ``em.save`` writes it.
        """
        index = {id(p): i for i, p in enumerate(self.params)}
        groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]}
                  for g in self.param_groups]
        state = {index[pid]: {k: (v.copy().detach() if isinstance(v, Tensor) else v) for k, v in st.items()}
                 for pid, st in self.state.items() if pid in index}
        return {"state": dict(sorted(state.items())), "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores options and per-parameter state saved by ``state_dict`` (same parameter layout).

        State tensors are cast to each parameter's dtype and moved to its device, as torch does.

        Args:
            state_dict: the dict ``state_dict()`` returned (or ``em.load`` read back).

        Raises:
            EmberTypeError: not such a dict.
            EmberValueError: its groups do not match this optimizer's.
        """
        sd = state_dict
        if (not isinstance(sd, dict) or not isinstance(sd.get("param_groups"), (list, tuple))
                or not isinstance(sd.get("state", {}), dict)):
            raise EmberTypeError(f"[{self.name}] load_state_dict expects the dict from state_dict(), got "
                                 f"{type(sd).__name__}")
        params = self.params
        groups = sd["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                not isinstance(a, dict) or len(a.get("params", ())) != len(b["params"])
                for a, b in zip(groups, self.param_groups)):
            raise EmberValueError(f"[{self.name}] load_state_dict: parameter groups do not match this optimizer")
        new_groups = []
        for mine, saved in zip(self.param_groups, groups):
            g = {**mine, **{k: v for k, v in saved.items() if k != "params"}}
            g["betas"] = tuple(g["betas"]) if "betas" in g and isinstance(g["betas"], list) else g.get("betas")
            if g["betas"] is None:
                del g["betas"]
            self._check(g)
            new_groups.append(g)
        state = {}
        for i, st in sd.get("state", {}).items():
            try:
                p = params[int(i)]
            except (ValueError, TypeError, IndexError):
                raise EmberValueError(f"[{self.name}] load_state_dict: no parameter {i!r}") from None
            if not isinstance(st, dict):
                raise EmberTypeError(f"[{self.name}] load_state_dict: state of parameter {i} is not a dict")
            state[id(p)] = {k: (v.to_dtype(p.dtype).to_device(p.device).copy().detach() if isinstance(v, Tensor)
                                else v) for k, v in st.items()}
        self.param_groups, self.state = new_groups, state

    def backward_step(self, loss):
        """Runs ``loss.backward()`` then ``step`` with its gradients; returns the GradStore.

        Args:
            loss: the tensor to differentiate (usually a scalar loss).
        """
        if not isinstance(loss, Tensor):
            raise EmberTypeError(f"[{self.name}] backward_step expects a loss Tensor, got {type(loss).__name__}")
        grads = loss.backward()
        self.step(grads)
        return grads

    def __repr__(self):
        opts = ", ".join(f"{k}={v!r}" for k, v in self.defaults.items())
        return f"{type(self).__name__}({len(self.params)} parameters in {len(self.param_groups)} groups, {opts})"

    def _update(self, p, g, state, group):
        raise NotImplementedError
