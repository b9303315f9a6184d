"""t[idx] = v under autograd against torch on the session's device: the written result replaces t in the
graph (gradients to the old t, zero where written, and to v, gathered and summed over broadcast) for
basic slices, masks and index arrays; earlier consumers keep the old t; the version-counter refusals."""
import numpy as np
import pytest
import torch
from devcheck import gradcheck

import ember as em

from conftest import WIDE, WIDE_NP, expect_error

W = np.arange(1.0, 25.0).reshape(4, 6)  # weights of the loss, so that each element's gradient differs

INDICES = [
    (1,), (slice(1, 3),), (slice(None), 2), (Ellipsis, slice(0, 6, 2)), (None, 0), (-1, slice(None, None, 3)),
    ([0, 2, 2],), ([[1], [3]], [0, 5]), (slice(None), [4, 1, 4]), ([True, False, True, False],),
    (np.array([[True, False] * 3] * 4),), ((np.array([0, 3]), slice(1, 4))),
]


def values_for(shape, rng, broadcast):
    if broadcast and len(shape) >= 1:  # one row broadcast over the leading dims
        shape = (1,) * (len(shape) - 1) + shape[-1:]
    return rng.standard_normal(shape)


@pytest.mark.parametrize("idx", INDICES, ids=[str(i)[:40] for i in range(len(INDICES))])
@pytest.mark.parametrize("broadcast", [False, True])
def test_setitem_gradients_match_torch(device, rng, idx, broadcast):
    x = rng.standard_normal((4, 6)).astype(WIDE_NP)
    shape = np.zeros((4, 6))[idx].shape
    v = values_for(shape, rng, broadcast).astype(WIDE_NP)
    ex, ev = em.Var(em.tensor(x)), em.Var(em.tensor(v))
    h = ex * 2.0
    h[idx] = ev
    g = (h * em.tensor(W, dtype=WIDE)).sum().backward()
    tx, tv = torch.tensor(x, requires_grad=True), torch.tensor(v, requires_grad=True)
    th = tx * 2.0
    th[idx] = tv
    (th * torch.tensor(W, dtype=tx.dtype)).sum().backward()
    np.testing.assert_allclose(h.numpy(), th.detach().numpy())
    np.testing.assert_allclose(g[ex].numpy(), tx.grad.numpy())
    np.testing.assert_allclose(g[ev].numpy(), tv.grad.numpy())


def test_setitem_with_ember_masks_index_tensors_and_scalars(device, rng):
    x = rng.standard_normal((4, 6)).astype(WIDE_NP)
    ex, tx = em.Var(em.tensor(x, device=device)), torch.tensor(x, requires_grad=True)
    h, th = ex.exp(), tx.exp()
    h = h * 1.0  # exp reads its result in backward: the writes go into a copy
    th = th * 1.0
    m = h.gt(1.0)
    h[m] = 0.5  # a scalar into a mask: x's gradient is zero there
    th[th > 1.0] = 0.5
    w = em.Var(em.tensor(rng.standard_normal(3).astype(WIDE_NP), device=device))
    tw = torch.tensor(w.numpy(), requires_grad=True)
    h[em.tensor([0, 3, 0], device=device), em.tensor([1, 2, 1], device=device)] = w  # repeated positions: the last write wins
    th[torch.tensor([0, 3, 0]), torch.tensor([1, 2, 1])] = tw
    g = (h * h).sum().backward()
    (th * th).sum().backward()
    np.testing.assert_allclose(h.numpy(), th.detach().numpy())
    # g * h + g * h may contract to one fused multiply-add on a GPU: a rounding apart from torch's
    np.testing.assert_allclose(g[ex].numpy(), tx.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(g[w].numpy(), tw.grad.numpy(), rtol=1e-6)


def test_consumers_before_the_write_keep_the_old_values(device, rng):
    x = rng.standard_normal((3, 4)).astype(WIDE_NP)
    ex, tx = em.Var(em.tensor(x)), torch.tensor(x, requires_grad=True)
    w = em.Var(em.tensor(np.ones(4, WIDE_NP)))
    tw = torch.ones(4, dtype=tx.dtype, requires_grad=True)
    h, th = ex + 1.0, tx + 1.0
    before, tbefore = h + h, th + th  # add reads nothing in backward: unaffected by the write
    h[1] = w * 5.0
    th[1] = tw * 5.0
    h[2, 1:] = h[0, :3]  # a value read from the tensor being written (the old row)
    th[2, 1:] = th[0, :3].clone()
    h[0] = 0.0  # a second write: the chain of old values
    th[0] = 0.0
    g = (before.sum() + (h * h).sum()).backward()
    (tbefore.sum() + (th * th).sum()).backward()
    # g * h + g * h may contract to one fused multiply-add on a GPU: a rounding apart from torch's
    np.testing.assert_allclose(g[ex].numpy(), tx.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(g[w].numpy(), tw.grad.numpy(), rtol=1e-6)


def test_untracked_target_takes_a_tracked_value(device, rng):
    w = em.Var(em.tensor(rng.standard_normal((2, 3)).astype(WIDE_NP)))
    buf = em.zeros((4, 3), dtype=WIDE)
    buf[1:3] = w * 2.0
    buf[0, 0] = w[1, 1]
    g = (buf * buf).sum().backward()
    tw = torch.tensor(w.numpy(), requires_grad=True)
    tb = torch.zeros((4, 3), dtype=tw.dtype)
    tb[1:3] = tw * 2.0
    tb[0, 0] = tw[1, 1]
    (tb * tb).sum().backward()
    np.testing.assert_allclose(g[w].numpy(), tw.grad.numpy())


def test_setitem_gradcheck_and_second_order(device, rng):
    x = em.tensor(rng.standard_normal((3, 5)), dtype=WIDE)
    v = em.tensor(rng.standard_normal((2, 5)), dtype=WIDE)

    def f(a, b):
        h = a.sqr()
        h[[2, 0]] = b.exp()
        return h * a

    assert gradcheck(f, [x, v])
    a, b = em.Var(x), em.Var(v)
    g = f(a, b).sum().backward(create_graph=True)
    gg = (g[a].sqr().sum() + g[b].sqr().sum()).backward()
    ta = torch.tensor(x.numpy(), requires_grad=True)
    tb = torch.tensor(v.numpy(), requires_grad=True)
    th = ta ** 2
    th[[2, 0]] = tb.exp()
    ga, gb = torch.autograd.grad((th * ta).sum(), [ta, tb], create_graph=True)
    ta2, tb2 = torch.autograd.grad((ga ** 2).sum() + (gb ** 2).sum(), [ta, tb])
    np.testing.assert_allclose(gg[a].numpy(), ta2.numpy(), rtol=1e-5)
    np.testing.assert_allclose(gg[b].numpy(), tb2.numpy(), rtol=1e-5)


def test_version_counter_still_raises(device):
    x = em.Var([[1.0, 2.0], [3.0, 4.0]])
    h = x.exp()
    h[0] = 0.0  # exp's rule reads its result, which the write changed
    e = expect_error(lambda: h.sum().backward(), "backward", em.InplaceModifiedError)
    assert "exp" in str(e)
    h = x * 1.0
    y = h * h  # saves h
    h[1, 1] = 5.0
    expect_error(lambda: y.sum().backward(), "backward", em.InplaceModifiedError)
    # a view made before the write and used after it sees the written values: refused in backward
    h = x * 1.0
    row = h[0]
    h[0] = em.Var([7.0, 8.0])
    e = expect_error(lambda: (row + row).sum().backward(), "backward", em.InplaceModifiedError)
    assert "view" in str(e)  # (add reads no values: only the view's own check can catch this)
    # a view used before the write is fine
    h = x * 1.0
    early = (h[0] + h[0]).sum()
    h[0] = 0.0
    np.testing.assert_allclose((early + h.sum()).backward()[x].numpy(), [[2.0, 2.0], [1.0, 1.0]])


def test_setitem_refusals_under_autograd(device):
    v = em.Var([[1.0, 2.0], [3.0, 4.0]])
    expect_error(lambda: v.__setitem__(0, 0.0), "setitem", em.UnsupportedOp)  # a leaf, as torch refuses
    expect_error(lambda: v.__setitem__(v > 2, 0.0), "setitem", em.UnsupportedOp)
    h = v * 2.0
    view = h[0]
    expect_error(lambda: view.__setitem__(0, 1.0), "setitem", em.UnsupportedOp)  # its base would change unseen
    buf = em.zeros((2, 2))
    expect_error(lambda: buf[0].__setitem__(1, v[0, 0]), "setitem", em.UnsupportedOp)
    expect_error(lambda: h.__setitem__(5, 1.0), "index", em.IndexOutOfRange)
    expect_error(lambda: h.__setitem__(0, em.Var([1.0, 2.0, 3.0])), "setitem", em.ShapeError)
    np.testing.assert_array_equal(v.numpy(), [[1.0, 2.0], [3.0, 4.0]])  # nothing was written
    np.testing.assert_array_equal(h.numpy(), [[2.0, 4.0], [6.0, 8.0]])
    np.testing.assert_array_equal(buf.numpy(), np.zeros((2, 2)))
    assert h.op is not None and h.op.name == "mul"  # a refused write leaves the graph as it was
    with em.no_grad():
        v[v > 2] = 0.0
    np.testing.assert_array_equal(v.numpy(), [[1.0, 2.0], [0.0, 0.0]])
