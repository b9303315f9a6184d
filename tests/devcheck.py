"""Device-neutral gradient check: finite differences in float64 where the device has float64, else
the device's float32 gradients against the CPU's float64 gradients of the same function and inputs.

On the CPU session ``gradcheck`` is ``em.testing.gradcheck`` unchanged, which proves the rules against
finite differences; on a device without float64 (Metal) it proves the device's forward and backward
kernels agree with those proven CPU rules on the same inputs, within float32 tolerances.
"""
import numpy as np

import ember as em


def has_f64(device=None):
    """Whether ``device`` (default: the default device) holds float64."""
    device = em.get_default_device() if device is None else em.Device(device)
    return bool(em._C.device_supports(device.kind, device.index, em.float64.code))


def wide(device=None):
    """The widest float dtype ``device`` (default: the default device) holds: float64, else float32."""
    return em.float64 if has_f64(device) else em.float32


def _outs(res):
    if isinstance(res, em.Tensor):
        return [res]
    return [r for r in res if r is not None]


def _on(a, device, dt):
    """Tensor ``a`` on ``device``, a float one in ``dt`` (built from its values as float64)."""
    if not a.dtype.is_float:
        return a.to_device(device)
    return em.tensor(np.asarray(a.numpy(), dtype=np.float64).astype(
        np.float32 if dt is em.float32 else np.float64), device=device)


def _run(fn, inputs, consts, device, dt, weights_np):
    """Forward + backward of the weighted sum of ``fn``'s outputs with every float input a ``dt``
    variable on ``device`` (the default device while fn runs); returns (outputs, gradients) as float64."""
    prev = em.get_default_device()
    em.set_default_device(device)
    try:
        args, leaves = [], []
        for a in inputs:
            if isinstance(a, em.Tensor) and a.dtype.is_float:
                v = em.Var(_on(a, device, dt))
                args.append(v)
                leaves.append(v)
            elif isinstance(a, em.Tensor):
                args.append(a.to_device(device))
            else:
                args.append(a)
        outs = _outs(fn(*args, *[_on(c, device, dt) for c in consts]))
        if weights_np is None:
            rng = np.random.default_rng(0)
            weights_np = [rng.uniform(0.5, 1.5, o.shape) for o in outs]
        loss = None
        for o, w in zip(outs, weights_np):
            term = (o * em.tensor(w.astype(np.float32 if o.dtype is em.float32 else np.float64),
                                  dtype=o.dtype, device=device)).sum()
            loss = term if loss is None else loss + term
        try:
            grads = loss.backward()
            gs = [grads.get(v) for v in leaves]
        except em.NoGradientPath:
            gs = [None] * len(leaves)
        gs = [np.zeros(v.shape) if g is None else np.asarray(g.numpy(), dtype=np.float64) for g, v in zip(gs, leaves)]
        return [np.asarray(o.numpy(), dtype=np.float64) for o in outs], gs, weights_np
    finally:
        em.set_default_device(prev)


def gradcheck(fn, inputs, consts=(), eps=1e-6, atol=1e-5, rtol=1e-3, f32_tol=(2e-4, 2e-5)):
    """Checks the gradients of ``fn(*inputs)`` on the inputs' device (the default device for none).

    Args:
        fn: a function of the inputs returning a Tensor or a tuple of Tensors; on a device without
            float64 it must build any tensor it makes on the default device.
        inputs: a Tensor or a sequence of inputs (float tensors become variables).
        consts: tensors passed to ``fn`` after the inputs and held constant (not differentiated).
        eps: finite-difference step (``em.testing.gradcheck``, device with float64).
        atol: absolute tolerance of the finite differences (device with float64).
        rtol: relative tolerance of the finite differences (device with float64).
        f32_tol: (rtol, atol) of the float32 comparison on a device without float64; atol is scaled
            by 1 + the largest reference magnitude.

    Returns:
        bool: True when the check passes.

    Raises:
        GradcheckError: from ``em.testing.gradcheck`` (float64 device).
        AssertionError: the device's values or gradients differ from the CPU's float64 ones.
    """
    if isinstance(inputs, em.Tensor):
        inputs = (inputs,)
    inputs = list(inputs)
    # the inputs' device (the device under test, also where the mixed mode leaves the CPU as the default)
    device = next((t.device for t in inputs if isinstance(t, em.Tensor)), em.get_default_device())
    if has_f64(device):
        consts = [c.to_device(device) for c in consts]
        return em.testing.gradcheck(lambda *a: fn(*a, *consts), inputs, eps=eps, atol=atol, rtol=rtol)
    ref_outs, ref_grads, w = _run(fn, inputs, consts, em.cpu, em.float64, None)
    outs, grads, _ = _run(fn, inputs, consts, device, em.float32, w)
    rtol, atol = f32_tol
    for i, (got, want) in enumerate(zip(outs, ref_outs)):
        scale = 1.0 + (float(np.max(np.abs(want))) if want.size else 0.0)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale, err_msg=f"output {i} on {device}")
    for i, (got, want) in enumerate(zip(grads, ref_grads)):
        scale = 1.0 + (float(np.max(np.abs(want))) if want.size else 0.0)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale,
                                   err_msg=f"gradient of float input {i} on {device} vs cpu float64")
    return True
