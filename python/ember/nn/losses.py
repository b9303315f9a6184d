"""Loss functions as torch.nn.functional has them: cross_entropy / nll_loss (class ids or probabilities,
class weights, ignore_index, label smoothing), the binary cross-entropies, mse / l1 / huber / smooth_l1
and kl_div; each a composite of ember's kernels, differentiable in every float input. The class dim
is the LAST dim (torch's dim 1; the same for the usual (N, C) logits)."""
from __future__ import annotations

from .. import _C
from ..args import float_arg
from ..backprop import is_grad_enabled, tracks
from ..creation import tensor
from ..custom_op import CustomOp1
from ..dtypes import int32, int64
from ..errors import DeviceError, DTypeError, EmberValueError, IndexOutOfRange, ShapeError
from ..fused_op import FusedOp
from ..kernel_result import dense_like as _out
from ..multi import where
from ..tensor_type import Tensor
from . import ops
from .act_fns import softplus_stable

__all__ = [
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy", "huber_loss", "kl_div",
    "l1_loss", "mse_loss", "nll_loss", "smooth_l1_loss",
]

_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction, op, allowed=_REDUCTIONS):
    if reduction not in allowed:
        raise EmberValueError(f"[{op}] unknown reduction {reduction!r} (expected one of {', '.join(allowed)})")


def _reduce(per, reduction):
    return per.mean() if reduction == "mean" else per.sum() if reduction == "sum" else per


def _float_like(t, x, op, what):
    """``t`` (a Tensor or array-like) as a float tensor on x's device with x's dtype."""
    if not isinstance(t, Tensor):  # converted on the host, so float64 data works on devices without it
        t = tensor(t, dtype=x.dtype, device=x.device)
    if t.device != x.device:
        raise DeviceError(f"[{op}] {what} is on {t.device}, input on {x.device}")
    if not t.dtype.is_float:
        raise DTypeError(f"[{op}] {what} must be a float tensor, got {t.dtype.name}")
    return t if t.dtype is x.dtype else t.to_dtype(x.dtype)


def _pair(pred, target, op):
    """Checks a (prediction, target) pair of equal shapes; the target follows the prediction's dtype."""
    ops._check_tensor(pred, op, "input")
    if not pred.dtype.is_float:
        raise DTypeError(f"[{op}] input must be a float tensor, got {pred.dtype.name}")
    target = _float_like(target, pred, op, "target")
    if pred.shape != target.shape:
        raise ShapeError(f"[{op}] input {pred.shape} and target {target.shape} differ in shape")
    return target


def _class_weight(weight, x, op):
    if weight is None:
        return None
    w = _float_like(weight, x, op, "weight")
    if w.shape != (x.shape[-1],):
        raise ShapeError(f"[{op}] expected weight of shape ({x.shape[-1]},) (one per class), got {w.shape}")
    return w


def _class_targets(logp, targets, ignore_index, op):
    """(targets with ignored ids replaced by 0, the 0/1 keep mask or None) after the range check."""
    if not isinstance(targets, Tensor):
        targets = tensor(targets, device=logp.device)
    if targets.dtype.is_float:
        raise DTypeError(f"[{op}] targets must be integer class ids, got {targets.dtype.name}")
    if logp.ndim < 1 or logp.shape[:-1] != targets.shape:
        raise ShapeError(f"[{op}] input {logp.shape} does not fit targets {targets.shape} "
                         "(expected input (..., classes) and targets (...))")
    keep = None
    if ignore_index is not None and targets.numel():
        ignored = targets.eq(ignore_index)
        if ignored.max().item():  # only pay for the mask when some target is ignored
            keep = targets.ne(ignore_index).to_dtype(logp.dtype)
            targets = where(ignored, 0, targets)  # any valid id: its term is masked out
    n = logp.shape[-1]
    if targets.numel():  # gather would read a negative id from the end: a silent wrong loss
        lo, hi = int(targets.min().item()), int(targets.max().item())
        if lo < 0 or hi >= n:
            raise IndexOutOfRange(f"[{op}] target {lo if lo < 0 else hi} out of range for {n} classes "
                                  "(targets are class ids in [0, classes), or ignore_index)")
    return targets, keep


def _target_weights(targets, keep, weight):
    """Per-target weight w[t] * keep (keep alone without weights; None for neither)."""
    wt = keep
    if weight is not None:
        wt = weight.index_select(targets.reshape(-1), 0).reshape(*targets.shape)
        if keep is not None:
            wt = wt * keep
    return wt


def _nll_terms(logp, targets, weight, ignore_index, op):
    """(per-target -w[t] * logp[t], per-target weight w[t] * keep or None, keep or None)."""
    targets, keep = _class_targets(logp, targets, ignore_index, op)
    return _picked(logp, targets, keep, weight)


def _picked(logp, targets, keep, weight):
    """_nll_terms after the target checks: targets already with ignored ids replaced, keep their mask."""
    picked = logp.gather(targets.unsqueeze(-1), -1).squeeze(-1)
    wt = _target_weights(targets, keep, weight)
    per = -picked if wt is None else -(picked * wt)
    return per, wt, keep


class _CrossEntropy(FusedOp, CustomOp1):
    """cross_entropy over class ids, per target (reduction "none"): one fused kernel each way on every
    device; its composite (log_softmax, the picked and the smoothing terms) is the create_graph form."""

    name = "cross_entropy"
    saved = "lse"

    def __init__(self, targets, fixed, keep, weight, ignore_index, eps):
        self.targets, self.fixed, self.keep, self.weight = targets, fixed, keep, weight
        self.ignore, self.eps = ignore_index, eps
        self.lse = None

    def _args(self):
        t, w = self.targets, self.weight
        return (t._storage, t._layout, None if w is None else w._storage, None if w is None else w._layout,
                self.ignore, self.eps)

    def cpu_fwd(self, storage, layout):
        loss, self.lse = _C.fused.cross_entropy_fwd(storage, layout, *self._args())
        return loss, tuple(layout.shape)[:-1]

    def bwd_kernel(self, x, y, g):
        return _out(_C.fused.cross_entropy_bwd(x._storage, x._layout, *self._args(), self.lse, g._storage,
                                               g._layout), x.shape, x)

    def composite(self, x):
        logp = ops.log_softmax(x, -1)
        w, keep = self.weight, self.keep
        per, _, _ = _picked(logp, self.fixed, keep, w)
        if not self.eps:
            return per
        # The uniform part: -sum_c w_c logp_c per target, masked like the nll part.
        smooth = -((logp if w is None else logp * w).sum(-1))
        if keep is not None:
            smooth = smooth * keep
        return per.affine(1.0 - self.eps, 0.0) + smooth.affine(self.eps / x.shape[-1], 0.0)


def _mean_over(total, wt, count):
    """torch's mean of a class-id loss: over the weights of the kept targets (nan if none kept)."""
    if wt is None:
        return total.affine(1.0 / max(count, 1), 0.0)
    return total / wt.sum()


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """The negative log-likelihood of log-probabilities ``input`` (..., classes) at integer ``target``
    (...), as ``torch.nn.functional.nll_loss`` with the class dim last.

    Args:
        input: float log-probabilities (..., C), e.g. ``log_softmax(logits, -1)``.
        target: integer class ids (...), in [0, C) or equal to ``ignore_index``.
        weight: optional (C,) per-class weights; the mean divides by the weights of the targets.
        ignore_index: targets equal to it contribute nothing (and are left out of the mean).
        reduction: "mean", "sum" or "none".

    Returns:
        Tensor: a scalar, or per-target losses of target's shape for "none"; differentiable in input
        (and weight).

    Raises:
        ShapeError: the shapes do not fit.
        DTypeError: float targets or a non-float input.
        IndexOutOfRange: a target outside [0, C) that is not ignore_index.
        EmberValueError: an unknown reduction.
    """
    op = "nll_loss"
    ops._check_tensor(input, op, "input")
    if not input.dtype.is_float:
        raise DTypeError(f"[{op}] input must be a float tensor, got {input.dtype.name}")
    _check_reduction(reduction, op)
    if input.ndim < 1:
        raise ShapeError(f"[{op}] expected input (..., classes), got a scalar")
    w = _class_weight(weight, input, op)
    per, wt, _ = _nll_terms(input, target, w, ignore_index, op)
    if reduction == "none":
        return per
    total = per.sum()
    return total if reduction == "sum" else _mean_over(total, wt, per.numel())


def cross_entropy(logits: Tensor, targets, reduction: str = "mean", ignore_index: int = -100, weight=None,
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of ``logits`` (..., classes) against integer class ids (...) or class
    probabilities (..., classes), as ``torch.nn.functional.cross_entropy`` with the class dim last.

    With class ids, targets equal to ``ignore_index`` contribute nothing and are left out of the mean,
    and with ``weight`` the mean divides by the summed weights of the targets (torch's rule). With
    ``label_smoothing`` e the target becomes ``(1 - e) * one_hot + e / C``.

    Args:
        logits: float scores (..., C); any strides.
        targets: integer class ids (...), or float probabilities of logits' shape.
        reduction: "mean", "sum" or "none".
        ignore_index: the class id to ignore (class-id targets only).
        weight: optional (C,) per-class weights.
        label_smoothing: e in [0, 1].

    Returns:
        Tensor: a scalar, or per-target losses (...) for "none"; differentiable in logits (and weight
        and probability targets).

    Raises:
        ShapeError: the shapes do not fit.
        DTypeError: a non-float logits tensor, or float targets not of logits' shape.
        IndexOutOfRange: a class id outside [0, C) that is not ignore_index.
        EmberValueError: an unknown reduction, or label_smoothing outside [0, 1].
    """
    op = "cross_entropy"
    ops._check_tensor(logits, op, "logits")
    _check_reduction(reduction, op)
    eps = float_arg(label_smoothing, op, "label_smoothing")
    if not 0.0 <= eps <= 1.0:
        raise EmberValueError(f"[{op}] label_smoothing must be in [0, 1], got {eps}")
    if logits.ndim < 1:
        raise ShapeError(f"[{op}] expected logits (..., classes), got a scalar")
    w = _class_weight(weight, logits, op)
    n = logits.shape[-1]
    if isinstance(targets, Tensor) and targets.dtype.is_float:  # class probabilities
        if targets.shape != logits.shape:  # neither class ids nor probabilities
            raise DTypeError(f"[{op}] targets must be integer class ids of shape {logits.shape[:-1]} or float "
                             f"probabilities of logits' shape {logits.shape}, got {targets.dtype.name} {targets.shape}")
        t = _float_like(targets, logits, op, "targets")
        if eps:
            t = t.affine(1.0 - eps, eps / n)
        logp = ops.log_softmax(logits, -1)
        per = -((logp * t if w is None else logp * t * w).sum(-1))
        return _reduce(per, reduction)
    if not isinstance(targets, Tensor):
        targets = tensor(targets, device=logits.device)
    fixed, keep = _class_targets(logits, targets, ignore_index, op)
    fused = (targets.dtype in (int64, int32) and targets.device == logits.device
             and (ignore_index is None or (isinstance(ignore_index, int) and -(2 ** 63) <= ignore_index < 2 ** 63))
             and not (w is not None and is_grad_enabled() and tracks(w)))  # the kernel has no dw
    fn = _CrossEntropy(targets, fixed, keep, w, -(2 ** 63) if ignore_index is None else ignore_index, eps)
    per = logits.apply_op1(fn) if fused else fn.composite(logits)
    if reduction == "none":
        return per
    total = per.sum()
    return total if reduction == "sum" else _mean_over(total, _target_weights(fixed, keep, w), per.numel())


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
    _check_reduction(reduction, "mse_loss")  # an unknown one used to fall through to "none"
    if pred.shape != target.shape:
        raise ShapeError(f"[mse_loss] shape mismatch {pred.shape} vs {target.shape}")
    return _reduce((pred - target).sqr(), reduction)


def l1_loss(input, target, reduction="mean"):
    """The absolute error ``|input - target|``, as ``torch.nn.functional.l1_loss``.

    Args:
        input: the predictions, a float tensor.
        target: the targets, the same shape.
        reduction: "mean", "sum" or "none".

    Returns:
        Tensor: a scalar, or the per-element errors for "none"; differentiable in both.

    Raises:
        ShapeError: the shapes differ.
        EmberValueError: an unknown reduction.
    """
    _check_reduction(reduction, "l1_loss")
    target = _pair(input, target, "l1_loss")
    return _reduce((input - target).abs(), reduction)


def _huber(input, target, delta, reduction, op, scale):
    _check_reduction(reduction, op)
    target = _pair(input, target, op)
    a = (input - target).abs()
    if delta == 0.0:
        return _reduce(a, reduction)  # smooth_l1 with beta 0 is l1 (a 0/0 otherwise)
    q = a.clamp(hi=delta)
    # 0.5 q^2 + delta (a - q): quadratic inside |d| < delta, linear with slope delta outside.
    per = q.sqr().affine(0.5, 0.0) + (a - q).affine(delta, 0.0)
    return _reduce(per.affine(scale, 0.0) if scale != 1.0 else per, reduction)


def huber_loss(input, target, reduction="mean", delta=1.0):
    """Huber loss, as ``torch.nn.functional.huber_loss``: ``0.5 d^2`` where ``|d| < delta``, else
    ``delta (|d| - 0.5 delta)``, with ``d = input - target``.

    Args:
        input: the predictions, a float tensor.
        target: the targets, the same shape.
        reduction: "mean", "sum" or "none".
        delta: the switch point, > 0.

    Returns:
        Tensor: a scalar, or per-element losses for "none"; differentiable in both.

    Raises:
        ShapeError: the shapes differ.
        EmberValueError: an unknown reduction or delta <= 0.
    """
    delta = float_arg(delta, "huber_loss", "delta")
    if not delta > 0.0:
        raise EmberValueError(f"[huber_loss] delta must be positive, got {delta}")
    return _huber(input, target, delta, reduction, "huber_loss", 1.0)


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """Smooth L1 loss, as ``torch.nn.functional.smooth_l1_loss``: ``0.5 d^2 / beta`` where
    ``|d| < beta``, else ``|d| - 0.5 beta`` (huber_loss / beta; l1_loss for beta 0).

    Args:
        input: the predictions, a float tensor.
        target: the targets, the same shape.
        reduction: "mean", "sum" or "none".
        beta: the switch point, >= 0.

    Returns:
        Tensor: a scalar, or per-element losses for "none"; differentiable in both.

    Raises:
        ShapeError: the shapes differ.
        EmberValueError: an unknown reduction or beta < 0.
    """
    beta = float_arg(beta, "smooth_l1_loss", "beta")
    if not beta >= 0.0:
        raise EmberValueError(f"[smooth_l1_loss] beta must be >= 0, got {beta}")
    return _huber(input, target, beta, reduction, "smooth_l1_loss", 1.0 / beta if beta else 1.0)


def _safe_log(x, floor=None):
    """log(x) with log(0) = -inf replaced by ``floor`` (or 0), so no inf * 0 reaches a gradient."""
    pos = x.gt(0.0)
    lg = where(pos, x, 1.0).log()
    return where(pos, lg, 0.0 if floor is None else floor)


def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    """``-(t log p + (1 - t) log(1 - p))`` for probabilities ``p = input``, as
    ``torch.nn.functional.binary_cross_entropy`` (each log clamped at -100, as torch).

    Args:
        input: probabilities in [0, 1], a float tensor.
        target: targets of the same shape (usually 0 / 1).
        weight: optional weights broadcast against the per-element losses.
        reduction: "mean", "sum" or "none".

    Returns:
        Tensor: a scalar, or per-element losses for "none"; differentiable in input and target.

    Raises:
        ShapeError: the shapes differ.
        EmberValueError: an input outside [0, 1], or an unknown reduction.
    """
    op = "binary_cross_entropy"
    _check_reduction(reduction, op)
    target = _pair(input, target, op)
    if input.numel() and (input - input.clamp(0.0, 1.0)).abs().max().item() > 0:
        raise EmberValueError(f"[{op}] input must hold probabilities in [0, 1]")
    lp = _safe_log(input, -100.0).clamp(lo=-100.0)
    lq = _safe_log(1.0 - input, -100.0).clamp(lo=-100.0)
    per = -(target * lp + (1.0 - target) * lq)
    if weight is not None:
        per = per * _float_like(weight, input, op, "weight")
    return _reduce(per, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean", pos_weight=None):
    """``binary_cross_entropy(sigmoid(input), target)`` computed stably from the logits, as
    ``torch.nn.functional.binary_cross_entropy_with_logits``; ``pos_weight`` scales the positive term.

    Args:
        input: logits, a float tensor.
        target: targets of the same shape (usually 0 / 1).
        weight: optional weights broadcast against the per-element losses.
        reduction: "mean", "sum" or "none".
        pos_weight: optional weights of the positive examples, broadcast against the last dim (classes).

    Returns:
        Tensor: a scalar, or per-element losses for "none"; differentiable in input and target.

    Raises:
        ShapeError: the shapes differ.
        EmberValueError: an unknown reduction.
    """
    op = "binary_cross_entropy_with_logits"
    _check_reduction(reduction, op)
    target = _pair(input, target, op)
    nls = softplus_stable(input.neg())  # -log(sigmoid(x)), with no exp overflow for either sign
    if pos_weight is None:
        per = (1.0 - target) * input + nls
    else:
        pw = _float_like(pos_weight, input, op, "pos_weight")
        per = (1.0 - target) * input + (target * (pw - 1.0) + 1.0) * nls
    if weight is not None:
        per = per * _float_like(weight, input, op, "weight")
    return _reduce(per, reduction)


def kl_div(input, target, reduction="mean", log_target=False):
    """The Kullback-Leibler divergence ``t (log t - input)`` of targets ``t`` from log-probabilities
    ``input``, as ``torch.nn.functional.kl_div`` (0 where t == 0).

    Args:
        input: log-probabilities, a float tensor.
        target: probabilities of the same shape, or log-probabilities with ``log_target``.
        reduction: "mean" (over every element, as torch), "batchmean" (the sum / input.shape[0], the
            true KL divergence), "sum" or "none".
        log_target: the target is given as log-probabilities.

    Returns:
        Tensor: a scalar, or per-element terms for "none"; differentiable in input and target.

    Raises:
        ShapeError: the shapes differ.
        EmberValueError: an unknown reduction.
    """
    op = "kl_div"
    _check_reduction(reduction, op, ("mean", "batchmean", "sum", "none"))
    target = _pair(input, target, op)
    if log_target:
        per = target.exp() * (target - input)
    else:
        per = target * _safe_log(target) - target * input
    if reduction == "batchmean":
        return per.sum().affine(1.0 / max(input.shape[0], 1), 0.0) if input.ndim else per.sum()
    return _reduce(per, reduction)
