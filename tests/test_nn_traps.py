"""Traps a torch user fell into: cumprod's gradient at zeros, std/any/all error names, maximum of two scalars."""
import numpy as np
import pytest
import torch

import ember as em

from conftest import WIDE


def _torch_cumprod(t, dim, exclusive, reverse):
    """torch's cumprod with MLX's exclusive / reverse forms built from flips and a shift."""
    if reverse:
        t = t.flip(dim)
    if exclusive:
        ones = torch.ones_like(t.narrow(dim, 0, 1))
        t = torch.cat([ones, t.narrow(dim, 0, t.shape[dim] - 1)], dim)
    y = torch.cumprod(t, dim)
    return y.flip(dim) if reverse else y


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dim", [0, 1])
def test_cumprod_grad_with_zeros_like_torch(device, exclusive, reverse, dim):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 7))
    x[0, 2] = x[1, 1] = x[1, 4] = x[2, 6] = x[3, 0] = x[4, 3] = 0.0
    x[2, 2] = x[2, 3] = 0.0  # two zeros in a row
    g = rng.standard_normal((5, 7))
    v = em.Var(em.tensor(x, dtype=WIDE, device=device))
    out = em.cumprod(v, dim, exclusive=exclusive, reverse=reverse)
    got = (out * em.tensor(g, dtype=WIDE, device=device)).sum().backward()[v]
    t = torch.tensor(x, requires_grad=True)
    (_torch_cumprod(t, dim, exclusive, reverse) * torch.tensor(g)).sum().backward()
    got = got.to_device("cpu").to_dtype(em.float64).numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_cumprod_grad_at_zero_is_exact_product():
    v = em.Var(em.tensor([2.0, 0.0, 3.0, 4.0], dtype=em.float64, device="cpu"))
    g = em.cumprod(v, 0).sum().backward()[v].numpy()
    # d/dx1 of x0 + x0 x1 + x0 x1 x2 + x0 x1 x2 x3 at x1 = 0: x0 + x0 x2 + x0 x2 x3
    np.testing.assert_array_equal(g, [1.0, 2 + 6 + 24, 0.0, 0.0])


@pytest.mark.parametrize("exclusive", [False, True])
def test_cumprod_gradcheck_through_zeros(exclusive):
    x = em.tensor([[1.5, 0.0, -2.0, 0.5], [0.0, 0.0, 1.0, 3.0]], dtype=em.float64, device="cpu")
    assert em.testing.gradcheck(lambda t: em.cumprod(t, 1, exclusive=exclusive), [x])


@pytest.mark.parametrize("call,op", [
    (lambda: em.ones(2, 3).std(dim=5), "std"), (lambda: em.std(em.ones(2, 3), dim=(0, 0)), "std"),
    (lambda: em.ones(2, 3, dtype=em.int64).std(), "std"), (lambda: em.ones(3).std(correction="x"), "std"),
    (lambda: em.ones(3).std(keepdim=2), "std"), (lambda: em.ones(2, 3).any(dim=5), "any"),
    (lambda: em.any(em.ones(3), dim="a"), "any"), (lambda: em.ones(3).any(keepdim=3), "any"),
    (lambda: em.ones(3).all(dim=4), "all"), (lambda: em.ones(3).var(dim=4), "var"),
])
def test_error_names_the_public_op(call, op):
    with pytest.raises(em.EmberError, match=rf"^\[{op}\]"):
        call()


def test_any_all_std_values_unchanged():
    x = np.array([[0.0, 1.0, 3.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    t = em.tensor(x)
    np.testing.assert_array_equal(t.any(1).numpy(), x.any(1))
    np.testing.assert_array_equal(t.all(0, keepdim=True).numpy(), x.all(0, keepdims=True))
    np.testing.assert_allclose(t.std(1).numpy(), torch.tensor(x).std(1).numpy(), rtol=1e-6)


@pytest.mark.parametrize("a,b", [(1, -1.0), (1, 2), (2.5, 1), (True, 0), (-3.0, -3.0), (np.float32(1.5), 2)])
def test_maximum_minimum_of_two_scalars_like_add(a, b):
    for name in ("maximum", "minimum"):
        got = getattr(em, name)(a, b)
        want = getattr(torch, name)(torch.tensor(a), torch.tensor(b))
        assert got.shape == () and got.item() == want.item()
        assert got.dtype == em.add(a, b).dtype  # the same promotion as the rest of the namespace
    with pytest.raises(em.EmberTypeError, match=r"\[maximum\] expected a tensor, array or Python scalar"):
        em.maximum("a", 1)
