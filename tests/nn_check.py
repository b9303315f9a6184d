"""Test helper for the nn-breadth tests: runs an ember function and its torch counterpart on the same
strided inputs (each a view of a larger leaf) and compares the values and every leaf's gradient."""
import numpy as np
import torch

import ember as em

from conftest import TOL, npdt

KINDS = ["contiguous", "transposed", "offset", "stepped"]


def _leaf_shape(shape, kind):
    shape = tuple(shape)
    if kind == "transposed" and len(shape) >= 2:
        return shape[:-2] + (shape[-1], shape[-2])
    if kind == "offset":
        return (3,) + shape
    if kind == "stepped":
        return shape[:-1] + (shape[-1] * 2,)
    return shape


def _view(leaf, kind, ndim):
    """The same strided view of an ember or a torch leaf."""
    if kind == "transposed" and ndim >= 2:
        return leaf.transpose(-1, -2)
    if kind == "offset":
        return leaf[1]
    if kind == "stepped":
        return leaf[..., 1::2]
    return leaf


def compare(em_fn, torch_fn, shapes, dt, kind, rng, device=None, lo=-3.0, hi=3.0, grads=True, scale=(20, 50),
            extra=()):
    """Values of ``em_fn(*views, *extra)`` against ``torch_fn`` in float64, and, with ``grads``, the
    gradients of a random weighting of the output for every leaf. ``extra``: non-differentiable
    arguments, as (ember value, torch value) pairs. On a device without float64 (Metal) a float64
    case runs in float32, with float32's tolerances."""
    device = em.get_default_device() if device is None else em.Device(device)
    if dt is em.float64 and not em._C.device_supports(device.kind, device.index, dt.code):
        dt = em.float32
    leaves_np = [rng.uniform(lo, hi, size=_leaf_shape(s, kind)).astype(npdt(dt)) for s in shapes]
    em_leaves = [em.Var(em.tensor(a, device=device)) if grads else em.tensor(a, device=device) for a in leaves_np]
    t_leaves = [torch.tensor(a.astype(np.float64), requires_grad=grads) for a in leaves_np]
    em_views = [_view(v, kind, len(s)) for v, s in zip(em_leaves, shapes)]
    t_views = [_view(v, kind, len(s)) for v, s in zip(t_leaves, shapes)]
    out = em_fn(*em_views, *[e for e, _ in extra])
    ref = torch_fn(*t_views, *[t for _, t in extra])
    assert out.dtype is dt, (out.dtype, dt)
    assert out.shape == tuple(ref.shape), (out.shape, tuple(ref.shape))
    rtol, atol = TOL[dt.name]
    close = dict(rtol=rtol * scale[0], atol=atol * scale[1])
    np.testing.assert_allclose(out.numpy().astype(np.float64), ref.detach().numpy(), **close)
    if not grads:
        return out
    w = rng.uniform(0.5, 1.5, size=ref.shape)
    g = (out * em.tensor(w.astype(npdt(dt)), device=device)).sum().backward()
    (ref * torch.tensor(w)).sum().backward()
    for i, (el, tl) in enumerate(zip(em_leaves, t_leaves)):
        want = tl.grad.numpy() if tl.grad is not None else np.zeros(tl.shape)
        got = g.get(el)
        got = np.zeros(want.shape) if got is None else got.numpy().astype(np.float64)
        np.testing.assert_allclose(got, want, err_msg=f"gradient of input {i}", **close)
    return out


def on(device, a):
    """A numpy array as an ember tensor on ``device``; float64 becomes float32 where the device lacks it."""
    a = np.asarray(a)
    d = em.get_default_device() if device is None else em.Device(device)
    if a.dtype == np.float64 and not em._C.device_supports(d.kind, d.index, em.float64.code):
        a = a.astype(np.float32)
    return em.tensor(a, device=device)
