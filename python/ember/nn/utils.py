"""em.nn.utils: gradient clipping (``clip_grad_norm_``, ``clip_grad_value_``) on the GradStore backward returns."""
from __future__ import annotations

import math

from ..args import float_arg
from ..backprop import GradStore, no_grad
from ..creation import tensor
from ..errors import EmberTypeError, EmberValueError
from ..multi import stack
from ..tensor_type import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm"]


def _entries(op, grads, parameters):
    """The (tensor, gradient) pairs to clip: the whole store, or its entries for ``parameters``."""
    if not isinstance(grads, GradStore):
        hint = (" (torch's first argument is the parameters; ember keeps gradients in the GradStore from "
                f"backward(): {op}(grads, ...) or {op}(grads, ..., parameters=model.parameters()))")
        raise EmberTypeError(f"[{op}] expects the GradStore from loss.backward(), got {type(grads).__name__}"
                             + (hint if isinstance(grads, (list, tuple, Tensor)) or hasattr(grads, "__next__") else ""))
    if parameters is None:
        return grads.items()
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    elif isinstance(parameters, (str, bytes, dict)) or not hasattr(parameters, "__iter__"):
        raise EmberTypeError(f"[{op}] parameters must be a tensor or an iterable of them, got "
                             f"{type(parameters).__name__}")
    out, seen = [], set()
    for p in parameters:
        p = p[1] if isinstance(p, tuple) and len(p) == 2 else p  # named_parameters()
        if not isinstance(p, Tensor):
            raise EmberTypeError(f"[{op}] parameters must be tensors, got a {type(p).__name__}")
        g = grads.get(p)
        if g is not None and id(p) not in seen:  # a parameter without a gradient is skipped, as torch
            seen.add(id(p))
            out.append((p, g))
    return out


def _norm(t, p):
    """The vector norm of order ``p`` of all of t's elements, a 0-d tensor of t's dtype."""
    if p in (math.inf, -math.inf):
        if not t.numel():  # an empty gradient adds nothing (torch refuses its inf norm)
            return t.sum()
        return t.abs().max() if p > 0 else t.abs().min()
    if p == 0:
        return t.ne(0).sum().to_dtype(t.dtype)
    if p == 1:
        return t.abs().sum()
    if p == 2:
        return t.sqr().sum().sqrt()
    return t.abs().powf(p).sum().powf(1.0 / p)


def get_total_norm(grads, norm_type=2.0, error_if_nonfinite=False, *, parameters=None):
    """The norm of all gradients together (torch's ``nn.utils.get_total_norm``): the norm of the
    per-gradient norms.

    Args:
        grads: the GradStore from ``loss.backward()``.
        norm_type: the order of the norm: a positive float, ``inf`` (the largest magnitude), ``-inf``
            or 0 (the count of nonzeros).
        error_if_nonfinite: raise when the total norm is NaN or infinite (reads it back, a sync).
        parameters: only these parameters' gradients (an iterable of tensors, or
            ``model.named_parameters()``); default all of the store's.

    Returns:
        A 0-d tensor on the first gradient's device (0.0 when there are no gradients).
    """
    return _total("get_total_norm", _entries("get_total_norm", grads, parameters), norm_type, error_if_nonfinite)


def _total(op, entries, norm_type, error_if_nonfinite):
    p = float_arg(norm_type, op, "norm_type")
    if math.isnan(p) or (p < 0 and p != -math.inf):
        raise EmberValueError(f"[{op}] norm_type must be a non-negative number, inf or -inf, got {p}")
    if not entries:
        return tensor(0.0)
    dev = entries[0][1].device
    with no_grad():
        norms = [_norm(g.detach(), p).to_device(dev) for _, g in entries]
        dt = norms[0].dtype
        for n in norms[1:]:  # mixed gradient dtypes: the widest, as torch.stack promotes
            if n.dtype.itemsize > dt.itemsize:
                dt = n.dtype
        total = _norm(stack([n.to_dtype(dt) for n in norms], 0), p)
    if error_if_nonfinite and not math.isfinite(float(total.item())):
        raise EmberValueError(f"[{op}] the total norm of order {p} of the gradients is non-finite, so they "
                              "cannot be clipped; pass error_if_nonfinite=False to clip anyway")
    return total


def clip_grad_norm_(grads, max_norm, norm_type=2.0, error_if_nonfinite=False, *, parameters=None):
    """Scales the gradients in ``grads`` so that their total norm is at most ``max_norm``, as torch's
    ``clip_grad_norm_`` (the same formula: each gradient times ``min(1, max_norm / (total + 1e-6))``).

    ember keeps gradients in the GradStore ``loss.backward()`` returns, not on the parameters, so
    this takes the store and updates it in place: each entry is replaced by its scaled gradient. A
    training step::

        g = loss.backward()
        em.nn.utils.clip_grad_norm_(g, 1.0)                      # every gradient in the store
        em.nn.utils.clip_grad_norm_(g, 1.0, parameters=model.parameters())  # or only these
        opt.step(g)

    Args:
        grads: the GradStore from ``loss.backward()``.
        max_norm: the largest total norm kept.
        norm_type: the order of the norm: a positive float, ``inf`` (the largest magnitude), ``-inf``
            or 0.
        error_if_nonfinite: raise when the total norm is NaN or infinite (reads it back, a sync);
            otherwise the gradients are scaled by a NaN factor, as torch does.
        parameters: only these parameters' gradients are measured and scaled (an iterable of tensors,
            or ``model.named_parameters()``); parameters without a gradient in the store are skipped.
            Default: every gradient in the store.

    Returns:
        The total norm of the gradients before clipping, a 0-d tensor (as torch).

    Raises:
        EmberTypeError: ``grads`` is not a GradStore (torch's order, parameters first, says so).
        EmberValueError: a bad ``norm_type``, or a non-finite norm with ``error_if_nonfinite``.
    """
    op = "clip_grad_norm_"
    entries = _entries(op, grads, parameters)
    max_norm = float_arg(max_norm, op, "max_norm")
    total = _total(op, entries, norm_type, error_if_nonfinite)
    if not entries:
        return total
    with no_grad():
        coef = (max_norm / (total + 1e-6)).clamp(hi=1.0)  # a tensor: no read-back, as torch
        for t, g in entries:
            grads.insert(t, g * coef.to_dtype(g.dtype).to_device(g.device))
    return total


def clip_grad_value_(grads, clip_value, *, parameters=None) -> None:
    """Clamps every gradient in ``grads`` to ``[-clip_value, clip_value]``, in place in the store
    (each entry is replaced by its clamped gradient), as torch's ``clip_grad_value_``.

    Args:
        grads: the GradStore from ``loss.backward()``.
        clip_value: the largest magnitude kept.
        parameters: only these parameters' gradients (an iterable of tensors, or
            ``model.named_parameters()``); default every gradient in the store.

    Raises:
        EmberTypeError: ``grads`` is not a GradStore.
    """
    op = "clip_grad_value_"
    entries = _entries(op, grads, parameters)
    v = float_arg(clip_value, op, "clip_value")
    with no_grad():
        for t, g in entries:
            grads.insert(t, g.clamp(-v, v))
