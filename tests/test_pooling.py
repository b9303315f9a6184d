"""Pooling against torch: max_pool1d/2d (with indices), avg_pool1d/2d and adaptive_avg_pool1d/2d — values
and gradients on strided inputs in every float dtype, finite differences in float64, the modules, and
each bad argument."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from devcheck import gradcheck
from nn_check import KINDS, compare

import ember as em

from conftest import FLOATS, WIDE_NP, expect_error

MAX2D = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=2, stride=3, ceil_mode=True),
    dict(kernel_size=3, stride=1, padding=1, dilation=2),
]
AVG2D = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=2, divisor_override=3),
]


@pytest.mark.parametrize("kw", MAX2D, ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_max_pool2d_matches_torch(kw, kind, rng, device):
    compare(lambda x: em.nn.max_pool2d(x, **kw), lambda x: F.max_pool2d(x, **kw), [(2, 3, 9, 10)], em.float64, kind,
            rng, device)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_pooling_every_dtype(dt, rng, device):
    kw = dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)
    compare(lambda x: em.nn.max_pool2d(x, **kw), lambda x: F.max_pool2d(x, **kw), [(2, 3, 8, 7)], dt, "transposed",
            rng, device)
    compare(lambda x: em.nn.avg_pool2d(x, **kw), lambda x: F.avg_pool2d(x, **kw), [(2, 3, 8, 7)], dt, "offset",
            rng, device)
    compare(lambda x: em.nn.adaptive_avg_pool2d(x, (3, 4)), lambda x: F.adaptive_avg_pool2d(x, (3, 4)),
            [(2, 3, 8, 7)], dt, "stepped", rng, device)
    compare(lambda x: em.nn.max_pool1d(x, 3, 2, 1), lambda x: F.max_pool1d(x, 3, 2, 1), [(2, 3, 11)], dt,
            "contiguous", rng, device)


def test_max_pool_indices_match_torch(rng):
    for kw in MAX2D:
        x = rng.standard_normal((2, 3, 9, 10)).astype(WIDE_NP)
        v, i = em.nn.max_pool2d(em.tensor(x), **kw, return_indices=True)
        tv, ti = F.max_pool2d(torch.tensor(x), **kw, return_indices=True)
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        assert i.dtype is em.int64
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
    x = rng.standard_normal((3, 13)).astype(WIDE_NP)  # unbatched 1-D
    v, i = em.nn.max_pool1d(em.tensor(x), 4, 3, 2, 1, True, True)
    tv, ti = F.max_pool1d(torch.tensor(x), 4, 3, 2, 1, True, True)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())


def test_max_pool_all_negative_input_never_picks_the_padding(rng):
    # im2col pads with zeros: a window of negatives at the border must still give its own maximum.
    x = -rng.uniform(1, 2, size=(1, 2, 5, 5)).astype(WIDE_NP)
    for t in (em.tensor(x), em.Var(x)):  # the running-maximum path and the unfold + argmax one
        got = em.nn.max_pool2d(t, 3, 2, 1, ceil_mode=True).numpy()
        np.testing.assert_array_equal(got, F.max_pool2d(torch.tensor(x), 3, 2, 1, ceil_mode=True).numpy())
        assert (got < 0).all()


@pytest.mark.parametrize("kw", AVG2D, ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_avg_pool2d_matches_torch(kw, kind, rng, device):
    compare(lambda x: em.nn.avg_pool2d(x, **kw), lambda x: F.avg_pool2d(x, **kw), [(2, 3, 9, 10)], em.float64, kind,
            rng, device)


@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=4, stride=2, padding=2, dilation=1),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)], ids=str)
def test_1d_pools_match_torch(kw, rng, device):
    compare(lambda x: em.nn.max_pool1d(x, **kw), lambda x: F.max_pool1d(x, **kw), [(2, 4, 15)], em.float64,
            "transposed", rng, device)
    akw = {k: v for k, v in kw.items() if k != "dilation"}
    compare(lambda x: em.nn.avg_pool1d(x, **akw), lambda x: F.avg_pool1d(x, **akw), [(2, 4, 15)], em.float64,
            "stepped", rng, device)
    compare(lambda x: em.nn.avg_pool1d(x, **akw, count_include_pad=False),
            lambda x: F.avg_pool1d(x, **akw, count_include_pad=False), [(4, 15)], em.float64, "offset", rng, device)


@pytest.mark.parametrize("size", [(1, 1), (3, 5), (4, 7), (None, 2), 6, (9, 10)], ids=str)
def test_adaptive_avg_pool2d_matches_torch(size, rng, device):
    compare(lambda x: em.nn.adaptive_avg_pool2d(x, size), lambda x: F.adaptive_avg_pool2d(x, size),
            [(2, 3, 9, 10)], em.float64, "transposed", rng, device)


@pytest.mark.parametrize("size", [1, 4, 5, 13, 20])
def test_adaptive_avg_pool1d_matches_torch(size, rng, device):
    compare(lambda x: em.nn.adaptive_avg_pool1d(x, size), lambda x: F.adaptive_avg_pool1d(x, size), [(2, 3, 13)],
            em.float64, "stepped", rng, device)


def test_pool_gradients_by_finite_differences(rng):
    x = em.tensor(rng.standard_normal((1, 2, 6, 5)).astype(WIDE_NP))
    fns = [
        lambda t: em.nn.max_pool2d(t, 3, 2, 1, ceil_mode=True),
        lambda t: em.nn.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        lambda t: em.nn.adaptive_avg_pool2d(t, (4, 3)),
        lambda t: em.nn.max_pool1d(t.reshape(2, 30), 4, 3, 2, dilation=2),
        lambda t: em.nn.avg_pool1d(t.reshape(2, 30), 4, 3, 2),
        lambda t: em.nn.adaptive_avg_pool1d(t.reshape(2, 30), 7),
    ]
    for fn in fns:
        assert gradcheck(fn, [x])


def test_pool_modules_match_functions(rng):
    x = em.tensor(rng.standard_normal((2, 3, 8, 8)).astype(np.float32))
    pairs = [
        (em.nn.MaxPool2d(3, 2, 1), F.max_pool2d(torch.tensor(x.numpy()), 3, 2, 1)),
        (em.nn.AvgPool2d(2, count_include_pad=False), F.avg_pool2d(torch.tensor(x.numpy()), 2)),
        (em.nn.AdaptiveAvgPool2d((1, 1)), F.adaptive_avg_pool2d(torch.tensor(x.numpy()), 1)),
    ]
    for mod, want in pairs:
        np.testing.assert_allclose(mod(x).numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    x1 = x.reshape(2, 3, 64)
    t1 = torch.tensor(x1.numpy())
    np.testing.assert_allclose(em.nn.MaxPool1d(4)(x1).numpy(), F.max_pool1d(t1, 4).numpy())
    np.testing.assert_allclose(em.nn.AvgPool1d(4, 2, 1)(x1).numpy(), F.avg_pool1d(t1, 4, 2, 1).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(em.nn.AdaptiveAvgPool1d(5)(x1).numpy(), F.adaptive_avg_pool1d(t1, 5).numpy(), atol=1e-6,
                               rtol=1e-6)
    v, i = em.nn.MaxPool1d(4, return_indices=True)(x1)
    np.testing.assert_array_equal(i.numpy(), F.max_pool1d(t1, 4, return_indices=True)[1].numpy())


def test_pool_errors():
    x = em.randn(2, 3, 6, 6)
    expect_error(lambda: em.nn.max_pool2d(x, 0), "max_pool2d", em.EmberValueError)
    expect_error(lambda: em.nn.max_pool2d(x, 2, padding=2), "max_pool2d", em.EmberValueError)
    expect_error(lambda: em.nn.max_pool2d(x, 7), "max_pool2d", em.ShapeError)
    expect_error(lambda: em.nn.max_pool2d(x, (2, 2, 2)), "max_pool2d", em.EmberTypeError)
    expect_error(lambda: em.nn.max_pool2d(x, 2.5), "max_pool2d", em.EmberTypeError)
    expect_error(lambda: em.nn.max_pool2d(x.reshape(6, 36), 2), "max_pool2d", em.ShapeError)
    expect_error(lambda: em.nn.max_pool2d(em.ones(2, 3, 4, 4, dtype="int64"), 2), "max_pool2d", em.DTypeError)
    expect_error(lambda: em.nn.max_pool2d(x.numpy(), 2), "max_pool2d", em.EmberTypeError)
    expect_error(lambda: em.nn.max_pool2d(x, 2, ceil_mode=2), "max_pool2d", em.EmberValueError)
    expect_error(lambda: em.nn.max_pool1d(x, 2), "max_pool1d", em.ShapeError)
    expect_error(lambda: em.nn.max_pool1d(em.randn(2, 3, 5), 2, stride=0), "max_pool1d", em.EmberValueError)
    expect_error(lambda: em.nn.avg_pool2d(x, 2, stride=-1), "avg_pool2d", em.EmberValueError)
    expect_error(lambda: em.nn.avg_pool2d(x, 2, divisor_override=0), "avg_pool2d", em.EmberValueError)
    expect_error(lambda: em.nn.avg_pool1d(em.randn(2, 3, 5), 6), "avg_pool1d", em.ShapeError)
    expect_error(lambda: em.nn.adaptive_avg_pool2d(x, (0, 2)), "adaptive_avg_pool2d", em.EmberValueError)
    expect_error(lambda: em.nn.adaptive_avg_pool2d(x, (1, 2, 3)), "adaptive_avg_pool2d", em.EmberTypeError)
    expect_error(lambda: em.nn.adaptive_avg_pool1d(x, 2), "adaptive_avg_pool1d", em.ShapeError)
    expect_error(lambda: em.nn.adaptive_avg_pool2d(em.randn(2, 3, 0, 4), 2), "adaptive_avg_pool2d", em.ShapeError)


@pytest.mark.parametrize("kw", MAX2D, ids=str)
@pytest.mark.parametrize("kind", KINDS)
def test_max_pool2d_without_gradient_matches_torch(kw, kind, rng, device):
    # Untracked inputs take the running-maximum-over-taps path instead of unfold + argmax.
    x = -rng.uniform(0.5, 3.0, size=(2, 3, 9, 10)).astype(WIDE_NP)  # all negative: a padding zero must never win
    compare(lambda t: em.nn.max_pool2d(t, **kw), lambda t: F.max_pool2d(t, **kw), [(2, 3, 9, 10)], em.float64, kind,
            rng, device, grads=False)
    with em.no_grad():
        got = em.nn.max_pool2d(em.Var(x), **kw)
    np.testing.assert_array_equal(got.numpy(), F.max_pool2d(torch.tensor(x), **kw).numpy())


@pytest.mark.parametrize("kw", AVG2D, ids=str)
def test_avg_pool2d_wide_axis_path_matches_torch(kw, rng, monkeypatch):
    # Past _DENSE_AXIS_MAX an axis is averaged over unfold's columns instead of a GEMM.
    import ember.nn.pooling as pooling

    monkeypatch.setattr(pooling, "_DENSE_AXIS_MAX", 0)
    compare(lambda x: em.nn.avg_pool2d(x, **kw), lambda x: F.avg_pool2d(x, **kw), [(2, 3, 9, 10)], em.float64,
            "transposed", rng)


def test_max_pool_without_gradient_never_aliases_or_writes_its_input(rng):
    x = em.tensor(rng.standard_normal((1, 2, 5, 5)).astype(WIDE_NP))
    before = x.numpy().copy()
    with em.no_grad():
        y = em.nn.max_pool2d(x, 1)  # one tap: the result must still be a new storage
        z = em.nn.max_pool2d(x, 2, 1, 1)  # partial taps write into the result, never into x
    y.zero_set()
    np.testing.assert_array_equal(x.numpy(), before)
    np.testing.assert_array_equal(z.numpy(), F.max_pool2d(torch.tensor(before), 2, 1, 1).numpy())
