"""nn.ops.bias_residual (residual + (y + b), one pass on the CPU) and nn.TransformerBlock's use of it: values,
gradients, errors, devices."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import ember as em
from ember import nn

from conftest import FLOATS, TOL, VIEWS, WIDE, expect_error, make_view, npdt, rand_np, rand_shape


@pytest.mark.parametrize("kind", [k for k in VIEWS if k != "broadcast"] + ["broadcast"])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_equals_the_two_adds_and_their_gradients(device, rng, kind, dt):
    shape = rand_shape(rng, int(rng.integers(1, 4)), 1, 40)
    y, yn = make_view(rng, shape, dt, kind, device=device)
    # the residual in another layout than y's (contiguous when y is strided, and the other way round)
    r, rn = make_view(rng, shape, dt, "contiguous" if kind != "contiguous" else "transposed", device=device)
    bn = rand_np(rng, shape[-1:], dt)
    b = em.tensor(bn, device=device)
    out = nn.ops.bias_residual(y, b, r)
    assert out.shape == tuple(shape) and out.dtype == dt
    # rounded as the separate adds round it: the same bits
    np.testing.assert_array_equal(out.numpy(), (r + (y + b)).numpy())
    rtol, atol = TOL[dt.name]
    ref = rn.astype(np.float64) + (yn.astype(np.float64) + bn.astype(np.float64))
    np.testing.assert_allclose(out.numpy().astype(np.float64), ref, rtol=rtol, atol=atol * 10)
    up = rng.standard_normal(shape)
    yv, bv, rv = em.Var(y), em.Var(b), em.Var(r)
    upt = em.tensor(up, dtype=dt, device=device)
    g = (nn.ops.bias_residual(yv, bv, rv) * upt).sum().backward()
    gr = ((rv + (yv + bv)) * upt).sum().backward()
    np.testing.assert_array_equal(g[yv].numpy(), gr[yv].numpy())
    np.testing.assert_array_equal(g[rv].numpy(), gr[rv].numpy())
    np.testing.assert_array_equal(g[bv].numpy(), gr[bv].numpy())


def test_gradcheck_float64(device):
    if em.float64 not in FLOATS:  # gradcheck differentiates in float64, which Metal does not hold
        device = em.cpu
    rng = np.random.default_rng(5)
    y = em.tensor(rng.standard_normal((3, 4, 5)), device=device)
    b = em.tensor(rng.standard_normal(5), device=device)
    r = em.tensor(rng.standard_normal((3, 4, 5)), device=device)
    assert em.testing.gradcheck(nn.ops.bias_residual, [y, b, r])
    # through transposed operands as well
    yt = em.tensor(rng.standard_normal((5, 6)), device=device).t()
    rt = em.tensor(rng.standard_normal((5, 6)), device=device).t()
    assert em.testing.gradcheck(nn.ops.bias_residual, [yt, b, rt])


def test_second_order_through_the_composite(device):
    rng = np.random.default_rng(6)
    yn, bn, rn = rng.standard_normal((4, 3)), rng.standard_normal(3), rng.standard_normal((4, 3))
    y, b, r = (em.Var(em.tensor(a, dtype=WIDE, device=device)) for a in (yn, bn, rn))
    out = nn.ops.bias_residual(y, b, r)
    g = (out * out).sum().backward(create_graph=True)
    gg = (g[y] * g[b]).sum().backward()
    ty, tb, tr = (torch.tensor(a, requires_grad=True) for a in (yn, bn, rn))
    to = tr + (ty + tb)
    dy, db = torch.autograd.grad((to * to).sum(), (ty, tb), create_graph=True)
    (dy * db).sum().backward()
    rtol, atol = TOL[WIDE.name]
    for e, t in ((y, ty), (b, tb), (r, tr)):
        np.testing.assert_allclose(gg[e].numpy(), t.grad.numpy(), rtol=rtol * 10, atol=atol * 10)


def test_constant_bias_takes_no_gradient(device):
    y, r = em.Var(em.randn(6, 4, device=device)), em.Var(em.randn(6, 4, device=device))
    b = em.randn(4, device=device)
    g = nn.ops.bias_residual(y, b, r).sum().backward()
    assert b not in g
    np.testing.assert_array_equal(g[y].numpy(), np.ones((6, 4), npdt(y.dtype)))
    np.testing.assert_array_equal(g[r].numpy(), np.ones((6, 4), npdt(y.dtype)))


def test_empty_rows(device):
    y, r, b = em.Var(em.zeros(0, 5, device=device)), em.zeros(0, 5, device=device), em.Var(em.ones(5, device=device))
    out = nn.ops.bias_residual(y, b, r)
    assert out.shape == (0, 5)
    np.testing.assert_array_equal(out.sum().backward()[b].numpy(), np.zeros(5, np.float32))


def test_errors(device):
    y, r, b = em.randn(3, 4, device=device), em.randn(3, 4, device=device), em.randn(4, device=device)
    op = nn.ops.bias_residual
    expect_error(lambda: op(y, em.randn(3, device=device), r), "bias_residual", em.ShapeError)
    expect_error(lambda: op(y, em.randn(1, 4, device=device), r), "bias_residual", em.ShapeError)
    expect_error(lambda: op(y, b, em.randn(4, 4, device=device)), "bias_residual", em.ShapeError)
    expect_error(lambda: op(y, b, em.randn(4, device=device)), "bias_residual", em.ShapeError)  # no broadcasting
    expect_error(lambda: op(em.tensor(1.0, device=device), em.randn(1, device=device), em.tensor(1.0, device=device)),
                 "bias_residual", em.ShapeError)
    other = em.float16 if y.dtype is not em.float16 else em.float32
    expect_error(lambda: op(y, b.to_dtype(other), r), "bias_residual", em.DTypeError)
    expect_error(lambda: op(y, b, r.to_dtype(other)), "bias_residual", em.DTypeError)
    yi = em.tensor(np.arange(12).reshape(3, 4), device=device)
    expect_error(lambda: op(yi, em.tensor(np.arange(4), device=device), yi), "bias_residual", em.DTypeError)
    expect_error(lambda: op(np.ones((3, 4)), b, r), "bias_residual", em.EmberTypeError)
    expect_error(lambda: op(y, b, np.ones((3, 4))), "bias_residual", em.EmberTypeError)
    expect_error(lambda: op(y, [1.0, 2.0, 3.0, 4.0], r), "bias_residual", em.EmberTypeError)
    if device.type != "cpu":
        expect_error(lambda: op(y, b, em.randn(3, 4, device=em.cpu)), "bias_residual", em.DeviceError)


def test_kernel_entry_checks_its_arguments(device):
    """The _C.fused entry refuses what the Python wrapper would: nothing reaches the kernel unchecked."""
    F = em._C.fused
    y, r, b = em.randn(3, 4, device=device), em.randn(3, 4, device=device), em.randn(4, device=device)
    if device.type != "cpu":  # no kernel on this device: the entry says so (the wrapper runs the two adds)
        expect_error(lambda: F.bias_residual(y._storage, y._layout, b._storage, b._layout, r._storage, r._layout),
                     "bias_residual", em.EmberError)
        return
    b5, r2 = em.randn(5), em.randn(4, 3)
    expect_error(lambda: F.bias_residual(y._storage, y._layout, b5._storage, b5._layout, r._storage, r._layout),
                 "bias_residual", em.ShapeError)
    expect_error(lambda: F.bias_residual(y._storage, y._layout, b._storage, b._layout, r2._storage, r2._layout),
                 "bias_residual", em.ShapeError)
    bd, rd = em.randn(4, dtype=em.float64), em.randn(3, 4, dtype=em.float64)
    expect_error(lambda: F.bias_residual(y._storage, y._layout, bd._storage, bd._layout, r._storage, r._layout),
                 "bias_residual", em.DTypeError)
    expect_error(lambda: F.bias_residual(y._storage, y._layout, b._storage, b._layout, rd._storage, rd._layout),
                 "bias_residual", em.DTypeError)
    # a layout reaching past its storage
    bad = em._C.Layout([3, 8], [8, 1], 0)
    expect_error(lambda: F.bias_residual(y._storage, bad, b._storage, b._layout, r._storage, bad), "bias_residual",
                 em.EmberError)


class _TorchLMBlock(torch.nn.Module):
    """nn.TransformerBlock(dim, heads, mlp=nn.MLP(dim, hidden, "gelu"), norm="layer") in torch (same names)."""

    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.attn = torch.nn.Module()
        self.attn.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.attn.proj = torch.nn.Linear(dim, dim, bias=False)
        self.mlp = torch.nn.Module()
        self.mlp.fc, self.mlp.proj = torch.nn.Linear(dim, hidden), torch.nn.Linear(hidden, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.attn.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp.proj(TF.gelu(self.mlp.fc(self.norm2(x))))


def test_transformer_block_with_mlp_equals_the_unfused_block_and_torch(device):
    em.manual_seed(4)
    dt = em.float32
    block = nn.TransformerBlock(16, 4, mlp=nn.MLP(16, 24, "gelu", dtype=dt, device=device), norm="layer",
                                dtype=dt, device=device)
    xn = np.random.default_rng(4).standard_normal((2, 7, 16)).astype(np.float32)
    wn = np.random.default_rng(5).standard_normal((2, 7, 16)).astype(np.float32)
    x, w = em.Var(em.tensor(xn, device=device)), em.tensor(wn, device=device)
    out = block(x)
    g = (out * w).sum().backward()
    # the block's sublayers called one by one, with the two adds: the same bits
    x1 = x + block.attn(block.norm1(x))
    ref = x1 + block.mlp(block.norm2(x1))
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    gr = (ref * w).sum().backward()
    params = dict(block.named_parameters())
    for p in [x, *params.values()]:
        np.testing.assert_array_equal(g[p].numpy(), gr[p].numpy())
    # and torch's block in float64
    tb = _TorchLMBlock(16, 4, 24).double()
    with torch.no_grad():
        for name, p in tb.named_parameters():
            p.copy_(torch.tensor(params[name].numpy().astype(np.float64)))
    xt = torch.tensor(xn.astype(np.float64), requires_grad=True)
    to = tb(xt)
    (to * torch.tensor(wn.astype(np.float64))).sum().backward()
    rtol, atol = TOL[dt.name]
    np.testing.assert_allclose(out.numpy(), to.detach().numpy(), rtol=rtol * 10, atol=atol * 10)
    np.testing.assert_allclose(g[x].numpy(), xt.grad.numpy(), rtol=rtol * 10, atol=atol * 20)
    for name, p in tb.named_parameters():
        np.testing.assert_allclose(g[params[name]].numpy(), p.grad.numpy(), rtol=rtol * 10, atol=atol * 100,
                                   err_msg=name)


def test_mlp_residual_falls_back_where_the_op_does_not_apply(device):
    """A proj without bias, or a residual of another shape (broadcast), keeps the plain adds."""
    em.manual_seed(5)
    x = em.randn(2, 3, 6, device=device)
    for bias in (True, False):
        m = nn.MLP(6, 8, "gelu", bias=bias, device=device)
        for r in (em.randn(2, 3, 6, device=device), em.randn(6, device=device)):
            np.testing.assert_array_equal(m._residual(x, r).numpy(), (r + m(x)).numpy())
