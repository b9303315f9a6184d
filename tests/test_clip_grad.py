"""em.nn.utils.clip_grad_norm_ / clip_grad_value_ / get_total_norm against torch.nn.utils on a GradStore."""
import math

import numpy as np
import pytest
import torch

import ember as em
from ember.nn.utils import clip_grad_norm_, clip_grad_value_, get_total_norm

from conftest import TOL, WIDE, WIDE_NP

RTOL, ATOL = TOL[WIDE.name]


def _setup(scale, shapes=((4, 3), (7,), (2, 2, 2))):
    rng = np.random.default_rng(0)
    grads = [(rng.standard_normal(s) * scale).astype(WIDE_NP) for s in shapes]
    ev = [em.Var(np.zeros(s, WIDE_NP)) for s in shapes]
    store = em.GradStore()
    for v, g in zip(ev, grads):
        store.insert(v, em.tensor(g))
    tv = [torch.zeros(s, dtype=torch.from_numpy(g).dtype, requires_grad=True) for s, g in zip(shapes, grads)]
    for v, g in zip(tv, grads):
        v.grad = torch.from_numpy(g.copy())
    return ev, store, tv


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.5, 0.5, math.inf, 0.0])
@pytest.mark.parametrize("scale,max_norm", [(1.0, 0.5), (0.01, 10.0)], ids=["clips", "below"])
def test_clip_grad_norm_matches_torch(norm_type, scale, max_norm):
    ev, store, tv = _setup(scale)
    total = clip_grad_norm_(store, max_norm, norm_type)
    want = torch.nn.utils.clip_grad_norm_(tv, max_norm, norm_type)
    assert isinstance(total, em.Tensor) and total.shape == ()
    np.testing.assert_allclose(total.item(), want.item(), rtol=RTOL, atol=ATOL)
    for v, t in zip(ev, tv):
        np.testing.assert_allclose(store[v].numpy(), t.grad.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(get_total_norm(store, norm_type).item(),
                               min(want.item(), max_norm) if norm_type else want.item(), rtol=1e-4)


def test_parameters_select_entries_of_the_store():
    ev, store, tv = _setup(1.0)
    before = store[ev[2]]
    named = [("a", ev[0]), ("b", ev[1]), ("unused", em.Var([1.0]))]  # named_parameters() and a gradless one
    total = clip_grad_norm_(store, 0.1, parameters=named)
    want = torch.nn.utils.clip_grad_norm_(tv[:2], 0.1)
    np.testing.assert_allclose(total.item(), want.item(), rtol=RTOL, atol=ATOL)
    for v, t in zip(ev[:2], tv[:2]):
        np.testing.assert_allclose(store[v].numpy(), t.grad.numpy(), rtol=RTOL, atol=ATOL)
    assert store[ev[2]] is before  # not among the parameters: untouched
    assert len(store) == 3
    single = clip_grad_norm_(store, 1e-3, parameters=ev[2])
    np.testing.assert_allclose(single.item(), np.linalg.norm(before.numpy()), rtol=RTOL)


def test_clip_grad_value_matches_torch():
    ev, store, tv = _setup(1.0)
    assert clip_grad_value_(store, 0.4) is None
    torch.nn.utils.clip_grad_value_(tv, 0.4)
    for v, t in zip(ev, tv):
        np.testing.assert_array_equal(store[v].numpy(), t.grad.numpy())
    ev, store, _ = _setup(1.0)
    raw = store[ev[1]].numpy()
    clip_grad_value_(store, 0.1, parameters=[ev[0]])
    np.testing.assert_array_equal(store[ev[1]].numpy(), raw)
    assert np.abs(store[ev[0]].numpy()).max() <= 0.1


def test_clipping_in_a_training_step():
    """backward, clip, step: the result follows torch's same loop."""
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)
    lin = em.nn.Linear(3, 2)
    tl = torch.nn.Linear(3, 2)
    with torch.no_grad():
        tl.weight.copy_(torch.tensor(lin.weight.numpy()))
        tl.bias.copy_(torch.tensor(lin.bias.numpy()))
    opt, topt = em.optim.SGD(lin.parameters(), lr=0.5), torch.optim.SGD(tl.parameters(), lr=0.5)
    ex, ey, tx, ty = em.tensor(x), em.tensor(y), torch.tensor(x), torch.tensor(y)
    for _ in range(3):
        g = em.nn.mse_loss(lin(ex), ey).backward()
        n = clip_grad_norm_(g, 0.05, parameters=lin.parameters())
        opt.step(g)
        topt.zero_grad()
        torch.nn.functional.mse_loss(tl(tx), ty).backward()
        tn = torch.nn.utils.clip_grad_norm_(tl.parameters(), 0.05)
        topt.step()
        np.testing.assert_allclose(n.item(), tn.item(), rtol=1e-5)
    np.testing.assert_allclose(lin.weight.numpy(), tl.weight.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_nonfinite_and_empty():
    v = em.Var([1.0, 2.0])
    store = em.GradStore()
    store.insert(v, em.tensor([float("inf"), 1.0]))
    with pytest.raises(em.EmberValueError, match=r"^\[clip_grad_norm_\] the total norm of order 2.0 .* non-finite"):
        clip_grad_norm_(store, 1.0, error_if_nonfinite=True)
    assert math.isinf(clip_grad_norm_(store, 1.0).item())
    assert clip_grad_norm_(em.GradStore(), 1.0).item() == 0.0


@pytest.mark.parametrize("call,match", [
    (lambda v, s: clip_grad_norm_([v], 1.0), r"^\[clip_grad_norm_\] expects the GradStore .*torch's first argument"),
    (lambda v, s: clip_grad_norm_(iter([v]), 1.0), r"^\[clip_grad_norm_\] expects the GradStore .* parameters="),
    (lambda v, s: clip_grad_value_(v, 1.0), r"^\[clip_grad_value_\] expects the GradStore"),
    (lambda v, s: clip_grad_norm_(s, 1.0, norm_type=-1.0), r"^\[clip_grad_norm_\] norm_type must be"),
    (lambda v, s: clip_grad_norm_(s, 1.0, norm_type=float("nan")), r"^\[clip_grad_norm_\] norm_type must be"),
    (lambda v, s: clip_grad_norm_(s, "big"), r"^\[clip_grad_norm_\] max_norm"),
    (lambda v, s: clip_grad_norm_(s, 1.0, parameters=5), r"^\[clip_grad_norm_\] parameters must be a tensor"),
    (lambda v, s: clip_grad_norm_(s, 1.0, parameters=[5]), r"^\[clip_grad_norm_\] parameters must be tensors"),
    (lambda v, s: get_total_norm({}, 2.0), r"^\[get_total_norm\] expects the GradStore"),
])
def test_errors(call, match):
    v = em.Var([1.0])
    s = em.GradStore()
    s.insert(v, em.tensor([2.0]))
    with pytest.raises(em.EmberError, match=match):
        call(v, s)
