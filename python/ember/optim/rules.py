"""SGD, Adam, AdamW and RMSprop: torch.optim's single-tensor update rules, bit for bit, as fused kernels.

float32 and float64 parameters take one fused kernel per step (``_C.fused.optim_step``: cpp/cpu/optim_isa.cpp
on the CPU, metal/optim.metal on Metal) that runs torch's sequence of ops for one element in one pass,
rounding where torch's kernels round: one FMA for ``add(alpha=)``, ``lerp`` and ``addcmul``, separate
roundings elsewhere, every Python scalar computed in double as torch computes it and rounded to the dtype.
float16 and bfloat16 parameters take the composed whole-tensor path below (close to torch, not bitwise).
"""
from __future__ import annotations

from .. import _C
from ..args import bool_arg, float_arg
from ..creation import zeros_like
from ..dtypes import float32, float64
from ..errors import EmberTypeError, EmberValueError
from ..multi import maximum
from .optimizer import Optimizer

__all__ = ["SGD", "Adam", "AdamW", "RMSprop"]


# OptimKind and the OptimFlag bits of cpp/backend.h.
_SGD, _ADAM, _RMSPROP = 0, 1, 2
_MAXIMIZE, _WD, _MOMENTUM, _NESTEROV, _FIRST, _DECOUPLED, _AMSGRAD, _CENTERED = 1, 2, 4, 8, 16, 32, 64, 128


def _fusable(p):
    return p.dtype is float32 or p.dtype is float64


def _fused(kind, flags, scalars, p, g, states, batch=None):
    """Runs one fused step writing p (when contiguous) and the states in place; returns None, or the
    updated copy of a non-contiguous p for the caller to write back. ``batch``: Optimizer.step's pending
    steps by device; a contiguous p's step joins them (one multi-tensor call at the end of step)."""
    target = p if p._layout.is_contiguous() else p.copy()
    written = [target] + [t for t in states if t is not None]
    if not g._layout.is_contiguous() or any(g._storage.same_buffer(t._storage) for t in written):
        g = g.copy()  # the kernel reads g densely and never through memory it writes
    args = []
    for t in list(states) + [None] * (3 - len(states)):
        args += [None, None] if t is None else [t._storage, t._layout]
    if batch is not None and target is p:
        batch.setdefault(p._device, []).append(
            (kind, flags, scalars, p._storage, p._layout, g._storage, g._layout, *args))
        return None
    _C.fused.optim_step(kind, flags, scalars, target._storage, target._layout, g._storage, g._layout, *args)
    return None if target is p else target


def _add(a, b, alpha):
    """torch's ``a.add(b, alpha=alpha)``: ``a + alpha * b``."""
    return a + b if alpha == 1.0 else a + b.affine(alpha, 0.0)


def _lerp(a, b, w):
    """torch's ``a.lerp(b, w)``, with its two forms (the one from ``b`` for ``|w| >= 0.5``)."""
    return a + (b - a).affine(w, 0.0) if abs(w) < 0.5 else b + (b - a).affine(w - 1.0, 0.0)


def _betas(self, g):
    betas = g["betas"]
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise EmberTypeError(f"[{self.name}] betas must be a pair of floats, got {betas!r}")
    g["betas"] = b1, b2 = float_arg(betas[0], self.name, "beta1"), float_arg(betas[1], self.name, "beta2")
    if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
        raise EmberValueError(f"[{self.name}] invalid betas {g['betas']}: each must be in [0, 1)")


class SGD(Optimizer):
    """Stochastic gradient descent with torch.optim.SGD's update rule and defaults.

    Per step (``g`` the gradient, negated with ``maximize``): ``g = g + weight_decay * p``; with a
    momentum, ``buf = g`` on the first step, then ``buf = momentum * buf + (1 - dampening) * g``, and
    ``g = g + momentum * buf`` (``nesterov``) or ``g = buf``; finally ``p = p - lr * g``. In float32 and
    float64 the step is one fused kernel and bit for bit torch's single-tensor path (torch's CPU default).

    Args:
        params: the parameters: ``model.parameters()``, ``model.named_parameters()``, or a list of
            param-group dicts (``{"params": [...], "lr": ...}``) overriding the defaults per group.
        lr: the learning rate.
        momentum: the momentum factor (0 for none).
        dampening: the dampening of the momentum.
        weight_decay: the L2 penalty added to the gradient.
        nesterov: use Nesterov momentum (needs a momentum and zero dampening).
        maximize: ascend the objective instead of descending it.
    """

    name = "SGD"

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 maximize=False):
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize})

    def _check(self, g):
        super()._check(g)
        self._floats(g, "momentum", "weight_decay")
        g["dampening"] = float_arg(g["dampening"], "SGD", "dampening")
        g["nesterov"] = bool_arg(g["nesterov"], "SGD", "nesterov")
        g["maximize"] = bool_arg(g["maximize"], "SGD", "maximize")
        if g["nesterov"] and (g["momentum"] <= 0 or g["dampening"] != 0):
            raise EmberValueError("[SGD] nesterov momentum requires a momentum and zero dampening")

    def _update(self, p, g, state, group):
        wd, mom, lr = group["weight_decay"], group["momentum"], group["lr"]
        if _fusable(p):
            flags = (_MAXIMIZE if group["maximize"] else 0) | (_WD if wd != 0 else 0)
            states = []
            if mom != 0:
                flags |= _MOMENTUM | (_NESTEROV if group["nesterov"] else 0)
                if state.get("momentum_buffer") is None:  # torch's first step: buf = grad.clone()
                    state["momentum_buffer"] = zeros_like(p)
                    flags |= _FIRST
                states = [state["momentum_buffer"]]
            return _fused(_SGD, flags, [wd, mom, 1.0 - group["dampening"], -lr], p, g, states, self._batch)
        if group["maximize"]:
            g = -g
        if wd:
            g = _add(g, p, wd)
        if mom:
            buf = state.get("momentum_buffer")
            buf = g.copy() if buf is None else _add(buf.affine(mom, 0.0), g, 1.0 - group["dampening"])
            state["momentum_buffer"] = buf
            g = _add(g, buf, mom) if group["nesterov"] else buf
        return _add(p, g, -lr)


class Adam(Optimizer):
    """Adam with torch.optim.Adam's update rule and defaults (L2 weight decay added to the gradient).

    Per step ``t``: ``g = g + weight_decay * p``; ``m = lerp(m, g, 1 - beta1)``; ``v = beta2 * v +
    (1 - beta2) * g * g``; with ``amsgrad`` ``v_max = max(v_max, v)`` replaces ``v`` below;
    ``p = p - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)``. In float32 and float64
    the step is one fused kernel, bit for bit torch's single-tensor path (torch's CPU default) with an
    IEEE sqrt: torch's CPU sqrt (MKL) rounds about one value in 150 one ulp low, ember's never.

    Args:
        params: the parameters: ``model.parameters()``, ``model.named_parameters()``, or a list of
            param-group dicts overriding the defaults per group.
        lr: the learning rate.
        betas: the decay rates of the first and second moment estimates.
        eps: added to the denominator.
        weight_decay: the L2 penalty added to the gradient.
        amsgrad: use the maximum of the past second moments (AMSGrad).
        maximize: ascend the objective instead of descending it.
    """

    name = "Adam"
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                 maximize=False):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad, "maximize": maximize})

    def _check(self, g):
        super()._check(g)
        _betas(self, g)
        self._floats(g, "eps", "weight_decay")
        g["amsgrad"] = bool_arg(g["amsgrad"], self.name, "amsgrad")
        g["maximize"] = bool_arg(g["maximize"], self.name, "maximize")

    # The first group's options, readable as attributes (torch keeps them in optimizer.defaults).
    betas = property(lambda self: self.param_groups[0]["betas"], doc="The first group's betas.")
    eps = property(lambda self: self.param_groups[0]["eps"], doc="The first group's eps.")
    weight_decay = property(lambda self: self.param_groups[0]["weight_decay"], doc="The first group's weight decay.")

    def _update(self, p, g, state, group):
        (b1, b2), lr, wd = group["betas"], group["lr"], group["weight_decay"]
        if not state:  # torch's initial state: zero averages
            state.update(step=0, exp_avg=zeros_like(p), exp_avg_sq=zeros_like(p))
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = zeros_like(p)
        t = state["step"] = state["step"] + 1
        if _fusable(p):
            flags = (_MAXIMIZE if group["maximize"] else 0) | (_WD if wd != 0 else 0)
            flags |= (_DECOUPLED if self._decoupled else 0) | (_AMSGRAD if group["amsgrad"] else 0)
            if group["amsgrad"] and "max_exp_avg_sq" not in state:
                state["max_exp_avg_sq"] = zeros_like(p)
            # torch's scalars, in double: step_size = lr / bias_correction1, bias_correction2 ** 0.5
            bc1, bc2 = 1.0 - b1 ** t, 1.0 - b2 ** t
            scalars = [1.0 - lr * wd if self._decoupled else wd, 1.0 - b1, b2, 1.0 - b2, bc2 ** 0.5,
                       group["eps"], -(lr / bc1)]
            return _fused(_ADAM, flags, scalars, p, g,
                          [state["exp_avg"], state["exp_avg_sq"], state.get("max_exp_avg_sq") if group["amsgrad"] else None],
                          self._batch)
        if group["maximize"]:
            g = -g
        if wd:
            if self._decoupled:
                p = p.affine(1.0 - lr * wd, 0.0)
            else:
                g = _add(g, p, wd)
        m = state["exp_avg"] = _lerp(state["exp_avg"], g, 1.0 - b1)
        v = state["exp_avg_sq"] = state["exp_avg_sq"].affine(b2, 0.0) + g.affine(1.0 - b2, 0.0) * g
        step_size = lr / (1.0 - b1 ** t)
        bc2_sqrt = (1.0 - b2 ** t) ** 0.5
        if group["amsgrad"]:
            v = state["max_exp_avg_sq"] = maximum(state.get("max_exp_avg_sq", v), v)
        denom = v.sqrt() / bc2_sqrt + group["eps"]
        return p + m.affine(-step_size, 0.0) / denom


class AdamW(Adam):
    """Adam with decoupled weight decay, with torch.optim.AdamW's update rule and defaults.

    Per step: ``p = p * (1 - lr * weight_decay)``, then Adam's update (see ``Adam``) without the L2 term;
    fused and bit for bit torch's single-tensor path with an IEEE sqrt, as ``Adam``.

    Args:
        params: the parameters: ``model.parameters()``, ``model.named_parameters()``, or a list of
            param-group dicts overriding the defaults per group.
        lr: the learning rate.
        betas: the decay rates of the first and second moment estimates.
        eps: added to the denominator.
        weight_decay: the decoupled weight decay factor.
        amsgrad: use the maximum of the past second moments (AMSGrad).
        maximize: ascend the objective instead of descending it.
    """

    name = "AdamW"
    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 maximize=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize)


class RMSprop(Optimizer):
    """RMSprop with torch.optim.RMSprop's update rule and defaults.

    Per step: ``g = g + weight_decay * p``; ``sq = alpha * sq + (1 - alpha) * g * g``; the
    denominator is ``sqrt(sq) + eps``, or with ``centered`` ``sqrt(sq - ga * ga) + eps`` where
    ``ga = lerp(ga, g, 1 - alpha)``; with a momentum ``buf = momentum * buf + g / denom`` and
    ``p = p - lr * buf``, else ``p = p - lr * g / denom``. In float32 and float64 the step is one fused
    kernel, bit for bit torch's single-tensor path (torch's CPU default) with an IEEE sqrt (see ``Adam``).

    Args:
        params: the parameters: ``model.parameters()``, ``model.named_parameters()``, or a list of
            param-group dicts overriding the defaults per group.
        lr: the learning rate.
        alpha: the smoothing constant of the squared-gradient average.
        eps: added to the denominator.
        weight_decay: the L2 penalty added to the gradient.
        momentum: the momentum factor (0 for none).
        centered: normalise by the estimated variance of the gradient instead of its second moment.
        maximize: ascend the objective instead of descending it.
    """

    name = "RMSprop"

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False,
                 maximize=False):
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay,
                                  "momentum": momentum, "centered": centered, "maximize": maximize})

    def _check(self, g):
        super()._check(g)
        self._floats(g, "alpha", "eps", "weight_decay", "momentum")
        g["centered"] = bool_arg(g["centered"], "RMSprop", "centered")
        g["maximize"] = bool_arg(g["maximize"], "RMSprop", "maximize")

    def _update(self, p, g, state, group):
        alpha, lr, wd, mom = group["alpha"], group["lr"], group["weight_decay"], group["momentum"]
        if not state:  # torch's initial state: zero averages and buffer
            state.update(step=0, square_avg=zeros_like(p))
            if mom > 0:
                state["momentum_buffer"] = zeros_like(p)
            if group["centered"]:
                state["grad_avg"] = zeros_like(p)
        state["step"] += 1
        if _fusable(p):
            flags = (_MAXIMIZE if group["maximize"] else 0) | (_WD if wd != 0 else 0)
            flags |= (_MOMENTUM if mom > 0 else 0) | (_CENTERED if group["centered"] else 0)
            if group["centered"] and "grad_avg" not in state:
                state["grad_avg"] = zeros_like(p)
            if mom > 0 and "momentum_buffer" not in state:
                state["momentum_buffer"] = zeros_like(p)
            states = [state["square_avg"], state["grad_avg"] if group["centered"] else None,
                      state["momentum_buffer"] if mom > 0 else None]
            return _fused(_RMSPROP, flags, [wd, alpha, 1.0 - alpha, group["eps"], mom, -lr], p, g, states, self._batch)
        if group["maximize"]:
            g = -g
        if wd:
            g = _add(g, p, wd)
        sq = state["square_avg"] = state["square_avg"].affine(alpha, 0.0) + g.affine(1.0 - alpha, 0.0) * g
        if group["centered"]:
            ga = state["grad_avg"] = _lerp(state.get("grad_avg", zeros_like(p)), g, 1.0 - alpha)
            avg = (sq - ga * ga).sqrt()
        else:
            avg = sq.sqrt()
        avg = avg + group["eps"]
        if mom > 0:
            buf = state["momentum_buffer"] = state.get("momentum_buffer", zeros_like(p)).affine(mom, 0.0) + g / avg
            return _add(p, buf, -lr)
        return p + g.affine(-lr, 0.0) / avg
