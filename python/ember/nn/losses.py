"""Loss functions: cross_entropy (log_softmax + gather) and mse_loss."""
from __future__ import annotations

from ..errors import DTypeError, EmberValueError, IndexOutOfRange, ShapeError
from ..tensor import Tensor, tensor, where
from . import ops


def cross_entropy(logits: Tensor, targets, reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Cross-entropy of ``logits`` (..., classes) against integer ``targets`` (...), like torch's
    ``F.cross_entropy`` with the class dim last: targets equal to ``ignore_index`` contribute
    nothing and are left out of the mean. ``reduction``: "mean" | "sum" | "none"."""
    ops._check_tensor(logits, "cross_entropy", "logits")
    if not isinstance(targets, Tensor):
        targets = tensor(targets)
    if targets.dtype.is_float:
        raise DTypeError(f"[cross_entropy] targets must be integer class ids, got {targets.dtype.name}")
    if logits.ndim < 1 or logits.shape[:-1] != targets.shape:
        raise ShapeError(f"[cross_entropy] logits {logits.shape} do not fit targets {targets.shape} "
                         "(expected logits (..., classes))")
    if reduction not in ("mean", "sum", "none"):
        raise EmberValueError(f"[cross_entropy] unknown reduction {reduction!r}")
    keep = None
    if ignore_index is not None and targets.numel():
        ignored = targets.eq(ignore_index)
        if ignored.max().item():  # only pay for the mask when some target is ignored
            keep = targets.ne(ignore_index).to_dtype(logits.dtype)
            targets = where(ignored, 0, targets)  # any valid id: its term is masked out below
    logp = ops.log_softmax(logits, -1)
    n = logits.shape[-1]
    if targets.numel():  # gather would read a negative id from the end: a silent wrong loss
        lo, hi = int(targets.min().item()), int(targets.max().item())
        if lo < 0 or hi >= n:
            raise IndexOutOfRange(f"[cross_entropy] target {lo if lo < 0 else hi} out of range for {n} classes "
                                  "(targets are class ids in [0, classes), or ignore_index)")
    picked = logp.gather(targets.unsqueeze(-1), -1).squeeze(-1)
    if keep is not None:
        picked = picked * keep
    if reduction == "none":
        return -picked
    total = picked.sum()
    if reduction == "sum":
        return -total
    if keep is None:
        return total.affine(-1.0 / max(targets.numel(), 1), 0.0)
    return -total / keep.sum()  # torch: mean over the targets that are not ignored (nan if none)


def mse_loss(pred: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """The squared error ``(pred - target) ** 2``, averaged, summed or per element.

    Args:
        pred: the predictions, a float tensor.
        target: the targets, the same shape.
        reduction: "mean", "sum" or "none".

    Returns:
        Tensor: a scalar, or the per-element errors for "none"; differentiable.

    Raises:
        ShapeError: the shapes differ.
        EmberValueError: an unknown reduction.
    """
    ops._check_tensor(pred, "mse_loss", "prediction")
    ops._check_tensor(target, "mse_loss", "target")
    if reduction not in ("mean", "sum", "none"):  # an unknown one used to fall through to "none"
        raise EmberValueError(f"[mse_loss] unknown reduction {reduction!r}")
    if pred.shape != target.shape:
        raise ShapeError(f"[mse_loss] shape mismatch {pred.shape} vs {target.shape}")
    d = (pred - target).sqr()
    return d.mean() if reduction == "mean" else d.sum() if reduction == "sum" else d
