"""Optimizers: SGD (momentum, nesterov, weight decay) and AdamW, with torch's update rules."""
from __future__ import annotations

import math

from .backprop import no_grad
from .errors import EmberError
from .tensor import Var


class Optimizer:
    """Holds the variables to update. ``step(grads)`` applies one update from a GradStore;
    ``backward_step(loss)`` runs ``loss.backward()`` then ``step``. Variables without a
    gradient in the store are left untouched (as torch does for ``grad is None``)."""

    name = "optimizer"

    def __init__(self, params, lr):
        params = list(params)
        # Accept model.named_parameters() as well as model.parameters().
        params = [p[1] if isinstance(p, tuple) else p for p in params]
        if not params:
            raise EmberError(f"[{self.name}] got an empty parameter list")
        for p in params:
            if not isinstance(p, Var):
                raise EmberError(f"[{self.name}] parameters must be em.Var, got {type(p).__name__}")
            if not p.dtype.is_float:
                raise EmberError(f"[{self.name}] parameters must be float, got {p.dtype.name}")
        if lr < 0:
            raise EmberError(f"[{self.name}] invalid learning rate {lr}")
        self.params = params
        self.lr = float(lr)
        self.state = {}  # id(var) -> per-variable state (ember tensors)

    def step(self, grads) -> None:
        with no_grad():  # updates are never part of a graph
            for p in self.params:
                g = grads.get(p)
                if g is None:
                    continue
                if g.shape != p.shape:
                    raise EmberError(f"[{self.name}] gradient shape {g.shape} does not match parameter {p.shape}")
                g = g.detach()
                if g.dtype is not p.dtype:
                    g = g.to_dtype(p.dtype)
                p.set(self._update(p.detach(), g, self.state.setdefault(id(p), {})))

    def backward_step(self, loss):
        """loss.backward() then step(); returns the GradStore."""
        grads = loss.backward()
        self.step(grads)
        return grads

    def _update(self, p, g, state):
        raise NotImplementedError


class SGD(Optimizer):
    """torch.optim.SGD: g += wd * p; buf = momentum * buf + (1 - dampening) * g (buf = g first);
    g = g + momentum * buf (nesterov) or buf; p -= lr * g."""

    name = "SGD"

    def __init__(self, params, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        super().__init__(params, lr)
        if momentum < 0 or weight_decay < 0:
            raise EmberError(f"[SGD] invalid momentum {momentum} or weight_decay {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise EmberError("[SGD] nesterov momentum requires a momentum and zero dampening")
        self.momentum, self.dampening = float(momentum), float(dampening)
        self.weight_decay, self.nesterov = float(weight_decay), bool(nesterov)

    def _update(self, p, g, state):
        if self.weight_decay:
            g = g + p.affine(self.weight_decay, 0.0)
        if self.momentum:
            buf = state.get("momentum_buffer")
            buf = g.copy() if buf is None else buf.affine(self.momentum, 0.0) + g.affine(1.0 - self.dampening, 0.0)
            state["momentum_buffer"] = buf
            g = g + buf.affine(self.momentum, 0.0) if self.nesterov else buf
        return p - g.affine(self.lr, 0.0)


class AdamW(Optimizer):
    """torch.optim.AdamW (defaults lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    decoupled decay p *= 1 - lr * wd, then Adam with bias correction."""

    name = "AdamW"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr)
        b1, b2 = betas
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0) or eps < 0 or weight_decay < 0:
            raise EmberError(f"[AdamW] invalid betas {betas}, eps {eps} or weight_decay {weight_decay}")
        self.betas, self.eps, self.weight_decay = (float(b1), float(b2)), float(eps), float(weight_decay)

    def _update(self, p, g, state):
        b1, b2 = self.betas
        t = state["step"] = state.get("step", 0) + 1
        m, v = state.get("exp_avg"), state.get("exp_avg_sq")
        if m is None:  # first step: the averages start from zero
            m, v = g.affine(1.0 - b1, 0.0), g.sqr().affine(1.0 - b2, 0.0)
        else:
            m = m.affine(b1, 0.0) + g.affine(1.0 - b1, 0.0)
            v = v.affine(b2, 0.0) + g.sqr().affine(1.0 - b2, 0.0)
        state["exp_avg"], state["exp_avg_sq"] = m, v
        step_size = self.lr / (1.0 - b1 ** t)
        denom = v.sqrt().affine(1.0 / math.sqrt(1.0 - b2 ** t), self.eps)
        if self.weight_decay:
            p = p.affine(1.0 - self.lr * self.weight_decay, 0.0)
        return p - m.affine(step_size, 0.0) / denom
