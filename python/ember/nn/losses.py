"""Loss functions: cross_entropy (log_softmax + gather) and mse_loss."""
from __future__ import annotations

from ..errors import DTypeError, ShapeError
from ..tensor import Tensor, tensor
from . import ops


def cross_entropy(logits: Tensor, targets, reduction: str = "mean") -> Tensor:
    """Cross-entropy of ``logits`` (..., classes) against integer ``targets`` (...), like torch's
    ``F.cross_entropy`` with the class dim last. ``reduction``: "mean" | "sum" | "none"."""
    if not isinstance(targets, Tensor):
        targets = tensor(targets)
    if targets.dtype.is_float:
        raise DTypeError(f"[cross_entropy] targets must be integer class ids, got {targets.dtype.name}")
    if logits.ndim < 1 or logits.shape[:-1] != targets.shape:
        raise ShapeError(f"[cross_entropy] logits {logits.shape} do not fit targets {targets.shape} "
                         "(expected logits (..., classes))")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"[cross_entropy] unknown reduction {reduction!r}")
    logp = ops.log_softmax(logits, -1)
    picked = logp.gather(targets.unsqueeze(-1), -1).squeeze(-1)
    if reduction == "none":
        return -picked
    total = picked.sum()
    return -total if reduction == "sum" else total.affine(-1.0 / max(targets.numel(), 1), 0.0)


def mse_loss(pred: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Mean (or summed) squared error."""
    if pred.shape != target.shape:
        raise ShapeError(f"[mse_loss] shape mismatch {pred.shape} vs {target.shape}")
    d = (pred - target).sqr()
    return d.mean() if reduction == "mean" else d.sum() if reduction == "sum" else d
