"""em.multinomial: draws category indices from rows of non-negative weights, on every device, through one
kernel per device (exponential keys + topk selection without replacement, inverse-CDF search with it),
which also checks the weights' values as it reads them."""
from __future__ import annotations

from . import _C
from . import dtypes as _dt
from .args import bool_arg, int_arg
from .errors import DTypeError, EmberTypeError, EmberValueError, ShapeError
from .generator import Generator, drawing
from .tensor_type import Tensor, _wrap


def multinomial(probs, num_samples, replacement=False, *, generator=None):
    """Draws ``num_samples`` category indices per row of ``probs``, as ``torch.multinomial``.

    Each row holds non-negative weights (not necessarily normalised); category ``i`` is drawn with
    probability ``w_i / sum(w)``. Without replacement the draws of a row are distinct: they are the
    ``num_samples`` largest keys ``w_i / E_i`` (``E_i`` exponential, one uniform draw per weight), in key
    order, so categories of weight 0 come only after every positive one. With replacement each draw is an
    inverse-CDF search of a uniform in the row's running sum (weight-0 categories are never drawn).
    Draws come from ember's global generator (``em.manual_seed(n)`` makes them reproducible) or ``generator``.

    Args:
        probs: a 1-D or 2-D float tensor of weights (rows of categories), on any device.
        num_samples: how many draws per row, ``>= 1`` (and ``<= probs.shape[-1]`` without replacement).
        replacement: whether a category may be drawn more than once in a row.
        generator: an ``em.Generator`` to draw from instead of the global stream (seeded by
            ``em.manual_seed``).

    Returns:
        An int64 tensor on probs' device: ``(num_samples,)`` for 1-D weights, ``(rows, num_samples)`` for 2-D.

    Raises:
        EmberTypeError: ``probs`` is not a tensor, ``num_samples`` is not an int, ``replacement`` is not a
            bool, or ``generator`` is not an ``em.Generator``.
        DTypeError: ``probs`` is not a float tensor.
        ShapeError: ``probs`` is not 1-D or 2-D.
        EmberValueError: ``num_samples <= 0``, ``num_samples`` exceeds the categories without replacement,
            a weight is negative, inf or NaN, or a row's weights sum to 0.
    """
    op = "multinomial"
    if not isinstance(probs, Tensor):
        raise EmberTypeError(f"[{op}] expected a Tensor, got {type(probs).__name__}")
    num_samples = int_arg(num_samples, op, "num_samples")
    replacement = bool_arg(replacement, op, "replacement")
    if generator is not None and not isinstance(generator, Generator):
        raise EmberTypeError(f"[{op}] generator must be an em.Generator or None, got {type(generator).__name__}")
    if not probs.dtype.is_float:
        raise DTypeError(f"[{op}] only supports floating-point weights, got {probs.dtype.name}")
    if probs.ndim not in (1, 2):
        raise ShapeError(f"[{op}] weights must be 1-D or 2-D, got shape {probs.shape}")
    n = probs.shape[-1]
    if num_samples <= 0:
        raise EmberValueError(f"[{op}] cannot sample num_samples <= 0 (got {num_samples})")
    if not replacement and num_samples > n:
        raise EmberValueError(f"[{op}] cannot sample num_samples = {num_samples} > {n} categories without "
                              "replacement")
    # the weights' values (finite, >= 0, a positive one per row) are checked by the kernel as it reads them
    with drawing(generator, op):
        s, layout = _C.multinomial(probs._storage, probs._layout, num_samples, replacement)
    return _wrap(s, layout, _dt.int64, probs._device)

