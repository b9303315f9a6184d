"""The backward walk's buffer reuse: index gradients written in place into one owned buffer (q, k, v =
qkv[0], qkv[1], qkv[2]), overlapping and repeated indices, pass-through gradients never written over,
matmul's gradient of a transposed weight, and the walk's seed; each against torch and finite differences."""
import numpy as np
import pytest
import torch
from devcheck import gradcheck, wide

import ember as em

from conftest import TEST_DEVICE

WIDE = wide(TEST_DEVICE)
TOL = dict(rtol=1e-12, atol=1e-12) if WIDE is em.float64 else dict(rtol=1e-5, atol=1e-5)


def both(a):
    """The same values as an ember variable and a torch leaf, both in the widest dtype."""
    e = em.Var(em.tensor(np.asarray(a, np.float64), dtype=WIDE))
    t = torch.tensor(np.asarray(a, np.float64), dtype=torch.float64, requires_grad=True)
    return e, t


def check(fn, arrays):
    """fn's gradients (ember and torch, same weights on the output) agree for every input."""
    es, ts = zip(*(both(a) for a in arrays))
    w = np.random.default_rng(7).standard_normal(tuple(fn(*ts).shape))
    gs = (fn(*es) * em.tensor(w, dtype=WIDE)).sum().backward()
    (fn(*ts) * torch.tensor(w)).sum().backward()
    for e, t in zip(es, ts):
        np.testing.assert_allclose(gs[e].numpy(), t.grad.numpy(), **TOL)
        assert gs[e].is_contiguous()


def qkv_split(x, w):
    """The attention pattern: one projection, split by int indices of a permuted view."""
    b, t, d = x.shape
    qkv = (x.reshape(b * t, d) @ w.t()).reshape(b, t, 3, 2, d // 2).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    return (q * k).sum(-1, keepdim=True) * v + q.exp()


@pytest.mark.parametrize("shape", [(2, 5, 4), (1, 3, 6), (3, 1, 2)])
def test_qkv_split_matches_torch(rng, shape):
    b, t, d = shape
    check(qkv_split, [rng.standard_normal(shape), rng.standard_normal((3 * d, d))])


def test_qkv_split_gradcheck(rng):
    x, w = rng.standard_normal((2, 3, 4)), rng.standard_normal((12, 4))
    gradcheck(qkv_split, [em.tensor(x, dtype=WIDE), em.tensor(w, dtype=WIDE)])


@pytest.mark.parametrize("case", ["repeat", "negative", "overlap", "passthrough_first", "passthrough_after",
                                  "unused_part", "mixed_slices", "second_pass"])
def test_index_accumulation_cases(rng, case):
    fns = {
        # the same region twice, and a region named by a negative and a positive int
        "repeat": lambda x: x[1] * 2.0 + x[1].exp() + x[0],
        "negative": lambda x: x[-1] * x[2] + x[0].sin(),
        # slices that overlap: the second write must add, not overwrite
        "overlap": lambda x: x[0:2].sum(0) * x[1:3].sum(0) + x[(1, slice(None))],
        # the first gradient of x is a pass-through (shared with y's), then indices add to it
        "passthrough_first": lambda x: (x + x.permute(0, 2, 1).permute(0, 2, 1)).sum(0) + x[0] * x[2],
        # indices first, then a pass-through gradient arrives
        "passthrough_after": lambda x: x[0] * x[1] + x.sum(0),
        # a region no index reads keeps a zero gradient
        "unused_part": lambda x: x[0].cos() + x[2],
        "mixed_slices": lambda x: x[1, :, 1:].sum(-1, keepdim=True) * x[1] + x[:, 0].sum(0, keepdim=True).t(),
        # the indexed tensor is itself a view whose gradient is indexed again
        "second_pass": lambda x: x.permute(1, 0, 2)[0] * x.permute(1, 0, 2)[2] + x[1].t()[0],
    }
    fn = fns[case]
    check(fn, [rng.standard_normal((3, 3, 3))])
    gradcheck(fn, [em.tensor(rng.standard_normal((3, 3, 3)), dtype=WIDE)])


def test_shared_gradient_never_written_over(rng):
    """add hands one gradient to both inputs: indexing one of them afterwards must not change the other's."""
    def fn(a, b):
        s = a + b  # a and b get the same gradient tensor
        return s[0] * 3.0 + a[1] + b[0] * a[2]
    check(fn, [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))])


def test_second_order_through_indices(rng):
    """create_graph keeps the recorded rule (no in-place writes), and second order is right."""
    x = em.Var(em.tensor(rng.standard_normal((3, 4)), dtype=WIDE))
    xt = torch.tensor(x.numpy(), requires_grad=True)
    gs = (x[0] * x[1] * x[2]).sum().backward(create_graph=True)
    gs[x].sqr().sum().backward()
    (gt,) = torch.autograd.grad((xt[0] * xt[1] * xt[2]).sum(), xt, create_graph=True)
    gt.square().sum().backward()
    np.testing.assert_allclose(gs[x].numpy(), gt.detach().numpy(), **TOL)
    g2 = (gs[x].sqr().sum()).backward()
    np.testing.assert_allclose(g2[x].numpy(), xt.grad.numpy(), **TOL)


@pytest.mark.parametrize("where", ["b", "a", "both", "batched"])
def test_matmul_transposed_operand_grads(rng, where):
    """The gradient of a transposed view (W.t()) comes back contiguous and right."""
    if where == "b":
        check(lambda x, w: x @ w.t(), [rng.standard_normal((5, 3)), rng.standard_normal((4, 3))])
    elif where == "a":
        check(lambda w, x: w.t() @ x, [rng.standard_normal((3, 5)), rng.standard_normal((3, 4))])
    elif where == "both":
        check(lambda w, v: w.t() @ v.t(), [rng.standard_normal((3, 5)), rng.standard_normal((4, 3))])
    else:  # batched operands keep the general rule
        check(lambda x, w: x @ w.transpose(-1, -2), [rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 4, 3))])
    gradcheck(lambda x, w: x @ w.t(), [em.tensor(rng.standard_normal((5, 3)), dtype=WIDE),
                                       em.tensor(rng.standard_normal((4, 3)), dtype=WIDE)])


def test_linear_weight_gradient_is_its_own_buffer(rng):
    """Two Linear layers' weight gradients are separate contiguous tensors (optimizers update in place)."""
    lin = em.nn.Linear(3, 4, device=TEST_DEVICE)
    x = em.tensor(rng.standard_normal((5, 3)).astype(np.float32), device=TEST_DEVICE)
    gs = lin(x).sum().backward()
    gw = gs[lin.weight]
    assert gw.is_contiguous() and gw.shape == (4, 3)
    np.testing.assert_allclose(gw.numpy(), np.tile(x.numpy().sum(0), (4, 1)), rtol=1e-5, atol=1e-5)


def test_backward_seed_matches_torch_gradient(rng):
    """backprop.backward(root, seed=g) is torch's root.backward(g); the seed itself is never stored."""
    a = rng.standard_normal((4, 6))
    x, xt = both(a)
    gseed = rng.standard_normal((4, 6))
    y = (x * 2.0).exp() + x  # the add hands the seed straight through to x
    seed = em.tensor(gseed, dtype=WIDE)
    gs = em.backprop.backward(y, seed=seed)
    ((xt * 2.0).exp() + xt).backward(torch.tensor(gseed))
    np.testing.assert_allclose(gs[x].numpy(), xt.grad.numpy(), **TOL)
    assert gs[x].storage is not seed.storage
    # a root that is the variable itself: its gradient is a copy of the seed
    gs2 = em.backprop.backward(x, seed=seed)
    np.testing.assert_array_equal(gs2[x].numpy(), gseed.astype(gs2[x].numpy().dtype))
    assert gs2[x].storage is not seed.storage


@pytest.mark.parametrize("bad", ["shape", "dtype", "type"])
def test_backward_seed_errors(rng, bad):
    x = em.Var(em.tensor(rng.standard_normal((2, 3)), dtype=em.float32))
    y = x * 3.0
    seed = {"shape": em.ones(3, 2), "dtype": em.ones(2, 3, dtype=em.int32), "type": np.ones((2, 3))}[bad]
    with pytest.raises(em.ShapeError, match=r"^\[backward\] seed"):
        em.backprop.backward(y, seed=seed)


@pytest.mark.parametrize("case", ["unused_part", "negative", "passthrough_after", "all_three", "whole_then_part",
                                  "part_then_whole", "scattered"])
def test_index_gradient_unwritten_regions_are_zero(rng, case):
    """A gradient buffer that int indices write is allocated unzeroed; what no index wrote is zeroed
    before it is read, even when the allocator hands back memory full of NaN."""
    fn = {"unused_part": lambda x: x[0].cos() + x[2],
          "negative": lambda x: x[-1] * x[1],
          "passthrough_after": lambda x: x[0] * 2.0 + x.sum(0),
          "all_three": lambda x: x[0] * x[1] + x[2].exp(),
          # a whole slab, then part of another (or the reverse): the partial write zeros first
          "whole_then_part": lambda x: x[0].exp() + x[2, 1:].sum(0, keepdim=True),
          "part_then_whole": lambda x: x[2, 1:].sum(0, keepdim=True) * x[0],
          # unwritten runs before, between and after the written slabs
          "scattered": lambda x: x[2] * x[4] + x[-2].exp()}[case]
    a = rng.standard_normal((7, 4, 5))
    for _ in range(3):
        dirty = [em.full((7, 4, 5), float("nan"), dtype=WIDE, device=TEST_DEVICE) for _ in range(8)]
        del dirty  # the cache now holds NaN-filled blocks of the gradient's size
        check(fn, [a])
