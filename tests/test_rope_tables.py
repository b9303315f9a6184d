"""RoPE with caller-supplied cos/sin tables (candle's rope, rope_i, rope_thd; em.nn.ops.rope_tables):
values against a torch reference in float64 for both pair layouts, (T, n) and per-batch (B, T, n) tables,
partial rotation, strided inputs and every float dtype; gradients of the fused path and, when the tables
track one, of the composite; bad input."""
import numpy as np
import pytest
import torch
from devcheck import gradcheck

import ember as em
from ember.nn import ops

from conftest import FLOATS, WIDE, assert_close, expect_error, f64, make_view


def torch_rope(x, cos, sin, interleaved):
    """The reference in float64: x (..., T, D), cos/sin (T, n) or (B, T, n) broadcast over the heads."""
    x, c, s = (torch.from_numpy(f64(a)) for a in (x, cos, sin))
    if c.ndim == 3 and x.ndim == 4:
        c, s = c[:, None], s[:, None]
    n = c.shape[-1]
    rot, rest = x[..., : 2 * n], x[..., 2 * n:]
    if interleaved:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack([a * c - b * s, a * s + b * c], -1).reshape(rot.shape)
    else:
        a, b = rot[..., :n], rot[..., n:]
        out = torch.cat([a * c - b * s, a * s + b * c], -1)
    return torch.cat([out, rest], -1).numpy()


def tables(rng, shape):
    theta = rng.uniform(-4, 4, shape)
    return np.cos(theta), np.sin(theta)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("kind", ["contiguous", "transposed", "offset", "stepped"])
@pytest.mark.parametrize("batched", [False, True])
def test_matches_torch(rng, dt, interleaved, kind, batched, device):
    B, H, T, D, n = 2, 3, 5, 12, 6 if not batched else 4  # n < D / 2: features from 2n pass through
    x, xn = make_view(rng, (B, H, T, D), dt, kind, device=device)
    c, s = tables(rng, (B, T, n) if batched else (T, n))
    ct, st = em.tensor(c, dtype=WIDE, device=device), em.tensor(s, dtype=WIDE, device=device)
    y = ops.rope_tables(x, ct, st, interleaved=interleaved)
    assert y.shape == x.shape and y.dtype == dt
    assert_close(y, torch_rope(xn, c.astype(WIDE.name), s.astype(WIDE.name), interleaved), dt)
    # candle's names
    fn = ops.rope_i if interleaved else ops.rope
    assert_close(fn(x, ct, st), torch_rope(xn, c.astype(WIDE.name), s.astype(WIDE.name), interleaved), dt)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_rope_thd_layout(rng, dt, device):
    B, T, H, D = 2, 7, 3, 8
    x, xn = make_view(rng, (B, T, H, D), dt, "contiguous", device=device)
    c, s = tables(rng, (T, D // 2))
    y = ops.rope_thd(x, em.tensor(c, dtype=WIDE, device=device), em.tensor(s, dtype=WIDE, device=device))
    assert y.shape == (B, T, H, D)
    want = torch_rope(np.swapaxes(xn, 1, 2), c.astype(WIDE.name), s.astype(WIDE.name), False)
    assert_close(y, np.swapaxes(want, 1, 2), dt)


def test_tables_equal_to_the_position_rope(rng, device):
    # the angles of ops.rope's default frequencies, given as tables, give ops.rope's result
    x, _ = make_view(rng, (2, 2, 9, 8), WIDE, "contiguous", device=device)
    inv = 10000.0 ** (-np.arange(4) * 2 / 8)
    theta = np.arange(9)[:, None] * inv[None]
    y = ops.rope(x, em.tensor(np.cos(theta), dtype=WIDE, device=device), em.tensor(np.sin(theta), dtype=WIDE, device=device))
    np.testing.assert_allclose(y.numpy(), ops.rope(x, 8).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("batched", [False, True])
def test_gradients(rng, interleaved, batched, device):
    x = em.tensor(rng.standard_normal((2, 2, 4, 8)), dtype=WIDE, device=device)
    c, s = tables(rng, (2, 4, 3) if batched else (4, 3))
    ct, st = em.tensor(c, dtype=WIDE, device=device), em.tensor(s, dtype=WIDE, device=device)
    gradcheck(lambda a, cc, ss: ops.rope_tables(a, cc, ss, interleaved), [x], consts=[ct, st])  # fused
    gradcheck(lambda a, cc, ss: ops.rope_tables(a, cc, ss, interleaved), [x, ct, st])  # composite: tables too
    # second order through the fused backward (recorded when the graph is kept)
    v = em.Var(x)
    g = ops.rope_tables(v, ct, st, interleaved).sqr().sum().backward(create_graph=True)[v]
    g2 = (g * g).sum().backward()[v]
    assert g2.shape == x.shape and np.isfinite(g2.numpy()).all()


def test_bad_input(rng, device):
    x = em.tensor(rng.standard_normal((2, 3, 4, 8)), dtype=WIDE, device=device)
    c = em.tensor(np.ones((4, 4)), dtype=WIDE, device=device)
    expect_error(lambda: ops.rope_tables(x, c, c.narrow(0, 0, 3)), "rope", em.ShapeError)
    expect_error(lambda: ops.rope_tables(x, em.ones(5, 4, dtype=WIDE, device=device),
                                         em.ones(5, 4, dtype=WIDE, device=device)), "rope", em.ShapeError)
    expect_error(lambda: ops.rope_tables(x, em.ones(4, 5, dtype=WIDE, device=device),
                                         em.ones(4, 5, dtype=WIDE, device=device)), "rope", em.ShapeError)
    expect_error(lambda: ops.rope_i(x, em.ones(3, 4, 4, dtype=WIDE, device=device),
                                    em.ones(3, 4, 4, dtype=WIDE, device=device)), "rope_i", em.ShapeError)
    expect_error(lambda: ops.rope_tables(x, em.ones(4, 4, dtype=em.int64, device=device), c), "rope", em.DTypeError)
    expect_error(lambda: ops.rope_tables(x, c, "sin"), "rope", em.EmberTypeError)
    expect_error(lambda: ops.rope_thd(x[0], c, c), "rope_thd", em.ShapeError)
    expect_error(lambda: ops.rope(x, c), "rope", em.EmberTypeError)
    if device != em.cpu:
        expect_error(lambda: ops.rope_tables(x, c.to_device(em.cpu), c), "rope", em.DeviceError)
