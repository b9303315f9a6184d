"""Fused RoPE (em.nn.ops.rope, em.nn.RoPE): values against a torch reference in float64 for both layouts,
partial dims, offsets (int and per batch), custom freqs, strided inputs and every float dtype; the fused
backward and the composite's gradients; bad input."""
import math

import numpy as np
import pytest
import torch
from devcheck import gradcheck

import ember as em
from ember.nn import ops

from conftest import DEFAULT_DEVICE, FLOATS, WIDE, assert_close, expect_error, f64, make_view


def float_angles(dt):
    """Whether rope in dt on the default device computes its angles in float: the CPU does in double, and a
    GPU's kernels (Metal's, CUDA's) in float, except CUDA's float64 ones (double). A float angle
    (pos * inv_freq) is off by up to pos * 2^-24 rad: outputs get that much more absolute tolerance per unit of
    position."""
    return DEFAULT_DEVICE.type != "cpu" and dt is not em.float64


def check(y, ref, dt, max_pos):
    """assert_close, widened on a device computing the angles in float by the angle's rounding."""
    if not float_angles(dt):
        return assert_close(y, ref, dt)
    return assert_close(y, ref, dt, atol=1e-6 + 4e-7 * max_pos * float(np.max(np.abs(ref))))


def torch_rope(x, dims, traditional=False, base=10000.0, scale=1.0, offset=0, freqs=None):
    """The reference from torch ops in float64: cos/sin of (offset + l) * scale * inv_freq, then the pair
    rotation (Llama's rotate_half layout, or GPT-J's interleaved one). offset: an int or a (B,) array."""
    x = torch.from_numpy(f64(x))
    L, half = x.shape[-2], dims // 2
    inv = (1.0 / torch.from_numpy(f64(freqs)) if freqs is not None
           else base ** (-2.0 * torch.arange(half, dtype=torch.float64) / dims))
    off = torch.as_tensor(np.asarray(offset, dtype=np.float64))
    if off.ndim == 1:  # per batch: (B, 1, ..., 1)
        off = off.reshape(-1, *([1] * (x.ndim - 1)))
    t = (torch.arange(L, dtype=torch.float64).reshape(L, 1) + off) * scale
    theta = t * inv
    c, s = theta.cos(), theta.sin()
    out = x.clone()
    if traditional:
        a, b = x[..., 0:dims:2], x[..., 1:dims:2]
        out[..., 0:dims:2], out[..., 1:dims:2] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., :half], x[..., half:dims]
        out[..., :half], out[..., half:dims] = a * c - b * s, a * s + b * c
    return out.numpy()


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("traditional", [False, True])
@pytest.mark.parametrize("kind", ["contiguous", "transposed", "narrowed", "offset"])
def test_rope_matches_torch_reference(dt, traditional, kind, rng):
    shape = (2, 3, 7, 12)
    x, xn = make_view(rng, shape, dt, kind)
    for dims, offset in ((12, 0), (8, 5), (2, 1000)):
        y = ops.rope(x, dims, traditional=traditional, offset=offset)
        assert y.shape == shape and y.dtype == dt and y.is_contiguous()
        check(y, torch_rope(xn, dims, traditional, offset=offset), dt, offset + 7)
        if dims < 12:  # the features past dims pass through untouched
            np.testing.assert_array_equal(y.numpy()[..., dims:], np.asarray(xn)[..., dims:])


@pytest.mark.parametrize("traditional", [False, True])
def test_rope_base_scale_freqs_and_batch_offsets(traditional, rng):
    dt = WIDE
    x, xn = make_view(rng, (3, 2, 5, 10), dt, "contiguous")
    check(ops.rope(x, 10, traditional, base=500.0, scale=0.25, offset=3),
          torch_rope(xn, 10, traditional, 500.0, 0.25, 3), dt, 8)
    fr = rng.uniform(1.0, 50.0, size=4)
    check(ops.rope(x, 8, traditional, base=None, offset=2, freqs=em.tensor(fr, dtype=dt)),
          torch_rope(xn, 8, traditional, offset=2, freqs=fr), dt, 7)
    offs = np.array([0, 7, 130])
    for o in (em.tensor(offs), em.tensor(offs.astype(np.uint32))):  # any int dtype, one per batch
        check(ops.rope(x, 10, traditional, offset=o), torch_rope(xn, 10, traditional, offset=offs), dt, 135)
    check(ops.rope(x, 10, traditional, offset=em.tensor(9)), torch_rope(xn, 10, traditional, offset=9), dt, 14)
    # rows of a 2-D input are positions
    x2, x2n = make_view(rng, (6, 4), dt, "transposed")
    check(ops.rope(x2, 4, traditional, offset=1), torch_rope(x2n, 4, traditional, offset=1), dt, 7)


def test_rope_long_positions_accurate():
    # positions past 1e5: on the CPU the angles are computed in double, so float32 outputs keep float32
    # accuracy (a float angle there is off by up to 0.012 rad); Metal's float angles get that bound
    x = np.random.default_rng(3).standard_normal((1, 64, 32)).astype(np.float32)
    y = ops.rope(em.tensor(x), 32, offset=200_000)
    atol = 0.05 if float_angles(em.float32) else 5e-5
    np.testing.assert_allclose(f64(y.numpy()), torch_rope(x, 32, offset=200_000), rtol=0, atol=atol)


@pytest.mark.parametrize("traditional", [False, True])
def test_rope_gradients(traditional, rng):
    x = em.tensor(rng.standard_normal((2, 3, 4, 10)), dtype=WIDE)
    # the fused backward (the rotation by -theta) and, with freqs, the fused path's x gradient
    gradcheck(lambda a: ops.rope(a, 8, traditional, offset=3), [x])
    fr = em.tensor(rng.uniform(1.0, 20.0, size=3), dtype=WIDE)
    gradcheck(lambda a, f: ops.rope(a, 6, traditional, offset=1, freqs=f), [x], consts=[fr])
    # freqs that track a gradient take the composite, which differentiates through them too
    gradcheck(lambda a, f: ops.rope(a, 6, traditional, offset=1, freqs=f), [x, fr])
    offs = np.array([2, 5])
    gradcheck(lambda a, o: ops.rope(a, 8, traditional, offset=o), [x], consts=[em.tensor(offs)])


def test_rope_backward_is_fused_and_second_order(rng):
    x = em.Var(em.tensor(rng.standard_normal((2, 5, 8)), dtype=WIDE))
    g = em.tensor(rng.standard_normal((2, 5, 8)), dtype=WIDE)
    y = ops.rope(x, 8, offset=4)
    assert y.op.name == "rope"
    dx = (y * g).sum().backward()[x]
    # rope is a rotation: its adjoint is the inverse rotation, so rope(dx) recovers g
    assert_close(ops.rope(dx, 8, offset=4), g.numpy(), WIDE)
    # create_graph: the backward is recorded (rope by -theta), so a second derivative exists (zero: linear)
    gx = ((y * y).sum()).backward(create_graph=True)[x]
    assert_close(gx, 2 * x.numpy(), WIDE)  # |rope(x)|^2 = |x|^2
    assert_close((gx * g).sum().backward()[x], 2 * g.numpy(), WIDE)


def test_rope_composite_reference_and_module(rng):
    dt = WIDE
    x, xn = make_view(rng, (2, 2, 6, 8), dt, "narrowed")
    for trad in (False, True):
        assert_close(ops.rope_slow(x, 6, trad, offset=2), torch_rope(xn, 6, trad, offset=2), dt)
    m = em.nn.RoPE(8, traditional=True, base=100.0)
    assert list(m.parameters()) == [] and "dims=8" in repr(m)
    assert_close(m(x, offset=3), torch_rope(xn, 8, True, 100.0, 1.0, 3), dt)


def test_rope_float32_against_reference(rng):
    x = rng.standard_normal((2, 3, 9, 16)).astype(np.float32)
    for trad in (False, True):
        got = ops.rope(em.tensor(x), 12, trad, offset=5).numpy()
        np.testing.assert_allclose(got, torch_rope(x, 12, trad, offset=5), rtol=1e-5, atol=1e-5)


def test_rope_bad_input(rng):
    x = em.tensor(rng.standard_normal((2, 4, 8)).astype(np.float32))
    expect_error(lambda: ops.rope(x, 7), "rope", em.EmberValueError)
    expect_error(lambda: ops.rope(x, 10), "rope", em.EmberValueError)
    expect_error(lambda: ops.rope(x, 0), "rope", em.EmberValueError)
    expect_error(lambda: ops.rope(x, 8, base=-1.0), "rope", em.EmberValueError)
    expect_error(lambda: ops.rope(em.zeros(8), 8), "rope", em.ShapeError)
    expect_error(lambda: ops.rope(em.zeros(2, 8, dtype=em.int64), 8), "rope", em.DTypeError)
    expect_error(lambda: ops.rope(x, 8, offset=em.tensor(np.array([1, 2, 3]))), "rope", em.ShapeError)
    expect_error(lambda: ops.rope(x, 8, offset=em.tensor(1.5)), "rope", em.DTypeError)
    expect_error(lambda: ops.rope(x, 8, offset=1.5), "rope", em.EmberTypeError)
    expect_error(lambda: ops.rope(x, 8, freqs=em.ones(3)), "rope", em.ShapeError)
    expect_error(lambda: ops.rope(x, 8, freqs=em.ones(4, dtype=em.int64)), "rope", em.DTypeError)
    expect_error(lambda: ops.rope("x", 8), "rope", em.EmberTypeError)
    expect_error(lambda: ops.rope(x, 8, traditional=2), "rope", em.EmberValueError)
    # nothing was corrupted: a good call still works
    assert ops.rope(x, 8).shape == (2, 4, 8)


def test_rope_empty_and_math_identity(rng):
    assert ops.rope(em.zeros(0, 3, 4), 4).shape == (0, 3, 4)
    assert ops.rope(em.zeros(2, 0, 4), 4).shape == (2, 0, 4)
    # position 0 is the identity; the rotation keeps each pair's norm
    x = rng.standard_normal((1, 5, 6))
    y = ops.rope(em.tensor(x, dtype=WIDE), 6, offset=0).numpy()
    np.testing.assert_allclose(y[:, 0], x[:, 0], rtol=1e-6)
    np.testing.assert_allclose(np.hypot(y[..., :3], y[..., 3:]), np.hypot(x[..., :3], x[..., 3:]), rtol=1e-5)
    assert math.isfinite(float(y.sum()))
