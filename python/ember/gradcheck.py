"""gradcheck: central finite differences in float64 against backward."""
from __future__ import annotations

import numpy as np

from .backprop import GradStore, no_grad
from .creation import tensor
from .errors import DTypeError, EmberError, EmberTypeError, NoGradientPath
from .tensor_type import Tensor
from .variable import Var


class GradcheckError(EmberError, AssertionError):
    """The analytic gradient (backward) disagrees with finite differences."""


def _outputs(res):
    if isinstance(res, Tensor):
        return [res]
    if isinstance(res, (tuple, list)) and all(isinstance(r, Tensor) or r is None for r in res):
        return [r for r in res if r is not None]
    raise EmberTypeError(f"[gradcheck] fn must return a Tensor or a tuple of Tensors, got {type(res).__name__}")


def _loss(outs, weights):
    """A fixed random projection of the outputs to a scalar: checking its gradient checks the
    vector-Jacobian product, which catches any wrong rule with probability one."""
    total = None
    for o, w in zip(outs, weights):
        term = (o.to_dtype("float64") * w).sum()
        total = term if total is None else total + term
    return total


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3):
    """Checks ``backward`` of ``fn(*inputs)`` against central differences in float64.

    Float tensors among ``inputs`` are copied to float64 variables (other inputs are passed as
    they are); each element is perturbed by +-``eps`` and the difference quotient compared with the
    gradient of a random weighting of the outputs.

    Args:
        fn: a function of the inputs returning a Tensor or a tuple of Tensors.
        inputs: a Tensor or a sequence of inputs.
        eps: the finite-difference step.
        atol: the absolute tolerance.
        rtol: the relative tolerance.

    Returns:
        bool: True when every element agrees within ``atol + rtol * |numeric|``.

    Raises:
        GradcheckError: names the worst element and both values.
        DTypeError: no float tensor among the inputs.
    """
    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    inputs = list(inputs)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.dtype.is_float]
    if not diff:
        raise DTypeError("[gradcheck] no float tensor among the inputs")
    # C order: the perturbation loop below writes through reshape(-1), which must be a view
    base = {i: np.array(inputs[i].numpy(), dtype=np.float64, order="C") for i in diff}

    def args_with(values, as_var):
        args = list(inputs)
        for i in diff:  # on the input's device, not the default one
            t = tensor(values[i], device=inputs[i].device)
            args[i] = Var(t) if as_var else t
        return args

    args = args_with(base, True)
    outs = _outputs(fn(*args))
    rng = np.random.default_rng(0)
    weights = [tensor(rng.uniform(0.5, 1.5, o.shape).astype(np.float64), device=o.device) for o in outs]
    try:
        grads = _loss(outs, weights).backward()
    except NoGradientPath:  # fn ignores its inputs: every analytic gradient is zero, checked below
        grads = GradStore()

    worst = None  # (excess over tolerance, message)
    for i in diff:
        g = grads.get(args[i])
        analytic = np.zeros_like(base[i]) if g is None else np.asarray(g.numpy(), dtype=np.float64)
        if analytic.shape != base[i].shape:
            raise GradcheckError(f"[gradcheck] gradient of input {i} has shape {analytic.shape}, "
                                 f"expected {base[i].shape}")
        flat = base[i].reshape(-1)
        numeric = np.empty(flat.size)
        with no_grad():
            for j in range(flat.size):
                orig = flat[j]
                flat[j] = orig + eps
                plus = _loss(_outputs(fn(*args_with(base, False))), weights).item()
                flat[j] = orig - eps
                minus = _loss(_outputs(fn(*args_with(base, False))), weights).item()
                flat[j] = orig
                numeric[j] = (plus - minus) / (2 * eps)
        numeric = numeric.reshape(base[i].shape)
        err = np.abs(analytic - numeric)
        excess = err - (atol + rtol * np.abs(numeric))
        excess = np.where(np.isnan(excess), np.inf, excess)  # a nan on one side only is a failure
        excess = np.where(np.isnan(analytic) & np.isnan(numeric), -np.inf, excess)
        if excess.size:
            k = int(np.argmax(excess))
            if excess.flat[k] > 0 and (worst is None or excess.flat[k] > worst[0]):
                idx = np.unravel_index(k, base[i].shape)
                msg = (f"[gradcheck] input {i} element {tuple(int(v) for v in idx)}: backward gives "
                       f"{analytic[idx]:.8g}, finite differences give {numeric[idx]:.8g} "
                       f"(|diff| {err[idx]:.3g} > atol {atol:g} + rtol {rtol:g} * |numeric|)")
                worst = (excess.flat[k], msg)
    if worst is not None:
        raise GradcheckError(worst[1])
    return True
