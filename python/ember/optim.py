"""Optimizers: SGD (momentum, nesterov, weight decay) and AdamW, with torch's update rules."""
from __future__ import annotations

import math

from .args import bool_arg, float_arg
from .backprop import no_grad
from .errors import DTypeError, EmberTypeError, EmberValueError, GradientsInStore, ShapeError
from .tensor import Tensor, Var

__all__ = ["AdamW", "Optimizer", "SGD"]


class Optimizer:
    """Holds the variables to update, in torch-style param groups (``params`` is an iterable of
    Vars, of (name, Var) pairs, or of dicts ``{"params": [...], "lr": ..., ...}`` that override the
    defaults per group). ``step(grads)`` applies one update from a GradStore; ``backward_step(loss)``
    runs ``loss.backward()`` then ``step``. Variables without a gradient in the store are left
    untouched (as torch does for ``grad is None``)."""

    name = "optimizer"

    def __init__(self, params, defaults):
        if isinstance(params, (str, bytes, dict)) or not hasattr(params, "__iter__"):
            raise EmberTypeError(f"[{self.name}] params must be an iterable of Vars or of param groups, got "
                             f"{type(params).__name__}")
        items = list(params)
        groups = [dict(g) for g in items] if items and isinstance(items[0], dict) else [{"params": items}]
        seen = set()
        for g in groups:
            # Accept model.named_parameters() as well as model.parameters().
            ps = g.get("params", ())
            if isinstance(ps, Var) or not isinstance(ps, (list, tuple)) and not hasattr(ps, "__iter__"):
                ps = [ps]  # torch accepts a single tensor as a group's params
            ps = [p[1] if isinstance(p, tuple) else p for p in ps]
            for p in ps:
                if not isinstance(p, Var):
                    raise EmberTypeError(f"[{self.name}] parameters must be em.Var, got {type(p).__name__}")
                if not p.dtype.is_float:
                    raise DTypeError(f"[{self.name}] parameters must be float, got {p.dtype.name}")
                if id(p) in seen:
                    raise EmberValueError(f"[{self.name}] a parameter appears in more than one group")
                seen.add(id(p))
            g["params"] = ps
            unknown = set(g) - set(defaults) - {"params"}
            if unknown:
                raise EmberValueError(f"[{self.name}] unknown options {sorted(unknown)}")
            for k, v in defaults.items():
                g.setdefault(k, v)
            self._check(g)
        if not seen:
            raise EmberValueError(f"[{self.name}] got an empty parameter list")
        self.param_groups = groups
        self.state = {}  # id(var) -> per-variable state (ember tensors)

    @property
    def params(self):
        return [p for g in self.param_groups for p in g["params"]]

    @property
    def lr(self):
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value):
        """Sets the learning rate of every group (what a schedule wants)."""
        lr = float_arg(value, self.name, "lr")
        if not lr >= 0:
            raise EmberValueError(f"[{self.name}] invalid learning rate {lr}")
        for g in self.param_groups:
            g["lr"] = lr

    def _check(self, group):
        """Converts a group's options to floats/bools (each group may set its own) and validates them;
        `not x >= 0` so that NaN is refused too, like torch."""
        group["lr"] = float_arg(group["lr"], self.name, "lr")
        if not group["lr"] >= 0:
            raise EmberValueError(f"[{self.name}] invalid learning rate {group['lr']}")

    def zero_grad(self, set_to_none=True):
        """torch's gradient reset; nothing accumulates between backward calls in ember.

        Args:
            set_to_none: ignored.

        Raises:
            GradientsInStore: always, saying to pass ``loss.backward()``'s store to ``step``.
        """
        raise GradientsInStore(f"[{self.name}.zero_grad] ember accumulates no gradients, so there is nothing to "
                               "zero: each g = loss.backward() is a new GradStore; then opt.step(g), or "
                               "opt.backward_step(loss) for both")

    def step(self, grads=None) -> None:
        """Applies one update to every variable that has a gradient in ``grads`` (a GradStore from
        ``backward()``); variables without one are left untouched. Raises GradientsInStore without
        ``grads``: ember keeps no gradients on the parameters."""
        if grads is None:
            raise GradientsInStore(f"[{self.name}.step] step needs the gradients: ember keeps none on the "
                                   "parameters; g = loss.backward(); opt.step(g), or opt.backward_step(loss)")
        if not callable(getattr(grads, "get", None)):
            raise EmberTypeError(f"[{self.name}] step expects the GradStore from backward(), got {type(grads).__name__}")
        with no_grad():  # updates are never part of a graph
            for group in self.param_groups:
                for p in group["params"]:
                    g = grads.get(p)
                    if g is None:
                        continue
                    if not isinstance(g, Tensor):
                        raise EmberTypeError(f"[{self.name}] gradient of a parameter is a {type(g).__name__}, not a Tensor")
                    if g.shape != p.shape:
                        raise ShapeError(f"[{self.name}] gradient shape {g.shape} does not match parameter {p.shape}")
                    g = g.detach()
                    if g.dtype is not p.dtype:
                        g = g.to_dtype(p.dtype)
                    p.set(self._update(p.detach(), g, self.state.setdefault(id(p), {}), group))

    def state_dict(self) -> dict:
        """Like torch: {"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}, with
        parameters numbered in group order; state tensors are copies (later steps don't change them)."""
        index = {id(p): i for i, p in enumerate(self.params)}
        groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]}
                  for g in self.param_groups]
        state = {index[pid]: {k: (v.copy().detach() if hasattr(v, "copy") else v) for k, v in st.items()}
                 for pid, st in self.state.items() if pid in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, sd: dict) -> None:
        """Restores hyperparameters and per-parameter state saved by ``state_dict`` (same model layout)."""
        if not isinstance(sd, dict) or not isinstance(sd.get("param_groups", []), (list, tuple)):
            raise EmberTypeError(f"[{self.name}] load_state_dict expects the dict from state_dict(), got {type(sd).__name__}")
        params = self.params
        groups = sd.get("param_groups", [])
        if len(groups) != len(self.param_groups) or any(
                len(a["params"]) != len(b["params"]) for a, b in zip(groups, self.param_groups)):
            raise EmberValueError(f"[{self.name}] load_state_dict: parameter groups do not match this optimizer")
        for mine, saved in zip(self.param_groups, groups):
            mine.update({k: v for k, v in saved.items() if k != "params"})
        self.state = {}
        for i, st in sd.get("state", {}).items():
            p = params[int(i)]
            self.state[id(p)] = {k: (v.to_dtype(p.dtype).copy().detach() if hasattr(v, "copy") else v)
                                 for k, v in st.items()}

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

    def _update(self, p, g, state, group):
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent with torch.optim.SGD's update rule.

    Per step: ``g += weight_decay * p``; ``buf = momentum * buf + (1 - dampening) * g`` (``buf = g`` on
    the first step); ``g = g + momentum * buf`` with ``nesterov``, else ``buf``; ``p -= lr * g``.

    Args:
        params: the Vars to update: ``model.parameters()``, ``model.named_parameters()``, or a list of
            param-group dicts (``{"params": [...], "lr": ...}``) overriding the defaults per group.
        lr: the learning rate.
        momentum: the momentum factor (0 for none).
        dampening: the dampening of the momentum.
        weight_decay: the L2 penalty added to the gradient.
        nesterov: use Nesterov momentum.
    """

    name = "SGD"

    def __init__(self, params, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov})

    def _check(self, g):
        super()._check(g)
        for k in ("momentum", "dampening", "weight_decay"):
            g[k] = float_arg(g[k], "SGD", k)
        g["nesterov"] = bool_arg(g["nesterov"], "SGD", "nesterov")
        if not (g["momentum"] >= 0 and g["weight_decay"] >= 0):
            raise EmberValueError(f"[SGD] invalid momentum {g['momentum']} or weight_decay {g['weight_decay']}")
        if g["nesterov"] and (g["momentum"] <= 0 or g["dampening"] != 0):
            raise EmberValueError("[SGD] nesterov momentum requires a momentum and zero dampening")

    def _update(self, p, g, state, group):
        wd, mom, lr = group["weight_decay"], group["momentum"], group["lr"]
        if wd:
            g = g + p.affine(wd, 0.0)
        if mom:
            buf = state.get("momentum_buffer")
            buf = g.copy() if buf is None else buf.affine(mom, 0.0) + g.affine(1.0 - group["dampening"], 0.0)
            state["momentum_buffer"] = buf
            g = g + buf.affine(mom, 0.0) if group["nesterov"] else buf
        return p - g.affine(lr, 0.0)


class AdamW(Optimizer):
    """Adam with decoupled weight decay, with torch.optim.AdamW's update rule and defaults.

    Per step: ``p *= 1 - lr * weight_decay``, then the Adam update with bias correction.

    Args:
        params: the Vars to update: ``model.parameters()``, ``model.named_parameters()``, or a list of
            param-group dicts overriding the defaults per group.
        lr: the learning rate.
        betas: the decay rates of the first and second moment estimates.
        eps: added to the denominator.
        weight_decay: the decoupled weight decay factor.
    """

    name = "AdamW"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    def _check(self, g):
        super()._check(g)
        betas = g["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise EmberTypeError(f"[AdamW] betas must be a pair of floats, got {betas!r}")
        g["betas"] = b1, b2 = float_arg(betas[0], "AdamW", "beta1"), float_arg(betas[1], "AdamW", "beta2")
        g["eps"], g["weight_decay"] = float_arg(g["eps"], "AdamW", "eps"), float_arg(g["weight_decay"], "AdamW", "weight_decay")
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0) or not g["eps"] >= 0 or not g["weight_decay"] >= 0:
            raise EmberValueError(f"[AdamW] invalid betas {g['betas']}, eps {g['eps']} or weight_decay {g['weight_decay']}")

    # The defaults of the first group, readable as attributes like torch's optimizer.defaults.
    betas = property(lambda self: self.param_groups[0]["betas"])
    eps = property(lambda self: self.param_groups[0]["eps"])
    weight_decay = property(lambda self: self.param_groups[0]["weight_decay"])

    def _update(self, p, g, state, group):
        (b1, b2), lr, wd = group["betas"], group["lr"], group["weight_decay"]
        t = state["step"] = state.get("step", 0) + 1
        m, v = state.get("exp_avg"), state.get("exp_avg_sq")
        if m is None:  # first step: the averages start from zero
            m, v = g.affine(1.0 - b1, 0.0), g.sqr().affine(1.0 - b2, 0.0)
        else:
            m = m.affine(b1, 0.0) + g.affine(1.0 - b1, 0.0)
            v = v.affine(b2, 0.0) + g.sqr().affine(1.0 - b2, 0.0)
        state["exp_avg"], state["exp_avg_sq"] = m, v
        step_size = lr / (1.0 - b1 ** t)
        denom = v.sqrt().affine(1.0 / math.sqrt(1.0 - b2 ** t), group["eps"])
        if wd:
            p = p.affine(1.0 - lr * wd, 0.0)
        return p - m.affine(step_size, 0.0) / denom
